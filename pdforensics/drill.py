"""`pdforensics drill`: a bounded abort drill against a live PD deployment, then its verdict.

Plan → run (with brakes read from the engines' /metrics) → wait timeout + grace → ingest the drill's
window → answer. The answer reuses the verdict (pdforensics.verdict) on that window and what the
drill itself knows (which requests it aborted, when). docs/drill.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import secrets
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pdforensics.errors import SourceError, UsageError

if TYPE_CHECKING:
    from pdforensics.verdict import Verdict

ABORT_AT = ("transfer", "first-token", "random")
# Where `transfer` aborts, as a fraction of the warm-up's median time to first token: the KV
# transfer ends just before the first token, and the prefill forward is done well before.
TRANSFER_POINT = 0.7
INFLIGHT = "sglang:num_prefill_inflight_queue_reqs"
QUEUE = "sglang:num_queue_reqs"
THROUGHPUT = "sglang:gen_throughput"
RUNNING = "sglang:num_running_reqs"
ANSWERS = ("watchdog_proven", "no_pin_under_race", "race_not_reproduced", "watchdog_missed", "inconclusive")
# `drill --check`: the monitoring-plugin convention, as `verdict --check`
CHECK_CODES = {
    "watchdog_proven": 0, "no_pin_under_race": 0, "race_not_reproduced": 1, "watchdog_missed": 2,
    "inconclusive": 3,
}  # fmt: skip
CHECK_STATUS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}


@dataclass
class Brakes:
    max_inflight_rise: int = 20  # the prefill inflight queue above its pre-drill baseline by more
    max_throughput_drop: float = 0.5  # decode gen throughput below (1 - this) x its warm-up level
    max_errors: int = 5  # HTTP 5xx and connection errors, beyond this count
    max_queued_requests: int | None = None  # the deployment's --max-queued-requests (None: unchecked)
    max_duration_s: float = 300.0


@dataclass
class Plan:
    router: str
    concurrency: int = 15
    rounds: int = 2
    abort_at: str = "transfer"
    prompt_tokens: int = 4096
    max_new_tokens: int = 64
    warmup: int = 3
    endpoint: str = "generate"  # "generate" (SGLang's /generate) | "openai" (/v1/completions)
    model: str = "default"
    watchdog_timeout_s: float = 300.0
    grace_s: float = 10.0
    poll_s: float = 1.0
    metrics: list[str] = field(default_factory=list)  # engines' /metrics URLs; [] = discover
    brakes: Brakes = field(default_factory=Brakes)
    seed: int = 0
    run_id: str = ""

    def __post_init__(self) -> None:
        if self.abort_at not in ABORT_AT:
            raise UsageError(f"--abort-at {self.abort_at}: one of {', '.join(ABORT_AT)}")
        if self.endpoint not in ("generate", "openai"):
            raise UsageError(f"--endpoint {self.endpoint}: one of generate, openai")
        for name, value in (("--concurrency", self.concurrency), ("--rounds", self.rounds)):
            if value < 1:
                raise UsageError(f"{name} must be at least 1")
        if self.warmup < 1:
            raise UsageError("--warmup must be at least 1 (the abort moment is measured from it)")
        if self.watchdog_timeout_s <= 0 or self.brakes.max_duration_s <= 0:
            raise UsageError("--watchdog-timeout and --max-duration must be > 0")
        url = urlsplit(self.router)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise UsageError(f"--router {self.router}: an http:// URL (e.g. http://127.0.0.1:30000)")
        self.router = self.router.rstrip("/")
        self.run_id = self.run_id or secrets.token_hex(4)  # fresh per run: rids never repeat in the logs

    @property
    def requests(self) -> int:
        return self.concurrency * self.rounds

    def text(self) -> str:
        b = self.brakes
        where = {
            "transfer": f"at {TRANSFER_POINT:.0%} of the warm-up's median time to first token (racing the KV transfer)",
            "first-token": "when the first token arrives (after the transfer: a control, no race expected)",
            "random": "at a random moment between 20% and 120% of the warm-up's time to first token",
        }[self.abort_at]
        queued = (
            f"within 10% of --max-queued-requests {b.max_queued_requests}"
            if b.max_queued_requests
            else "unchecked (no --max-queued-requests)"
        )
        lines = [
            f"drill plan (run {self.run_id}) against {self.router}, {'/generate' if self.endpoint == 'generate' else '/v1/completions'} streaming:",
            f"  warm-up:      {self.warmup} unaborted request(s), one at a time, to time the first token",
            f"  then:         {self.rounds} round(s) of {self.concurrency} concurrent request(s) ({self.requests} in all, never more than {self.concurrency} at once)",
            f"  each aborted: {where}, by closing its connection",
            f"  prompt:       ~{self.prompt_tokens} tokens, max_new_tokens {self.max_new_tokens}; rid drill-{self.run_id}-<round>-<n>",
            f"  brakes:       stop at once if the prefill inflight queue rises > {b.max_inflight_rise} above its baseline, "
            f"decode throughput drops > {b.max_throughput_drop:.0%}, > {b.max_errors} HTTP 5xx/connection errors, "
            f"the queue is {queued}, or after {b.max_duration_s:g} s",
            f"  metrics:      {', '.join(self.metrics) if self.metrics else 'the engines the router lists (/workers), else the router /metrics'}, every {self.poll_s:g} s",
            f"  then waits:   the watchdog timeout {self.watchdog_timeout_s:g} s + grace {self.grace_s:g} s, ingests the window and answers",
        ]
        return "\n".join(lines)


@dataclass
class Sent:
    rid: str
    round: int
    sent_t: float
    abort_after_s: float | None  # planned; None: at the first token
    status: int | None = None
    first_token_s: float | None = None
    aborted_s: float | None = None  # when the drill closed it
    finished: bool = False  # the stream ended before the drill aborted it
    error: str | None = None
    closed_t: float | None = None  # when the drill's connection was closed (monotonic)


@dataclass
class Run:
    plan: Plan
    started_t: float
    ended_t: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    abort_after_s: float | None = None
    sent: list[Sent] = field(default_factory=list)
    brakes: list[dict[str, str]] = field(default_factory=list)
    baseline: dict[str, float | None] = field(default_factory=dict)
    final: dict[str, float | None] = field(default_factory=dict)
    metrics_urls: list[str] = field(default_factory=list)
    interrupted: bool = False
    errors: int = 0

    @property
    def aborted(self) -> list[Sent]:
        return [s for s in self.sent if s.aborted_s is not None]


# ------------------------------------------------------------------ metrics


def scrape(url: str, timeout: float = 5.0) -> dict[str, float]:
    """One /metrics: each sample name summed over its label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        text = resp.read().decode("utf-8", "replace")
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def discover_metrics(router: str) -> list[str]:
    """The engines' /metrics from the router's worker list (sgl-model-gateway `GET /workers`)."""
    try:
        with urllib.request.urlopen(f"{router}/workers", timeout=5) as resp:
            workers = json.loads(resp.read()).get("workers") or []
        urls = [f"{w['url'].rstrip('/')}/metrics" for w in workers if isinstance(w, dict) and w.get("url")]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        urls = []
    return urls or [f"{router}/metrics"]


