"""A stand-in PD deployment on loopback: `pdforensics simulate --serve` (docs/drill.md).

SGLang needs GPUs; `pdforensics drill` needs something to drill. This serves the simulator's
prefill → decode → router model behind SGLang's HTTP API (a streaming `/generate` on the router,
`/metrics` and `/health` on each engine) and writes the SGLang log lines each engine would print,
as it goes, into plain files `ingest --file` reads (UTC prefixes: `--tz UTC`).

Its bugs are chosen per run (StandIn): whether an abort that lands while the KV transfer is in
flight pins the prefill's inflight slot (`race="pins"`, the upstream bug) or releases it
(`"fixed"`), whether an inflight watchdog is armed, at what timeout, and whether it fires; a decode
that slows under load; a router that answers 5xx. The race is decided by the configured build for a
request aborted inside its transfer window, never by timing luck: the windows are wide (seconds
scaled down) and the drill aborts in their middle.

Not modelled: batching (each request is its own forward), KV memory, chunked prefill, retraction,
several ranks or instances, engine restarts, the router's own log lines and retries.
"""

from __future__ import annotations

import json
import random
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pdforensics.simulate import lines as L
from pdforensics.simulate.model import V0_5_23, EngineCfg, Host

ABORT = "Aborted by AbortReq."
STATE = "KVPoll.Transferring"
HEALTH_ROOM = 0
SLOWDOWN = 10.0  # a degraded decode's tokens take this many times longer


@dataclass
class StandIn:
    """One stand-in build: its bugs, its (scaled) times, where it logs."""

    log_dir: Path
    race: str = "pins"  # "pins": an abort during the transfer leaves the prefill slot held; "fixed"
    watchdog_s: float | None = 2.0  # the inflight watchdog's timeout; None: not deployed
    watchdog_broken: bool = False  # armed (its line printed) but never fires
    prefill_s: float = 0.2  # the prefill forward
    transfer_s: float = 0.8  # the KV transfer (the prefill inflight queue)
    tpot_s: float = 0.05  # one decode step
    prefill_slots: int = 64  # forwards at once; more wait in the prefill queue (#queue-req)
    max_queued_requests: int | None = None  # SGLang's --max-queued-requests: beyond it, 503
    degrade_above: int | None = None  # the decode slows SLOWDOWN-fold above this many requests
    background_tok_s: float = 100.0  # gen throughput of the traffic the stand-in does not model
    fail_after: int | None = None  # the router answers 503 to every /generate after this many
    health_interval_s: float = 0.5  # the router's health probe of the prefill (a 1-token request)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.race not in ("pins", "fixed"):
            raise ValueError(f"race must be 'pins' or 'fixed', not {self.race!r}")


# Named builds for `simulate --serve --build NAME`: the drill's four answers and its brakes.
BUILDS: dict[str, tuple[str, dict[str, Any]]] = {
    "race-pins-watchdog": ("the abort race pins; a 2 s watchdog releases each pin", {}),
    "race-pins-no-watchdog": (
        "the abort race pins; the watchdog is armed at 2 s but never fires",
        {"watchdog_broken": True},
    ),
    "fixed": ("the abort race fixed: an abort during the transfer releases the slot", {"race": "fixed"}),
    "fast-transfer": (
        "transfers of 20 ms: an abort cannot land inside one (the race is not reproduced)",
        {"transfer_s": 0.02, "prefill_s": 0.6},
    ),
    "degrading-decode": (
        "a decode whose throughput falls 10x above 2 requests",
        {"degrade_above": 2},
    ),
    "failing-router": ("the router answers 503 after 3 requests", {"fail_after": 3}),
    "small-queue": (
        "one prefill forward at a time, --max-queued-requests 4",
        {"prefill_slots": 1, "prefill_s": 0.6, "max_queued_requests": 4},
    ),
}


def build_config(name: str, log_dir: Path, **extra: Any) -> StandIn:
    from pdforensics.errors import UsageError

    if name not in BUILDS:
        raise UsageError(f"unknown stand-in build {name!r}; known: {', '.join(BUILDS)}")
    return StandIn(log_dir=log_dir, **{**BUILDS[name][1], **extra})


