"""``simulate --openmetrics FILE``: the scenario's SGLang gauges as Prometheus would have scraped them.

What a scrape reads is what SGLang's gauges hold, and SGLang sets them only when it logs stats
(docs/prometheus.md): at each prefill batch line, each decode batch line, and, while the
scheduler is fully idle, every 30 s (``_maybe_log_idle_metrics``). So each scrape here takes the
values of the engine's last ``Prefill batch`` / ``Decode batch`` line before it (parsed back from
the simulated lines), or zeros once the engine has been idle (no request anywhere in it) 30 s
after its last line, and zeros from its start. A pinned request keeps the engine from being idle:
its gauge stays at the last batch line's value, as SGLang's does.

Every target is scraped every ``interval_s`` (each at its own offset, as Prometheus spreads
them); while no process of the engine is ready, the scrape fails: ``up`` is 0 and no other
sample is written (a scrape gap). Counters (requests received, bootstrap and transfer failures)
count per process and start again from 0 at a restart (a counter reset).

The file is OpenMetrics as ``promtool tsdb create-blocks-from openmetrics`` takes it: one
``# TYPE`` per family, a family's samples together, each series in time order, timestamps in
seconds (whole milliseconds: Prometheus keeps no more), ``# EOF`` last.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from pdforensics.simulate.model import INF, EngineCfg, Proc, World
from pdforensics.simulate.run import run_world

DEFAULT_INTERVAL_S = 10.0
IDLE_REFRESH_S = 30.0  # SGLang's _maybe_log_idle_metrics: at most every 30 s while fully idle

GAUGES = {
    "prefill": {
        "sglang:num_prefill_inflight_queue_reqs": r"#inflight-req: (\d+)",
        "sglang:num_prefill_bootstrap_queue_reqs": r"#(?:bootstrap|prealloc)-req: (\d+)",
        "sglang:num_running_reqs": r"#running-req: (\d+)",
        "sglang:num_queue_reqs": r"#queue-req: (\d+)",
        "sglang:token_usage": r"token usage: ([0-9.]+)",
    },
    "decode": {
        "sglang:num_decode_prealloc_queue_reqs": r"#prealloc-req: (\d+)",
        "sglang:num_decode_transfer_queue_reqs": r"#transfer-req: (\d+)",
        "sglang:num_running_reqs": r"#running-req: (\d+)",
        "sglang:num_queue_reqs": r"#queue-req: (\d+)",
        "sglang:token_usage": r"token usage: ([0-9.]+)",
    },
}
COUNTERS = ("sglang:num_requests", "sglang:num_bootstrap_failed_reqs", "sglang:num_transfer_failed_reqs")


@dataclass
class Target:
    eng: EngineCfg
    procs: list[Proc]
    first: int  # index of procs[0] in the table's p_proc / d_proc
    instance: str


def _targets(w: World, built) -> list[Target]:  # type: ignore[no-untyped-def]
    if built.fleet is not None:
        out = []
        for engs, procs in ((built.fleet.pres, built.fleet.pprocs), (built.fleet.decs, built.fleet.dprocs)):
            _, offsets = built.fleet.flat(procs)
            out += [Target(e, ps, off, "") for e, ps, off in zip(engs, procs, offsets, strict=True)]
    else:
        out = [Target(built.pre, built.pprocs, 0, ""), Target(built.dec, built.dprocs, 0, "")]
    seen: set[str] = set()
    for t in out:  # the port /metrics is served on; two engines of one host never share it
        port = t.eng.http_port
        while f"{t.eng.host.name}:{port}" in seen:
            port += 1
        t.instance = f"{t.eng.host.name}:{port}"
        seen.add(t.instance)
    return out


def _stats(w: World, target: Target) -> pl.DataFrame:
    """The target's batch lines: time, dp rank and each gauge's value (null: the line lacks it)."""
    streams = {p.stream: k for k, p in enumerate(target.procs)}
    head = "Prefill batch" if target.eng.role == "prefill" else "Decode batch"
    ev = [(e.t, streams[e.stream], e.ranks, e.body) for e in w.events
          if e.stream in streams and e.body.startswith(head)]  # fmt: skip
    frame = pl.DataFrame(ev, schema={"t": pl.Float64, "proc": pl.Int32, "ranks": pl.String, "body": pl.String},
                         orient="row")  # fmt: skip
    gauges = GAUGES[target.eng.role]
    return frame.select(
        "t", "proc",
        dp=pl.col("ranks").str.extract(r"DP(\d+)").cast(pl.Int32).fill_null(0),
        **{name: pl.col("body").str.extract(rx).cast(pl.Float64) for name, rx in gauges.items()},
    )  # fmt: skip


def _count_at(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many [start, end) intervals hold each t."""
    return np.searchsorted(np.sort(starts), t, "right") - np.searchsorted(np.sort(ends), t, "right")


