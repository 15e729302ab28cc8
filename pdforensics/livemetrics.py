"""`watch --prometheus URL`: SGLang's gauges polled live beside the logs, and the `metric_pin` rule.

Every `--prometheus-poll` seconds the server is asked what it scraped since the last poll (the
ingest's range-vector instant queries, sources/prometheus.py: raw samples, each at its scrape's
time; a short timeout and one attempt, so an unreachable server costs a poll, not the logs).
The new samples go into `metric_samples` in the watch's next write transaction, mapped to the
logs' hosts as `ingest --prometheus` maps them (metric_ingest.resolve, by name).

The rule, on the samples' own times (so it holds under either clock): a prefill host whose
inflight gauge stayed >= 1 for longer than timeout + grace, more than the log fold's open
requests of that host account for, raises `metric_pin` once per episode (the gauge back under 1
re-arms it). SGLang refreshes that gauge only with a `Prefill batch` line or every 30 s while
fully idle (docs/prometheus.md): a stalled prefill's gauge repeats its last batch line's value,
so the alert says so. A scrape gap (`up == 0`, or no sample for more than twice the interval)
is said once, not alerted.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from pdforensics.metric_ingest import COLUMNS, resolve
from pdforensics.sources import prometheus as prom

if TYPE_CHECKING:
    import duckdb

    from pdforensics.livefold import LiveFold

INFLIGHT = ("sglang:num_prefill_inflight_queue_reqs", "sglang:num_prefill_infight_queue_reqs")
DEFAULT_POLL_S = 5.0
MIN_POLL_S = 1.0
TIMEOUT_S = 5.0  # one query: a blackholed server delays the logs by at most this, once a poll
FIRST_LOOKBACK_US = 600 * 1_000_000  # a first start without --since reads the last 10 minutes
# Samples appear in the API a little after their scrape time: each query re-reads this much
# before the last one's end (what was seen is skipped by series and time).
OVERLAP_US = 30 * 1_000_000
GAP_SLACK_US = 1_000_000  # scrape jitter and the sample's delay into the API
BASIS = ("Prometheus gauge, refreshed only by batch lines or every 30 s when idle: "
         "the value may be the last batch line's")  # fmt: skip
S = 1_000_000


@dataclass
class GaugeRun:
    """One inflight series: since when it has been >= 1, its lowest value since, its last sample."""

    job: str | None
    instance: str | None
    engine_type: str | None
    dp_rank: int | None
    pos_since: int | None = None
    min_value: float = 0.0
    last_value: float = 0.0
    last_us: int = 0


@dataclass
class TargetSeen:
    last_us: int = 0
    up: float | None = None
    up_us: int = 0
    interval_us: int | None = None  # the smallest step seen between two samples of its `up`


class MetricWatch:
    def __init__(self, url: str, selectors: list[str] | None, poll_s: float, since_us: int | None) -> None:
        self.server = prom.PrometheusServer(url, timeout_s=TIMEOUT_S, retries=1)
        self.selectors = prom.check_selectors(selectors)
        self.poll_s = max(poll_s, MIN_POLL_S)
        self.since_us = since_us
        self.queried_to_us: int | None = None
        self.next_at = 0.0  # monotonic
        self.seen: dict[str, int] = {}  # series -> newest sample time read
        self.runs: dict[str, GaugeRun] = {}  # inflight series
        self.targets: dict[str, TargetSeen] = {}  # "job\tinstance"
        self.jobs: set[str] = set()
        self.pending: list[pl.DataFrame] = []  # samples not written yet
        self.samples_total = 0

    def describe(self) -> str:
        return f"prometheus {self.server.url} every {self.poll_s:g} s"

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    # ------------------------------------------------------------------ reading

    def poll(self, now_us: int, fold: LiveFold) -> None:
        """Read what the server scraped since the last poll. Raises SourceError/UsageError (one line)."""
        self.next_at = time.monotonic() + self.poll_s
        lo = (
            self.queried_to_us - OVERLAP_US
            if self.queried_to_us is not None
            else (self.since_us if self.since_us is not None else now_us - FIRST_LOOKBACK_US)
        )
        frames = [f for sel in self.selectors for f in self.server._range(sel, lo, now_us, None)]
        for f in frames:
            self.jobs.update(j for j in f["job"].unique().to_list() if j is not None)
        if self.jobs and not any(s.strip().startswith("up") for s in self.selectors):
            alternatives = "|".join(re.escape(j) for j in sorted(self.jobs))
            frames += list(self.server._range(f'up{{job=~"{prom._escape(alternatives)}"}}', lo, now_us, None))
        self.queried_to_us = now_us
        frame = pl.concat(frames) if frames else prom.empty_samples()
        # what an earlier (overlapping) query returned already
        known = pl.DataFrame(
            {"series": list(self.seen), "seen_us": list(self.seen.values())},
            schema={"series": pl.String, "seen_us": pl.Int64},
        )
        frame = (
            frame.join(known, on="series", how="left")
            .filter(pl.col("seen_us").is_null() | (pl.col("ts_us") > pl.col("seen_us")))
            .drop("seen_us")
            .unique(["series", "ts_us"])
            .sort("series", "ts_us")
        )
        if not frame.height:
            return
        for series, ts in frame.group_by("series").agg(pl.col("ts_us").max()).iter_rows():
            self.seen[series] = int(ts)
        self.samples_total += frame.height
        self.pending.append(frame)
        for metric, series, job, instance, engine_type, dp, ts, value in frame.select(
            "metric", "series", "job", "instance", "engine_type", "dp_rank", "ts_us", "value"
        ).iter_rows():
            t = self.targets.setdefault(f"{job}\t{instance}", TargetSeen())
            t.last_us = max(t.last_us, ts)
            if metric == "up":
                if t.up_us and ts > t.up_us:
                    step = ts - t.up_us
                    t.interval_us = step if t.interval_us is None else min(t.interval_us, step)
                t.up, t.up_us = value, ts
            elif metric in INFLIGHT:
                run = self.runs.setdefault(series, GaugeRun(job, instance, engine_type, dp))
                run.last_value, run.last_us = value, ts
                if value >= 1:
                    if run.pos_since is None:
                        run.pos_since, run.min_value = ts, value
                    run.min_value = min(run.min_value, value)
                else:
                    run.pos_since = None  # back to 0: the next rise is a new episode

    def gaps(self) -> dict[str, str | None]:
        """Per target: why it is not being scraped now (None: it is)."""
        out: dict[str, str | None] = {}
        now = self.queried_to_us or 0
        for key, t in self.targets.items():
            job, instance = key.split("\t")
            name = f"target {instance} (job {job})"
            if t.up == 0:
                out[key] = f"{name}: up = 0 (the scrape failed) since {_iso(t.up_us)}"
            elif t.interval_us is not None and now - t.last_us > 2 * t.interval_us + GAP_SLACK_US:
                out[key] = (f"{name}: no sample since {_iso(t.last_us)} (more than twice its "
                            f"{t.interval_us / S:g} s scrape interval)")  # fmt: skip
            else:
                out[key] = None
        return out

    # ------------------------------------------------------------------ mapping and the rule

    def _mapping(self, fold: LiveFold) -> dict[str, set[str]]:
        hosts: dict[str, set[str]] = {}
        for (host, engine), _ in fold.engines.items():
            hosts.setdefault(host, set()).add(engine)
        for host, _unit in fold.units:
            hosts.setdefault(host, set())
        hosts.pop("", None)
        return hosts

    def map_target(
        self, fold: LiveFold, job: str | None, instance: str | None, engine_type: str | None
    ) -> tuple[str | None, str | None, str | None]:
        return resolve(job, instance, engine_type, {}, self._mapping(fold), {})

    def check(self, fold: LiveFold, now_us: int) -> None:
        """Raise `metric_pin` on the fold (its alert keys, counters and delivery) where it holds."""
        from pdforensics.livefold import Alert

        stuck = fold.stuck_us
        hosts = self._mapping(fold)
        per_host: dict[str, dict[int, GaugeRun]] = {}
        for run in self.runs.values():
            if run.pos_since is None or run.last_us - run.pos_since <= stuck:
                continue
            host, _engine, _by = resolve(run.job, run.instance, run.engine_type, {}, hosts, {})
            key = host or re.sub(r":\d+$", "", run.instance or "?")
            dp = -1 if run.dp_rank is None else run.dp_rank
            best = per_host.setdefault(key, {}).get(dp)
            if best is None or run.min_value > best.min_value:  # TP duplicates of a DP rank count once
                per_host[key][dp] = run
        for host, dps in per_host.items():
            floor = int(sum(r.min_value for r in dps.values()))
            since = min(r.pos_since for r in dps.values() if r.pos_since is not None)
            named = sum(1 for r in fold.rooms.values() if r.host == host and r.pin_us is not None)
            if floor <= named:
                continue  # the logs name requests enough for it: the log rules own those
            key = f"metric_pin:{host}:{since}"
            if key in fold.raised:
                continue
            runs = list(dps.values())
            interval = [self.targets[f"{r.job}\t{r.instance}"].interval_us for r in runs]
            known = [i for i in interval if i is not None]
            last = max(r.last_us for r in runs)
            fold.raise_alert(Alert("metric_pin", key, since + stuck, max(now_us, last), host, {
                "floor": floor, "named_requests": named, "since_us": since, "last_sample_us": last,
                "value_now": sum(r.last_value for r in runs),
                "instances": sorted({r.instance or "?" for r in runs}),
                "scrape_interval_s": min(known) / S if known else None,
                "timeout_s": fold.timeout_s, "grace_s": fold.grace_s, "basis": BASIS,
                "prometheus": self.server.url,
            }))  # fmt: skip

    def floors(self, fold: LiveFold) -> dict[str, float]:
        """Host (or instance) -> the inflight gauge's last value (DP ranks summed)."""
        hosts = self._mapping(fold)
        per: dict[str, dict[int, float]] = {}
        for run in self.runs.values():
            host = resolve(run.job, run.instance, run.engine_type, {}, hosts, {})[0] or run.instance or "?"
            d = per.setdefault(host, {})
            dp = -1 if run.dp_rank is None else run.dp_rank
            d[dp] = max(d.get(dp, 0.0), run.last_value)
        return {h: sum(v.values()) for h, v in per.items()}

    # ------------------------------------------------------------------ storing

    def store(self, con: duckdb.DuckDBPyConnection, fold: LiveFold, ingest_id: int) -> int:
        """Insert the pending samples not stored yet (inside the caller's transaction)."""
        if not self.pending:
            return 0
        frame = pl.concat(self.pending).unique(["series", "ts_us"], keep="first")
        targets = frame.select("job", "instance", "engine_type").unique(["job", "instance"])
        hosts = self._mapping(fold)
        rows = [(j, i, *resolve(j, i, e, {}, hosts, {})) for j, i, e in targets.iter_rows()]
        mapped = pl.DataFrame(
            rows, orient="row",
            schema={"job": pl.String, "instance": pl.String, "host": pl.String, "engine": pl.String,
                    "matched_by": pl.String},
        )  # fmt: skip
        batch = (
            frame.join(mapped, on=["job", "instance"], how="left", nulls_equal=True)
            .with_columns(
                ingest_id=pl.lit(ingest_id, pl.Int32), source=pl.lit(f"prometheus:{self.server.url}")
            )
            .select(COLUMNS)
        )
        lo, hi = int(batch["ts_us"].min()), int(batch["ts_us"].max())  # type: ignore[arg-type]
        con.register("_watch_samples", batch.to_arrow())
        try:
            # (series, ts_us) is a sample whichever source read it: an ingest may have stored it
            row = con.execute(f"""
                INSERT INTO metric_samples ({", ".join(COLUMNS)})
                SELECT b.* FROM _watch_samples AS b
                ANTI JOIN (SELECT series, ts_us FROM metric_samples WHERE ts_us BETWEEN ? AND ?) AS m
                USING (series, ts_us)""", [lo, hi]).fetchone()  # fmt: skip
        finally:
            con.unregister("_watch_samples")
        return int(row[0]) if row else 0

    def stored(self) -> None:
        self.pending = []

    # ------------------------------------------------------------------ persistence

    def to_state(self) -> dict[str, Any]:
        return {
            "queried_to_us": self.queried_to_us, "seen": self.seen, "jobs": sorted(self.jobs),
            "runs": {k: asdict(v) for k, v in self.runs.items()},
            "targets": {k: asdict(v) for k, v in self.targets.items()},
            "samples_total": self.samples_total,
        }  # fmt: skip

    def load_state(self, s: dict[str, Any] | None) -> None:
        if not s:
            return
        self.queried_to_us, self.seen, self.jobs = s["queried_to_us"], s["seen"], set(s["jobs"])
        self.runs = {k: GaugeRun(**v) for k, v in s["runs"].items()}
        self.targets = {k: TargetSeen(**v) for k, v in s["targets"].items()}
        self.samples_total = s.get("samples_total", 0)


def _iso(us: int) -> str:
    from pdforensics.verdict import iso

    return iso(us)