def _engine(role: str, cfg: StandIn) -> EngineCfg:
    host = Host("standin", 0, 0.0, "0" * 32, "0" * 32, "0" * 32, 0.0, 0, "127.0.0.1", 1, "0" * 32)
    return EngineCfg(
        role=role, host=host, unit=f"sglang-standin-{role}.service", description="stand-in",
        version=V0_5_23, model="standin/model", arch="LlamaForCausalLM", tp=1, log_requests=True,
        watchdog_s=round(cfg.watchdog_s) if (role == "prefill" and cfg.watchdog_s) else None,
    )  # fmt: skip


class _Log:
    """One engine's log file: `[YYYY-mm-dd HH:MM:SS] body` in UTC, flushed per line (read live)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life
        self.lock = threading.Lock()

    def __call__(self, body: str, t: float | None = None) -> None:
        stamp = datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        with self.lock:
            self.f.write(f"[{stamp}] {body}\n")
            self.f.flush()

    def close(self) -> None:
        with self.lock:
            self.f.close()


@dataclass
class _Req:
    rid: str
    room: int
    prompt_tokens: int
    max_new_tokens: int
    t_recv: float
    stage: str = "queued"  # queued | forward | transfer | decode | done
    t_inflight: float | None = None
    pinned: bool = False  # aborted during the transfer on the racy build: the prefill still holds it


@dataclass
class _State:
    queued: int = 0
    forward: int = 0
    inflight: dict[str, _Req] = field(default_factory=dict)  # the prefill inflight queue
    d_transfer: int = 0
    d_running: int = 0
    generate_calls: int = 0
    completed: int = 0
    aborted: int = 0
    watchdog_fired: int = 0
    active: int = 0  # /generate requests open now, and the most at once
    peak: int = 0


class Deployment:
    """The running stand-in: a router, a prefill and a decode, each an HTTP server on 127.0.0.1."""

    def __init__(self, cfg: StandIn, port: int = 0) -> None:
        self.cfg = cfg
        self.pre = _engine("prefill", cfg)
        self.dec = _engine("decode", cfg)
        self.plog = _Log(cfg.log_dir / "standin-sglang-prefill.log")
        self.dlog = _Log(cfg.log_dir / "standin-sglang-decode.log")
        self.state = _State()
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(cfg.prefill_slots)
        self.rng = random.Random(cfg.seed)
        self.stop_event = threading.Event()
        self.servers = [
            _server(port, self, "router"),
            _server(0 if port == 0 else port + 1, self, "prefill"),
            _server(0 if port == 0 else port + 2, self, "decode"),
        ]
        self._threads: list[threading.Thread] = []

    # -- addresses
    def url(self, which: str = "router") -> str:
        server = self.servers[("router", "prefill", "decode").index(which)]
        return f"http://127.0.0.1:{server.server_address[1]}"

    @property
    def log_files(self) -> list[Path]:
        return [Path(self.plog.f.name), Path(self.dlog.f.name)]

    # -- life
    def start(self) -> Deployment:
        for eng, log in ((self.pre, self.plog), (self.dec, self.dlog)):
            log(L.server_args(eng))
            log(L.max_tokens_line(eng))
            if eng.watchdog_s:
                log(L.watchdog_armed(eng.watchdog_s))
            log(L.READY)
        for target in [s.serve_forever for s in self.servers] + [self._health_loop, self._watchdog_loop]:
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for s in self.servers:
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self.plog.close()
        self.dlog.close()

    def __enter__(self) -> Deployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the lines
    def _obj(self, eng: EngineCfg, rid: str, room: int, health: bool = False) -> str:
        return L.obj_template(eng).format(
            rid=f"'{rid}'", stream="False" if health else "True", log_metrics="False" if health else "True",
            bhost=f"'{L.FAKE_BOOTSTRAP_HOST}'" if health else "'127.0.0.1'",
            bport="None" if health else str(eng.bootstrap_port), room=room,
        )  # fmt: skip

    def _finish(self, eng: EngineCfg, r: _Req, finish: str, completion: int) -> None:
        now = time.time()
        meta = L.meta_template(eng).format(
            rid=f"'{r.rid}'", finish=finish, prompt=r.prompt_tokens, completion=completion, cached=0,
            e2e=now - r.t_recv, sent=now,
        )  # fmt: skip
        log = self.plog if eng is self.pre else self.dlog
        log(f"Finish: obj={self._obj(eng, r.rid, r.room)}, out={meta}")

    def _prefill_batch(self, new_tok: int) -> None:
        # #inflight-req counts the batch's own new request (SGLang's line, idle: new-seq 1, inflight 1)
        s = self.state
        self.plog(
            L.prefill_stats(
                self.pre, new_seq=1, new_tok=new_tok, cached=0, usage=0.01, queue=s.queued, pending=0,
                boot=0, inflight=len(s.inflight) + 1, thr=new_tok / max(self.cfg.prefill_s, 1e-3),
            )
        )  # fmt: skip

    def _decode_batch(self) -> None:
        s = self.state
        self.dlog(
            L.decode_stats(
                self.dec, running=s.d_running, tokens=s.d_running * 1000, prealloc=0,
                transfer=s.d_transfer, queue=0, thr=self._gen_throughput(), accept_len=1.0,
            )
        )  # fmt: skip

    def _degraded(self) -> bool:
        s, limit = self.state, self.cfg.degrade_above
        return limit is not None and s.d_transfer + s.d_running > limit

    def _gen_throughput(self) -> float:
        s = self.state
        thr = self.cfg.background_tok_s + s.d_running / self.cfg.tpot_s
        return thr / SLOWDOWN if self._degraded() else thr

    # -- the metrics each engine serves (SGLang's gauge names)
    def metrics(self, which: str) -> str:
        with self.lock:
            s = self.state
            if which == "prefill":
                labels = 'engine_type="prefill",model_name="standin/model",tp_rank="0"'
                gauges = {
                    "sglang:num_queue_reqs": s.queued,
                    "sglang:num_running_reqs": s.forward,
                    "sglang:num_prefill_inflight_queue_reqs": len(s.inflight),
                    "sglang:num_prefill_prealloc_queue_reqs": 0,
                }
            elif which == "decode":
                labels = 'engine_type="decode",model_name="standin/model",tp_rank="0"'
                gauges = {
                    "sglang:num_queue_reqs": 0,
                    "sglang:num_running_reqs": s.d_running,
                    "sglang:num_decode_transfer_queue_reqs": s.d_transfer,
                    "sglang:num_decode_prealloc_queue_reqs": 0,
                    "sglang:gen_throughput": round(self._gen_throughput(), 2),
                }
            else:
                labels = 'worker="standin"'
                gauges = {"sgl_router_active_requests": s.queued + s.forward + s.d_transfer + s.d_running}
        out = []
        for name, value in gauges.items():
            out += [f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
        return "\n".join(out) + "\n"

    # -- background: the router's health probe and the prefill's watchdog
    def _health_loop(self) -> None:
        while not self.stop_event.wait(self.cfg.health_interval_s):
            rid = f"HEALTH_CHECK_{self.rng.getrandbits(128):032x}"
            r = _Req(rid, HEALTH_ROOM, 1, 1, time.time())
            self.plog(f"Receive: obj={self._obj(self.pre, rid, HEALTH_ROOM, health=True)}")
            with self.lock:
                self._prefill_batch(1)
            self._finish(self.pre, r, "{'type': 'length', 'length': 0}", 1)

    def _watchdog_loop(self) -> None:
        timeout = self.cfg.watchdog_s
        while not self.stop_event.wait(0.02):
            if not timeout or self.cfg.watchdog_broken:
                continue
            now = time.time()
            with self.lock:
                due = [
                    r
                    for r in self.state.inflight.values()
                    if r.pinned and now - (r.t_inflight or now) >= timeout
                ]
                for r in due:
                    del self.state.inflight[r.rid]
                    self.state.watchdog_fired += 1
            for r in due:
                dwell = now - (r.t_inflight or now)
                t = round(timeout)
                self.plog(L.watchdog_fired(r.rid, r.room, t, STATE, dwell))
                why = L.watchdog_reason(t, STATE)
                self.plog(L.prefill_failed("transfer", 0, r.rid, r.room, why))
                self._finish(
                    self.pre, r, L.abort_finish_reason(L.prefill_failed("transfer", 0, r.rid, r.room, why)), 0
                )

    # -- one request, driven by its handler thread
    def generate(self, body: dict[str, Any], conn: socket.socket) -> Iterator[bytes] | int:
        """503 when the router refuses it; else the SSE chunks, the request's life between them.
        A client gone (its connection closed) is an abort, as SGLang's tokenizer manager sees it."""
        cfg, s = self.cfg, self.state
        with self.lock:
            s.generate_calls += 1
            if cfg.fail_after is not None and s.generate_calls > cfg.fail_after:
                return 503
            if cfg.max_queued_requests is not None and s.queued >= cfg.max_queued_requests:
                return 503
        text = body.get("text") or body.get("prompt") or ""  # /generate, or /v1/completions
        params = body.get("sampling_params") or {"max_new_tokens": body.get("max_tokens", 16)}
        r = _Req(
            rid=str(body.get("rid") or f"{self.rng.getrandbits(128):032x}"),
            room=self.rng.getrandbits(63) or 1, prompt_tokens=max(1, len(str(text).split())),
            max_new_tokens=int(params.get("max_new_tokens", 16)), t_recv=time.time(),
        )  # fmt: skip
        return self._counted(self._life(r, conn))

    def _counted(self, life: Iterator[bytes]) -> Iterator[bytes]:
        with self.lock:
            self.state.active += 1
            self.state.peak = max(self.state.peak, self.state.active)
        try:
            yield from life
        finally:
            with self.lock:
                self.state.active -= 1

    def _life(self, r: _Req, conn: socket.socket) -> Iterator[bytes]:
        cfg, s = self.cfg, self.state
        self.plog(f"Receive: obj={self._obj(self.pre, r.rid, r.room)}")
        self.dlog(f"Receive: obj={self._obj(self.dec, r.rid, r.room)}")
        yield b""  # the headers go out now, as SGLang's StreamingResponse sends them
        with self.lock:
            s.queued += 1
        while not self.slots.acquire(timeout=0.01):
            if _gone(conn):
                with self.lock:
                    s.queued -= 1
                self._abort_before_transfer(r)
                return
        try:
            with self.lock:
                s.queued -= 1
                s.forward += 1
                r.stage = "forward"
                self._prefill_batch(r.prompt_tokens)
            gone = _wait(conn, cfg.prefill_s)
            with self.lock:
                s.forward -= 1
        finally:
            self.slots.release()
        if gone:
            self._abort_before_transfer(r)
            return
        with self.lock:
            r.stage, r.t_inflight = "transfer", time.time()
            s.inflight[r.rid] = r
            s.d_transfer += 1
        if _wait(conn, cfg.transfer_s):
            self._abort_in_transfer(r)
            return
        with self.lock:
            s.inflight.pop(r.rid, None)
            s.d_transfer -= 1
            s.d_running += 1
            r.stage = "decode"
        self._finish(self.pre, r, "{'type': 'length', 'length': 0}", 1)
        for k in range(r.max_new_tokens):
            step = cfg.tpot_s * (SLOWDOWN if self._degraded() else 1.0)
            if _wait(conn, step):
                self._abort_running(r, k)
                return
            chunk = {"text": " tok" * (k + 1), "meta_info": {"id": r.rid, "completion_tokens": k + 1}}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            if k % 8 == 0:
                with self.lock:
                    self._decode_batch()
        with self.lock:
            s.d_running -= 1
            s.completed += 1
            r.stage = "done"
        self._finish(self.dec, r, f"{{'type': 'length', 'length': {r.max_new_tokens}}}", r.max_new_tokens)
        yield b"data: [DONE]\n\n"

    def _abort_before_transfer(self, r: _Req) -> None:
        with self.lock:
            self.state.aborted += 1
            r.stage = "done"
        self._finish(self.pre, r, L.abort_finish_reason("Abort in waiting queue"), 0)
        self.dlog(L.decode_failed("handshake", 0, r.rid, r.room, ABORT))
        self._finish(
            self.dec, r, L.abort_finish_reason(L.decode_failed("handshake", 0, r.rid, r.room, ABORT)), 0
        )

    def _abort_in_transfer(self, r: _Req) -> None:
        """The race: the decode drops the room; the prefill's sender releases it only when fixed."""
        with self.lock:
            self.state.aborted += 1
            self.state.d_transfer -= 1
            r.stage = "done"
            if self.cfg.race == "pins":
                r.pinned = True  # held in the inflight queue until a watchdog releases it
            else:
                self.state.inflight.pop(r.rid, None)
        msg = L.decode_failed("transfer", 0, r.rid, r.room, ABORT)
        self.dlog(msg)
        self._finish(self.dec, r, L.abort_finish_reason(msg), 0)
        if self.cfg.race == "fixed":
            pmsg = L.prefill_failed("transfer", 0, r.rid, r.room, ABORT)
            self.plog(pmsg)
            self._finish(self.pre, r, L.abort_finish_reason(pmsg), 0)

    def _abort_running(self, r: _Req, tokens: int) -> None:
        with self.lock:
            self.state.aborted += 1
            self.state.d_running -= 1
            r.stage = "done"
        self._finish(self.dec, r, L.abort_finish_reason("Abort in running batch"), tokens)