def _samples(w: World, target: Target, interval_s: float, end: float) -> pl.DataFrame:
    """Every scrape of one target: (name, labels, t, value) rows."""
    role, eng = target.eng.role, target.eng
    offset = (zlib.crc32(target.instance.encode()) % int(interval_s * 1000)) / 1000
    scrapes = np.arange(offset, end + 1e-9, interval_s)
    proc_of = np.full(scrapes.shape, -1)
    for k, p in enumerate(target.procs):
        proc_of[(scrapes >= p.t_ready) & (scrapes < p.t_end)] = k
    base = f'instance="{target.instance}",job="sglang"'
    rows = [pl.DataFrame({"name": "up", "labels": base, "t": scrapes, "value": (proc_of >= 0).astype(float)})]
    table = w.table
    assert table is not None
    col = "p_proc" if role == "prefill" else "d_proc"
    mine = table.filter(
        pl.col(col).is_between(target.first, target.first + len(target.procs) - 1)
    ).with_columns(proc=pl.col(col) - target.first, dp=pl.col("p_dp" if role == "prefill" else "d_dp"))
    if role == "prefill":  # from the bootstrap queue until the inflight queue lets it go
        busy = mine.select("proc", "dp", s=pl.col("p_bq"), e=pl.col("p_rel"))
        arrive = mine.select("proc", t=pl.col("p_recv"))
        failed = {
            "sglang:num_bootstrap_failed_reqs": mine.filter(pl.col("p_out") == "boot_timeout").select("proc", t=pl.col("p_rel")),
            "sglang:num_transfer_failed_reqs": mine.filter(pl.col("p_out").is_in(["xfer_fail", "watchdog"])).select("proc", t=pl.col("p_rel")),
        }  # fmt: skip
    else:
        busy = mine.select("proc", "dp", s=pl.col("d_recv"), e=pl.min_horizontal("d_end", "d_fin"))
        arrive = mine.select("proc", t=pl.col("d_recv"))
        failed = {
            "sglang:num_bootstrap_failed_reqs": arrive.clear(),
            "sglang:num_transfer_failed_reqs": arrive.clear(),
        }
    stats = _stats(w, target)
    gauges = list(GAUGES[role])
    for k, p in enumerate(target.procs):
        at = scrapes[proc_of == k]
        if not at.size:
            continue
        mine_k = {
            "sglang:num_requests": arrive.filter(pl.col("proc") == k),
            **{n: f.filter(pl.col("proc") == k) for n, f in failed.items()},
        }
        for name, frame in mine_k.items():  # counted since this process started: a restart resets them
            times = frame["t"].fill_null(INF).to_numpy()
            rows.append(pl.DataFrame({"name": f"{name}_total", "labels": f'engine_type="{role}",{base}',
                                      "t": at, "value": np.searchsorted(np.sort(times), at, "right").astype(float)}))  # fmt: skip
        for dp in range(eng.dp):
            b = busy.filter((pl.col("proc") == k) & (pl.col("dp") == dp) & (pl.col("s") < INF))
            idle = _count_at(b["s"].to_numpy(), b["e"].fill_null(INF).to_numpy(), at) == 0
            st = stats.filter((pl.col("proc") == k) & (pl.col("dp") == dp))
            # the engine's start counts as a refresh to zeros (it is idle then)
            start = pl.DataFrame({"t": [p.t_ready], **{g: [0.0] for g in gauges}})
            refresh = pl.concat([start, st.select("t", *gauges)]).sort("t")
            last = pl.DataFrame({"at": at, "idle": idle}).join_asof(
                refresh, left_on="at", right_on="t", strategy="backward"
            )
            stale_idle = pl.col("idle") & (pl.col("at") - pl.col("t") >= IDLE_REFRESH_S)
            last = last.with_columns(
                [pl.when(stale_idle).then(0.0).otherwise(pl.col(g)).alias(g) for g in gauges]
            )
            labels = f'dp_rank="{dp}",' if eng.dp > 1 else ""
            labels += f'engine_type="{role}",{base},model_name="{eng.model}",tp_rank="{eng.lead_rank(dp)}"'
            for g in gauges:
                rows.append(
                    last.select(name=pl.lit(g), labels=pl.lit(labels), t="at", value=pl.col(g)).drop_nulls(
                        "value"
                    )
                )
    return pl.concat(rows, how="vertical_relaxed")


def write_openmetrics(
    name: str, path: Path, now_us: int | None = None, seed: int = 0, scale: float = 1.0,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> Path:  # fmt: skip
    """Write scenario ``name``'s scrapes to ``path`` (OpenMetrics text); return ``path``."""
    w, sc, built = run_world(name, now_us, seed, scale)
    frames = [_samples(w, t, interval_s, sc.duration_s) for t in _targets(w, built)]
    samples = pl.concat(frames).with_columns(
        ms=(w.t0_us + (pl.col("t") * 1e6).round().cast(pl.Int64)) // 1000
    )
    family = pl.col("name").str.replace(r"_total$", "")
    counter = pl.col("name").str.ends_with("_total")
    usage = pl.col("name") == "sglang:token_usage"
    value = (
        pl.when(usage)
        .then(pl.col("value").round(4).cast(pl.String))
        .otherwise(pl.col("value").cast(pl.Int64).cast(pl.String))
    )
    text = (
        samples.with_columns(family=family, counter=counter)
        .sort("family", "name", "labels", "ms")
        .with_columns(
            line=pl.col("name") + "{" + pl.col("labels") + "} " + value + " "
            + (pl.col("ms") // 1000).cast(pl.String) + "." + (pl.col("ms") % 1000).cast(pl.String).str.zfill(3)
        )
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for (fam, is_counter), group in text.group_by("family", "counter", maintain_order=True):
            out.write(f"# TYPE {fam} {'counter' if is_counter else 'gauge'}\n")
            out.write("\n".join(group["line"].to_list()) + "\n")
        out.write("# EOF\n")
    return path