class _Gauges:
    """Every engine's gauges, per engine and summed."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    def sample(self) -> list[dict[str, float]]:
        return [scrape(u) for u in self.urls]

    @staticmethod
    def total(samples: list[dict[str, float]], name: str) -> float | None:
        vals = [s[name] for s in samples if name in s]
        return sum(vals) if vals else None

    @staticmethod
    def most(samples: list[dict[str, float]], name: str) -> float | None:
        vals = [s[name] for s in samples if name in s]
        return max(vals) if vals else None


# ------------------------------------------------------------------ one request


def _request_bytes(plan: Plan, rid: str, max_new_tokens: int) -> bytes:
    url = urlsplit(plan.router)
    prompt = " ".join(["hello"] * plan.prompt_tokens)
    if plan.endpoint == "generate":
        path = "/generate"
        body: dict[str, Any] = {
            "text": prompt, "rid": rid, "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        }  # fmt: skip
    else:
        path = "/v1/completions"
        body = {
            "model": plan.model,
            "prompt": prompt,
            "max_tokens": max_new_tokens,
            "stream": True,
            "rid": rid,
        }
    data = json.dumps(body).encode()
    head = (
        f"POST {url.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


def _connect(plan: Plan) -> socket.socket:
    url = urlsplit(plan.router)
    port = url.port or (443 if url.scheme == "https" else 80)
    sock = socket.create_connection((url.hostname or "127.0.0.1", port), timeout=10)
    if url.scheme == "https":
        import ssl

        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=url.hostname)
    return sock


def _close(sock: socket.socket) -> None:
    """Close the client connection: SGLang sees the client gone and aborts the request."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def one_request(plan: Plan, s: Sent, stop: threading.Event, max_new_tokens: int, timeout_s: float) -> None:
    """Send it, read its stream, close it at its abort moment (or at `stop`)."""
    try:
        sock = _connect(plan)
    except OSError as exc:
        s.error = f"connect: {exc.strerror or exc}"
        return
    try:
        sock.sendall(_request_bytes(plan, s.rid, max_new_tokens))
        sock.settimeout(0.005)
        buf = b""
        while True:
            now = time.monotonic() - s.sent_t
            if stop.is_set() or (s.abort_after_s is not None and now >= s.abort_after_s):
                s.aborted_s = now
                return
            if now > timeout_s:
                s.error = f"no end after {timeout_s:g} s"
                s.aborted_s = now
                return
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                s.finished = True
                if s.status is None:
                    s.error = "connection closed before a response"
                return
            buf += chunk
            if s.status is None and b"\r\n" in buf:
                try:
                    s.status = int(buf.split(b"\r\n", 1)[0].split()[1])
                except (IndexError, ValueError):
                    s.error = "not an HTTP response"
                    return
                if s.status >= 400:
                    s.error = f"HTTP {s.status}"
                    return
            if s.first_token_s is None and b"data:" in buf.split(b"\r\n\r\n", 1)[-1]:
                s.first_token_s = time.monotonic() - s.sent_t
                if s.abort_after_s is None and max_new_tokens > 1:  # --abort-at first-token
                    s.aborted_s = s.first_token_s
                    return
    except OSError as exc:
        s.error = f"connection: {exc.strerror or exc}"
    finally:
        _close(sock)
        s.closed_t = time.monotonic()