def _gone(conn: socket.socket) -> bool:
    """The client closed its connection (a readable socket with nothing to read)."""
    try:
        ready, _, _ = select.select([conn], [], [], 0)
        return bool(ready) and conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _wait(conn: socket.socket, seconds: float) -> bool:
    """Wait `seconds`, watching the client: True when it went away meanwhile."""
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        try:
            ready, _, _ = select.select([conn], [], [], min(left, 0.01))
            if ready and conn.recv(1, socket.MSG_PEEK) == b"":
                return True
        except OSError:
            return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the stand-in's log is SGLang's lines, not an access log

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        dep, role = self.server.deployment, self.server.role
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            self._send(200, b"")
        elif path == "/metrics":
            self._send(200, dep.metrics(role).encode(), "text/plain; version=0.0.4")
        elif path == "/workers" and role == "router":
            workers = [
                {"url": dep.url("prefill"), "worker_type": "prefill"},
                {"url": dep.url("decode"), "worker_type": "decode"},
            ]
            self._send(200, json.dumps({"workers": workers}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        dep, role = self.server.deployment, self.server.role
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, b'{"error": "bad json"}')
            return
        if role != "router" or self.path.split("?")[0] not in ("/generate", "/v1/completions"):
            self._send(404, b'{"error": "not found"}')
            return
        result = dep.generate(body, self.connection)
        if isinstance(result, int):
            self._send(result, b'{"error": {"message": "The request queue is full."}}')
            return
        self.close_connection = True
        try:
            for k, chunk in enumerate(result):
                if k == 0:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.flush()
                if chunk:
                    self.wfile.write(chunk)
                    self.wfile.flush()
        except OSError:
            pass  # the client went away between chunks: _life saw it or will never write again


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, deployment: Deployment, role: str) -> None:
        self.deployment, self.role = deployment, role
        super().__init__(("127.0.0.1", port), _Handler)


def _server(port: int, deployment: Deployment, role: str) -> _Server:
    return _Server(port, deployment, role)


def serve(cfg: StandIn, port: int, announce: Any = print) -> None:
    """Run until Ctrl-C: the CLI's `simulate --serve`."""
    from pdforensics.errors import UsageError

    try:
        dep = Deployment(cfg, port)
    except OSError as exc:
        raise UsageError(f"--port {port}: cannot listen on 127.0.0.1 ({exc.strerror})") from None
    with dep:
        announce(
            f"stand-in PD deployment: router {dep.url()}, prefill {dep.url('prefill')}, decode "
            f"{dep.url('decode')}; logs in {cfg.log_dir}"
        )
        files = " ".join(f"--file {p}" for p in dep.log_files)
        announce(
            f"drill it:  pdforensics drill --router {dep.url()} {files} --tz UTC --watchdog-timeout {cfg.watchdog_s or 300:g}"
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            announce("stand-in stopped")
