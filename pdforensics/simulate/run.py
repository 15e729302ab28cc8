"""simulate() / simulate_plain(): run a scenario and write its files."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import polars as pl

from pdforensics.errors import UsageError
from pdforensics.simulate import build as B
from pdforensics.simulate import render, sim
from pdforensics.simulate.expected import build_expected
from pdforensics.simulate.model import World
from pdforensics.simulate.scenarios import SCENARIOS, Built, Scenario
from pdforensics.simulate.writer import JournalSink, PlainSink

LINES_PER_CHUNK = 150_000


def run_world(
    name: str, now_us: int | None, seed: int, scale: float, zone: str | None = None
) -> tuple[World, Scenario, Built]:
    """`zone`: every host's local time is that IANA zone's (its DST changes too), not its own offset."""
    sc = SCENARIOS.get(name)
    if sc is None:
        raise UsageError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    if scale <= 0:
        raise UsageError("scale must be positive")
    _check_zone(zone)
    now = time.time_ns() // 1000 if now_us is None else now_us
    w = World(name, seed, now, sc.duration_s, scale, zone=zone)
    built = sc.build(w)
    w.bootstrap_ip = built.pre.host.ip  # the router injects the prefill's bootstrap address
    if built.fleet is not None:  # many instances: each request's pair names its own bootstrap host
        sim.run_fleet(w, built.fleet, sc.duration_s)
    else:
        sim.run(w, built.pre, built.dec, built.pprocs, built.dprocs, sc.duration_s)
    B.drain_lines(w, built.dprocs)
    if built.after is not None:
        built.after(w)
    return w, sc, built


def _render(w: World, sc: Scenario, built: Built, sinks: list) -> None:
    """Render the world in true-time chunks; journal sinks get ``ts`` order, plain sinks ``t_us`` order."""
    end = sc.duration_s
    events = render.event_frame(w, end)
    streams = render.stream_frame(w)
    table = render.request_table(w, built.pre, built.dec, built.pprocs, built.dprocs)
    if built.fleet is not None:
        table = table.with_columns(w.table.select("pe", "de"))
    estimate = 6 * table.height + events.height
    n_chunks = max(1, -(-estimate // LINES_PER_CHUNK))
    bounds = [end * k / n_chunks for k in range(n_chunks + 1)]
    bounds[-1] = end + 1e-6
    offs = streams.select((pl.col("skew_us") + pl.col("delay_us")).min()).item() if streams.height else 0
    carry: pl.DataFrame | None = None
    unseen = _silent_holes(w)
    for lo, hi in itertools.pairwise(bounds):
        if built.fleet is not None:
            frames = list(render.fleet_request_frames(w, built.fleet, table, lo, hi))
        else:
            frames = list(render.request_frames(w, built.pre, built.dec, table, lo, hi))
        lo_us, hi_us = w.t0_us + round(lo * 1e6), w.t0_us + round(hi * 1e6)
        frames.append(events.filter((pl.col("t_us") >= lo_us) & (pl.col("t_us") < hi_us)))
        chunk = pl.concat(frames)
        if unseen is not None:
            chunk = chunk.filter(~unseen)
        chunk = render.finish_lines(chunk, streams, w.zone)
        for sink in sinks:
            if isinstance(sink, PlainSink):
                sink.write(chunk)
        ordered = chunk if carry is None else pl.concat([carry, chunk])
        ordered = ordered.sort("ts", maintain_order=True)
        last = hi >= end
        horizon = hi_us + offs  # nothing from a later chunk can sort before this
        ready = ordered if last else ordered.filter(pl.col("ts") < horizon)
        carry = None if last else ordered.filter(pl.col("ts") >= horizon)
        for sink in sinks:
            if isinstance(sink, JournalSink):
                sink.write(ready)


def _silent_holes(w: World) -> pl.Expr | None:
    """The lines no input holds (``Hole.silent``): every stream of that unit on that host,
    systemd's lines about the unit included, in the hole's true-time span."""
    expr = None
    for h in w.holes:
        if not h.silent:
            continue
        ids = [i for i, s in enumerate(w.streams) if s.host is h.host and s.unit == h.unit]
        lo_us = w.t0_us + round(max(h.t0, -1e7) * 1e6)
        hi_us = w.t0_us + round(min(h.t1, 1e8) * 1e6)
        inside = pl.col("stream").is_in(ids) & (pl.col("t_us") >= lo_us) & (pl.col("t_us") < hi_us)
        expr = inside if expr is None else expr | inside
    return expr


def simulate(
    name: str,
    out: Path,
    now_us: int | None = None,
    seed: int = 0,
    scale: float = 1.0,
    *,
    formats: tuple[str, ...] = ("export", "json"),
    tz: str | None = None,
) -> Path:
    """Write ``out/journal.export``, ``out/journal.json`` and ``out/expected.json``; return ``out``.

    ``formats`` may drop one of the two journal files (benchmarks that need only one); ``tz``: the
    hosts' local time is that zone's (run_world).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not formats or set(formats) - {"export", "json"}:
        raise UsageError("formats must be a non-empty subset of ('export', 'json')")
    w, sc, built = run_world(name, now_us, seed, scale, tz)
    sink = JournalSink(w, out, _hosts(w), formats=tuple(formats))
    try:
        _render(w, sc, built, [sink])
    finally:
        sink.close()
    text = build_expected(w, sc, built.pre, built.dec, (sink.since_us or 0, sink.until_us or 0), built.fleet)
    (out / "expected.json").write_text(text)
    return out


def simulate_plain(
    name: str, out: Path, now_us: int | None = None, seed: int = 0, scale: float = 1.0, tz: str | None = None
) -> Path:
    """Write ``out/plain/<host>-<unit>.log``: the SGLang processes' own output, journald or not."""
    out = Path(out)
    w, sc, built = run_world(name, now_us, seed, scale, tz)
    for old in (out / "plain").glob("*.log"):  # a regeneration must not keep files of another run
        old.unlink()
    sink = PlainSink(w, out / "plain", cri_line_max=sc.plain_cri_line_max)
    try:
        _render(w, sc, built, [sink])
    finally:
        sink.close()
    return out / "plain"


def _check_zone(zone: str | None) -> None:
    if zone is None:
        return
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"--tz {zone!r}: not an IANA time zone (e.g. Europe/Berlin, UTC)") from None


def _hosts(w: World) -> list:
    seen = {}
    for s in w.streams:
        seen.setdefault(s.host.name, s.host)
    return [seen[k] for k in sorted(seen)]