# ------------------------------------------------------------------ the run


def run_drill(
    plan: Plan, say: Callable[[str], None] = lambda _: None, stop: threading.Event | None = None
) -> Run:
    """Warm up, then the rounds, braking on the metrics; returns what was done. Ctrl-C (or
    `stop` set by the caller) stops it: what was done is still returned."""
    stop = stop or threading.Event()
    run = Run(plan=plan, started_t=time.time())
    run.metrics_urls = plan.metrics or discover_metrics(plan.router)
    gauges = _Gauges(run.metrics_urls)
    try:
        first = gauges.sample()
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"cannot read the deployment's metrics ({run.metrics_urls[0]}): {_why(exc)}"
        ) from None
    run.baseline = {
        "inflight": _Gauges.total(first, INFLIGHT),
        "queue": _Gauges.most(first, QUEUE),
        "throughput": None,
    }
    t0 = time.monotonic()
    lock = threading.Lock()

    def brake(name: str, reason: str) -> None:
        with lock:
            if not any(b["brake"] == name for b in run.brakes):
                run.brakes.append({"brake": name, "reason": reason})
                say(f"brake: {reason}; stopping the drill")
        stop.set()

    throughput: list[float] = []
    warming = threading.Event()
    warming.set()
    scraper_done = threading.Event()

    def watch() -> None:
        b = plan.brakes
        while not scraper_done.wait(plan.poll_s):
            elapsed = time.monotonic() - t0
            if elapsed > b.max_duration_s and not warming.is_set():
                brake(
                    "duration", f"the drill ran {elapsed:.1f} s, over --max-duration {b.max_duration_s:g} s"
                )
            try:
                m = gauges.sample()
            except (OSError, ValueError) as exc:
                run.errors += 1
                if run.errors > b.max_errors:
                    brake(
                        "errors",
                        f"{run.errors} errors (last: metrics {_why(exc)}), over --max-errors {b.max_errors}",
                    )
                continue
            _check(m)

    def _check(m: list[dict[str, float]]) -> None:
        b = plan.brakes
        thr = _Gauges.total(m, THROUGHPUT)
        if warming.is_set():
            if thr:
                throughput.append(thr)
            return
        inflight, base = _Gauges.total(m, INFLIGHT), run.baseline["inflight"]
        if inflight is not None and base is not None and inflight > base + b.max_inflight_rise:
            brake(
                "inflight",
                f"prefill inflight queue {inflight:g}, above its baseline {base:g} + {b.max_inflight_rise}",
            )
        tbase = run.baseline["throughput"]
        if thr is not None and tbase and thr < tbase * (1 - b.max_throughput_drop):
            brake(
                "throughput",
                f"decode throughput {thr:.1f} tok/s, down {1 - thr / tbase:.0%} from {tbase:.1f} (bound {b.max_throughput_drop:.0%})",
            )
        queue = _Gauges.most(m, QUEUE)
        if b.max_queued_requests and queue is not None:
            near = b.max_queued_requests - max(1, math.ceil(0.1 * b.max_queued_requests))
            if queue >= near:
                brake(
                    "queue", f"queue {queue:g} requests, near --max-queued-requests {b.max_queued_requests}"
                )

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _warm_up(plan, run, stop, say)
        run.baseline["throughput"] = statistics.median(throughput) if throughput else None
        warming.clear()
        if not stop.is_set():
            _rounds(plan, run, stop, say, brake)
    except KeyboardInterrupt:
        run.interrupted = True
        stop.set()
        say("interrupted: stopping the drill; the answer follows on what was done")
    finally:
        scraper_done.set()
        watcher.join(timeout=10)
        run.ended_t = time.time()
    if stop.is_set() and not run.brakes:  # stopped from outside (the caller's Ctrl-C handler)
        run.interrupted = True
    return run


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    return str(getattr(exc, "strerror", None) or exc)


def _warm_up(plan: Plan, run: Run, stop: threading.Event, say: Callable[[str], None]) -> None:
    for k in range(plan.warmup):
        if stop.is_set():
            return
        s = Sent(
            rid=f"drill-{plan.run_id}-warmup-{k}", round=0, sent_t=time.monotonic(), abort_after_s=math.inf
        )
        one_request(plan, s, threading.Event(), max_new_tokens=4, timeout_s=120)
        run.sent.append(s)
        if s.error:
            run.errors += 1
            raise SourceError(f"the warm-up request to {plan.router} failed: {s.error}")
        if s.first_token_s is not None:
            run.ttft_s.append(s.first_token_s)
    if not run.ttft_s:
        raise SourceError(
            f"the warm-up requests to {plan.router} returned no token: no abort moment to aim at"
        )
    ttft = statistics.median(run.ttft_s)
    run.abort_after_s = None if plan.abort_at == "first-token" else TRANSFER_POINT * ttft
    say(f"warm-up: time to first token {ttft * 1000:.0f} ms (median of {len(run.ttft_s)})")


def _rounds(
    plan: Plan, run: Run, stop: threading.Event, say: Callable[[str], None], brake: Callable[[str, str], None]
) -> None:
    rng = random.Random(plan.seed)
    ttft = statistics.median(run.ttft_s)
    for rnd in range(1, plan.rounds + 1):
        if stop.is_set():
            return
        batch: list[Sent] = []
        threads = []
        for i in range(plan.concurrency):
            if plan.abort_at == "random":
                after: float | None = rng.uniform(0.2, 1.2) * ttft
            else:
                after = run.abort_after_s
            s = Sent(
                rid=f"drill-{plan.run_id}-{rnd}-{i}", round=rnd, sent_t=time.monotonic(), abort_after_s=after
            )
            batch.append(s)
            t = threading.Thread(
                target=one_request, args=(plan, s, stop, plan.max_new_tokens, 10 * ttft + 30), daemon=True
            )
            threads.append(t)
            t.start()
        run.sent.extend(batch)
        for t in threads:
            t.join()
        errors = sum(1 for s in batch if s.error)
        run.errors += errors
        if run.errors > plan.brakes.max_errors:
            brake(
                "errors",
                f"{run.errors} HTTP 5xx/connection errors, over --max-errors {plan.brakes.max_errors}",
            )
        say(
            f"round {rnd}: {len(batch)} sent, {sum(1 for s in batch if s.aborted_s is not None)} aborted, {errors} errors"
        )


def settle(run: Run, say: Callable[[str], None] = lambda _: None) -> None:
    """Wait the watchdog timeout + grace after the last abort (a pin must outlive it to be judged),
    then read the inflight floor. Ctrl-C cuts the wait short: the answer says so."""
    plan = run.plan
    wait = plan.watchdog_timeout_s + plan.grace_s + plan.poll_s
    if run.interrupted:
        wait = 0.0
    say(f"waiting {wait:g} s (watchdog timeout + grace) for any pin to be released or outlive it")
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    except KeyboardInterrupt:
        run.interrupted = True
        say("interrupted: answering on the logs so far")
    # one unaborted request: the deployment still serves, and its completion after the last
    # firing is what the verdict's recovery (`drained`) reads
    after = Sent(rid=f"drill-{plan.run_id}-after", round=0, sent_t=time.monotonic(), abort_after_s=math.inf)
    one_request(plan, after, threading.Event(), max_new_tokens=4, timeout_s=60)
    run.sent.append(after)
    if after.error:
        run.errors += 1
        say(f"the request after the drill failed: {after.error}")
    try:
        m = _Gauges(run.metrics_urls).sample()
        run.final = {"inflight": _Gauges.total(m, INFLIGHT), "queue": _Gauges.most(m, QUEUE)}
    except (OSError, ValueError):
        run.final = {"inflight": None, "queue": None}


# ------------------------------------------------------------------ the answer


@dataclass
class Answer:
    answer: str
    reasons: list[str]
    counts: dict[str, int]
    brakes: list[dict[str, str]]
    caveats: list[str]
    stronger: list[str]
    run: Run
    verdict: Verdict | None

    def to_json(self) -> dict[str, Any]:
        r = self.run
        return {
            "answer": self.answer,
            "reasons": self.reasons,
            "counts": self.counts,
            "brakes": self.brakes,
            "caveats": self.caveats,
            "stronger": self.stronger,
            "interrupted": r.interrupted,
            "plan": {k: v for k, v in asdict(r.plan).items()},
            "window": {"start": _iso(r.started_t), "end": _iso(r.ended_t)},
            "ttft_ms": round(statistics.median(r.ttft_s) * 1000, 1) if r.ttft_s else None,
            "abort_after_ms": None if r.abort_after_s is None else round(r.abort_after_s * 1000, 1),
            "baseline": r.baseline,
            "final": r.final,
            "metrics": r.metrics_urls,
            "verdict": None if self.verdict is None else self.verdict.to_json(),
        }


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def judge(run: Run, verdict: Verdict | None) -> Answer:
    """The drill's answer from the verdict on its window and what it did."""
    mine = {s.rid for s in run.sent if s.round > 0}
    aborted = {s.rid for s in run.aborted}
    reqs = []
    if verdict is not None:
        reqs = [q for q in verdict.requests if q["prefill_rid"] in mine or q["decode_rid"] in mine]
    raced = [q for q in reqs if q["abort_race"] or q["class"] in ("watchdog_fired", "silent_pin")]
    fired = [q for q in reqs if q["class"] == "watchdog_fired"]
    silent = [q for q in reqs if q["class"] == "silent_pin"]
    timeout = (verdict.timeout_s if verdict is not None else None) or run.plan.watchdog_timeout_s
    grace = verdict.grace_s if verdict is not None else run.plan.grace_s
    late = [q for q in fired if q["dwell_s"] is not None and q["dwell_s"] > timeout + grace]
    released = [q for q in raced if q["abort_race_outcome"] == "released" and q["class"] != "watchdog_fired"]
    base, final = run.baseline.get("inflight"), run.final.get("inflight")
    floor_back = base is None or final is None or final <= base
    counts = {
        "sent": len(mine), "aborted": len(aborted & mine), "errors": run.errors,
        "completed": sum(1 for s in run.sent if s.round > 0 and s.finished and not s.error),
        "raced": len(raced), "pinned": len(fired) + len(silent), "released_by_watchdog": len(fired),
        "silent_pins": len(silent), "released_on_abort": len(released),
    }  # fmt: skip
    reasons: list[str] = []
    stronger: list[str] = []
    caveats = list(verdict.reasons) if verdict is not None else []
    v = verdict.verdict if verdict is not None else None
    if verdict is None:
        answer = "inconclusive"
        reasons.append(
            "no line of the drill's window was read: point it at the engines' logs (-D, --journal-file, --file)"
        )
    elif silent or late or v == "watchdog_missed":
        answer = "watchdog_missed"
        if silent:
            reasons.append(
                f"{len(silent)} drill request(s) pinned past the {timeout:g} s timeout with no watchdog line: {_rooms(silent)}"
            )
        if late:
            reasons.append(
                f"{len(late)} released by the watchdog only after the timeout + grace: {_rooms(late)}"
            )
        if v == "watchdog_missed" and not silent and not late:
            reasons.append(
                "the window's verdict is watchdog_missed (a pin outside the drill's own requests, or the inflight floor)"
            )
    elif fired and not floor_back:
        answer = "watchdog_missed"
        reasons.append(
            f"the watchdog released {len(fired)} pin(s), but the prefill inflight queue stayed at {final:g}, above its baseline {base:g}: something it did not release still holds a slot"
        )
    elif fired:
        answer = "watchdog_proven"
        longest = max((q["dwell_s"] or 0.0) for q in fired)
        reasons.append(
            f"{len(fired)} drill request(s) pinned by the abort race, every one released by the watchdog within its {timeout:g} s timeout (longest dwell {longest:.1f} s); the inflight floor returned to its baseline"
        )
    elif v == "inconclusive":
        answer = "inconclusive"
        reasons.append(
            "the window's verdict is inconclusive: the logs cannot say whether an abort left a pin"
        )
    elif raced:
        answer = "no_pin_under_race"
        reasons.append(
            f"{len(raced)} abort(s) raced a KV transfer and none pinned: the prefill released each room (the abort-race fix held)"
        )
    else:
        answer = "race_not_reproduced"
        reasons.append(
            f"none of the {len(aborted & mine)} abort(s) landed while a KV transfer was in flight: the drill could not test the watchdog"
        )
        if verdict is not None and verdict.evidence_level == "L0":
            stronger.append(
                "turn on --log-requests (L1) on both engines: at L0 an abort race is only a gauge, never a named request"
            )
        if run.plan.abort_at == "first-token":
            stronger.append("--abort-at transfer: aborts at the first token land after the transfer")
        stronger.append(
            "a longer prompt (--prompt-tokens): a longer KV transfer is a wider window to land in"
        )
        stronger.append("--abort-at random and more --rounds: aborts spread over the request's life")
    if run.brakes:
        reasons.append("stopped by a brake: " + "; ".join(b["reason"] for b in run.brakes))
    if run.interrupted:
        caveats.insert(
            0,
            "interrupted: the wait of the watchdog timeout + grace was cut short; a pin may not have outlived it yet",
        )
    return Answer(answer, reasons, counts, run.brakes, caveats, stronger, run, verdict)


def _rooms(reqs: list[dict[str, Any]]) -> str:
    return ", ".join(str(q["bootstrap_room"]) for q in reqs[:5]) + (" ..." if len(reqs) > 5 else "")


def render_text(a: Answer) -> str:
    c = a.counts
    lines = [
        f"drill: {a.answer}",
        *(f"  - {r}" for r in a.reasons),
        f"counts: sent {c['sent']}, aborted {c['aborted']}, raced a transfer {c['raced']}, pinned {c['pinned']} "
        f"(released by the watchdog {c['released_by_watchdog']}, silent {c['silent_pins']}), released on abort "
        f"{c['released_on_abort']}, completed {c['completed']}, errors {c['errors']}",
        "brakes: " + ("; ".join(b["reason"] for b in a.brakes) if a.brakes else "none fired"),
    ]
    if a.stronger:
        lines += ["to make it stronger:", *(f"  - {s}" for s in a.stronger)]
    if a.verdict is not None:
        lines.append(f"the window's verdict: {a.verdict.verdict} ({a.verdict.evidence_level})")
    if a.caveats:
        lines += ["evidence:", *(f"  - {r}" for r in a.caveats)]
    return "\n".join(lines)


def check_code(a: Answer) -> int:
    return CHECK_CODES[a.answer]


def check_line(a: Answer) -> str:
    c = a.counts
    perf = " ".join(f"{k}={v}" for k, v in c.items())
    brakes = f"; brakes: {', '.join(b['brake'] for b in a.brakes)}" if a.brakes else ""
    return f"{CHECK_STATUS[check_code(a)]} - drill {a.answer}: {a.reasons[0] if a.reasons else ''}{brakes} | {perf}"


def drill(
    plan: Plan,
    db: Any,
    *,
    directories: list[Any] | None = None,
    journal_files: list[Any] | None = None,
    files: list[Any] | None = None,
    units: list[str] | None = None,
    tz: str | None = None,
    host: str | None = None,
    timeout_stated: bool = True,
    say: Callable[[str], None] = lambda _: None,
    stop: threading.Event | None = None,
) -> Answer:
    """The whole drill: run, wait timeout + grace, ingest the window (like `ingest`), answer."""
    from pdforensics.api import run_ingest

    run = run_drill(plan, say, stop)
    settle(run, say)
    now_us = time.time_ns() // 1000
    # the window opens a second early: plain logs stamp whole seconds
    _, verdict = run_ingest(
        db, f"@{int(run.started_t) - 1}", None, units, directories, journal_files, files, tz, host, None,
        plan.watchdog_timeout_s if timeout_stated else None, plan.grace_s, False, now_us,
    )  # fmt: skip
    return judge(run, verdict)
