"""`ingest --prometheus URL` / `--openmetrics FILE`: SGLang's Prometheus samples into `metric_samples`.

Beside the log ingest, not through it: samples make no `lines`. A run is a row of `ingests`
(`readers` = prometheus | openmetrics, `records` the samples read, `stored` the new ones,
`duplicates` those already stored: (series, ts_us) identifies a sample, whichever source read it).

Each scrape target (job, instance) is given the host and engine of the logs it is:
`--prometheus-map FILE` first, then a log host named like the instance's host part (or its short
name), then a prefill's address its `Receive:` lines carry; the engine is SGLang's `engine_type`
label, else the map's, else the only engine the logs saw on that host. Targets no rule matches
are stored with host NULL and listed in the summary. Every run maps every stored target again,
so logs ingested after the metrics are joined at the next metrics ingest.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pdforensics import store
from pdforensics.errors import UsageError
from pdforensics.sources import prometheus as prom

if TYPE_CHECKING:
    import duckdb
    import polars as pl

MAPPED_COLUMNS = ("host", "engine", "matched_by")
ENGINES = ("prefill", "decode", "unified")


@dataclass
class Target:
    job: str | None
    instance: str | None
    host: str | None
    engine: str | None
    matched_by: str | None
    series: int


@dataclass
class MetricsSummary:
    source: str
    since_us: int | None
    until_us: int | None
    ingest_id: int = 0
    read: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    targets: list[Target] = field(default_factory=list)

    @property
    def unmatched(self) -> list[Target]:
        return [t for t in self.targets if t.host is None]

    def describe(self) -> list[str]:
        """The summary's lines: the counts, then each target and what it was mapped to."""
        out = [
            f"{self.source}: {self.read:,} samples read, {self.stored:,} stored, {self.duplicates:,} already stored"
            + (f", {self.rejected:,} lines unreadable" if self.rejected else "")
            + f"; {len(self.targets)} target(s)"
        ]
        for t in self.targets:
            name = f"{t.instance or '?'} (job {t.job or '?'})"
            if t.host is None:
                out.append(f"  unmatched: {name}, {t.series} series: no host of the logs is called so "
                           "(name it in --prometheus-map)")  # fmt: skip
            else:
                out.append(f"  {name}: host {t.host}, {t.engine or 'engine unknown'} (by {t.matched_by})")
        return out


# ------------------------------------------------------------------ instances


def load_map(path: Path | None) -> dict[str, dict[str, str]]:
    """--prometheus-map: `[instances]` keys (an instance `host:port`, or its host part) to
    `{ host = "...", engine = "..." }`."""
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--prometheus-map {path}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--prometheus-map {path}: {exc}") from None
    table = data.get("instances")
    if not isinstance(table, dict):
        raise UsageError(f"--prometheus-map {path}: no [instances] table")
    out: dict[str, dict[str, str]] = {}
    for key, value in table.items():
        if not isinstance(value, dict) or not isinstance(value.get("host"), str):
            raise UsageError(f'--prometheus-map {path}: {key!r} needs host = "NAME"')
        engine = value.get("engine")
        if engine is not None and engine not in ENGINES:
            raise UsageError(f"--prometheus-map {path}: {key!r}: engine must be one of {', '.join(ENGINES)}")
        out[key] = {"host": value["host"], **({"engine": engine} if engine else {})}
    return out


def host_part(instance: str | None) -> str | None:
    """`gpu-a:30000` -> gpu-a, `[fe80::1]:30000` -> fe80::1."""
    if not instance:
        return None
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def _log_hosts(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, set[str]], dict[str, str]]:
    """The hosts the logs name, with the engines seen on each, and prefill addresses -> host."""
    engines: dict[str, set[str]] = {}
    for host, engine in con.execute(
        "SELECT DISTINCT host, coalesce(engine_by_lines, engine_by_name) FROM source_stats WHERE host IS NOT NULL"
    ).fetchall():
        engines.setdefault(str(host), set())
        if engine in ENGINES:
            engines[str(host)].add(str(engine))
    addresses: dict[str, str] = {}
    for host, address in con.execute(
        "SELECT DISTINCT host, bootstrap_host FROM events WHERE engine = 'prefill' AND host IS NOT NULL "
        "AND event IN ('request_received', 'request_received_openai') AND bootstrap_host IS NOT NULL "
        "AND bootstrap_host <> '2.2.2.2'"
    ).fetchall():
        addresses.setdefault(str(address), str(host))
    return engines, addresses


def resolve(
    job: str | None, instance: str | None, engine_type: str | None,
    overrides: dict[str, dict[str, str]], engines: dict[str, set[str]], addresses: dict[str, str],
) -> tuple[str | None, str | None, str | None]:  # fmt: skip
    """(host, engine, matched_by) of one target."""
    part = host_part(instance)
    label_engine = engine_type if engine_type in ENGINES else None
    for key in (instance, part):
        if key is not None and key in overrides:
            o = overrides[key]
            return o["host"], label_engine or o.get("engine") or _only(engines.get(o["host"])), "map"
    host = by = None
    if part is not None:
        lowered = {h.lower(): h for h in engines}
        short = {}
        for h in engines:
            short.setdefault(h.split(".")[0].lower(), []).append(h)
        if part.lower() in lowered:
            host, by = lowered[part.lower()], "name"
        elif len(short.get(part.split(".")[0].lower(), [])) == 1 and not part.replace(".", "").isdigit():
            host, by = short[part.split(".")[0].lower()][0], "name"
        elif part in addresses:
            host, by = addresses[part], "address"
    if host is None:
        return None, label_engine or _engine_of_job(job), None
    return host, label_engine or _only(engines.get(host)) or _engine_of_job(job), by


def _only(engines: set[str] | None) -> str | None:
    return next(iter(engines)) if engines and len(engines) == 1 else None


def _engine_of_job(job: str | None) -> str | None:
    hits = [e for e in ("prefill", "decode") if job and e in job.lower()]
    return hits[0] if len(hits) == 1 else None


def _target_frame(con: duckdb.DuckDBPyConnection, overrides: dict[str, dict[str, str]]) -> pl.DataFrame:
    """Every stored target (job, instance) with the host and engine it maps to."""
    import polars as pl

    engines, addresses = _log_hosts(con)
    rows = con.execute(
        "SELECT job, instance, any_value(engine_type) FILTER (WHERE engine_type IS NOT NULL), "
        "count(DISTINCT series) FROM metric_samples GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    out = [
        (job, inst, *resolve(job, inst, et, overrides, engines, addresses), n) for job, inst, et, n in rows
    ]
    return pl.DataFrame(
        out, orient="row",
        schema={"job": pl.String, "instance": pl.String, "host": pl.String, "engine": pl.String,
                "matched_by": pl.String, "series": pl.Int64},
    )  # fmt: skip


def remap(con: duckdb.DuckDBPyConnection, overrides: dict[str, dict[str, str]]) -> list[Target]:
    """Give every stored sample its target's host and engine (only rows that change are written)."""
    targets = _target_frame(con, overrides)
    con.register("_metric_targets", targets.to_arrow())
    try:
        with store.transaction(con):
            con.execute("""
                UPDATE metric_samples AS m SET host = t.host, engine = t.engine, matched_by = t.matched_by
                FROM _metric_targets AS t
                WHERE m.job IS NOT DISTINCT FROM t.job AND m.instance IS NOT DISTINCT FROM t.instance
                  AND (m.host IS DISTINCT FROM t.host OR m.engine IS DISTINCT FROM t.engine
                       OR m.matched_by IS DISTINCT FROM t.matched_by)""")  # fmt: skip
    finally:
        with suppress(Exception):
            con.unregister("_metric_targets")
    return [Target(*row) for row in targets.iter_rows()]


# ------------------------------------------------------------------ storing

COLUMNS = ("ingest_id", "source", "series", "metric", "labels", "job", "instance", "engine_type", "dp_rank",
           "host", "engine", "matched_by", "ts_us", "value")  # fmt: skip


def store_samples(
    con: duckdb.DuckDBPyConnection, ingest_id: int, source: str, frame: pl.DataFrame
) -> tuple[int, int]:
    """One transaction: the samples not stored yet, and the run's counters. (stored, duplicates)"""
    import polars as pl

    if frame.height == 0:
        return 0, 0
    unique = frame.unique(["series", "ts_us"], keep="first", maintain_order=True)
    batch = unique.with_columns(
        ingest_id=pl.lit(ingest_id, pl.Int32), source=pl.lit(source),
        host=pl.lit(None, pl.String), engine=pl.lit(None, pl.String), matched_by=pl.lit(None, pl.String),
    ).select(COLUMNS)  # fmt: skip
    lo, hi = int(batch["ts_us"].min()), int(batch["ts_us"].max())  # type: ignore[arg-type]
    with store.transaction(con):
        con.register("_metric_batch", batch.to_arrow())
        try:
            before = con.execute("SELECT count(*) FROM metric_samples").fetchone()
            # the time range keeps the lookup to the row groups the batch can meet (zone maps)
            con.execute(f"""
                INSERT INTO metric_samples ({", ".join(COLUMNS)})
                SELECT b.* FROM _metric_batch AS b
                ANTI JOIN (SELECT series, ts_us FROM metric_samples WHERE ts_us BETWEEN ? AND ?) AS m
                USING (series, ts_us)""", [lo, hi])  # fmt: skip
            after = con.execute("SELECT count(*) FROM metric_samples").fetchone()
            stored = int(after[0]) - int(before[0]) if after and before else 0
            duplicates = frame.height - stored
            con.execute(
                "UPDATE ingests SET records = records + ?, stored = stored + ?, duplicates = duplicates + ? "
                "WHERE ingest_id = ?",
                [frame.height, stored, duplicates, ingest_id],
            )
        finally:
            with suppress(Exception):
                con.unregister("_metric_batch")
    return stored, duplicates


def last_log_window(con: duckdb.DuckDBPyConnection) -> tuple[int | None, int | None]:
    """The window of the last log ingest (the default window of --prometheus): its --since/--until,
    else the span of the lines it stored."""
    row = con.execute(
        "SELECT coalesce(i.since_us, min(l.ts_us)), coalesce(i.until_us, max(l.ts_us) + 1) "
        "FROM ingests AS i LEFT JOIN lines AS l USING (ingest_id) "
        "WHERE coalesce(i.readers, '') NOT IN ('prometheus', 'openmetrics') "
        "GROUP BY i.ingest_id, i.since_us, i.until_us "
        "HAVING coalesce(i.since_us, min(l.ts_us)) IS NOT NULL ORDER BY i.ingest_id DESC LIMIT 1"
    ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def ingest_metrics(
    con: duckdb.DuckDBPyConnection,
    *,
    prometheus: str | None,
    openmetrics: list[Path] | None,
    since_us: int | None,
    until_us: int | None,
    now_us: int,
    selectors: list[str] | None = None,
    map_file: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[MetricsSummary]:
    """Read the server and/or the files into `metric_samples`; one `ingests` run per source."""
    overrides = load_map(map_file)
    if openmetrics and selectors:
        raise UsageError("--match selects from a --prometheus server; an --openmetrics file is read for the "
                         "SGLang families (and their targets' up)")  # fmt: skip
    summaries: list[MetricsSummary] = []
    if prometheus is not None:
        server = prom.PrometheusServer(prometheus)
        chosen = prom.check_selectors(selectors)
        if since_us is None:
            since_us, last_until = last_log_window(con)
            if since_us is None:
                raise UsageError("--prometheus needs --since (no earlier log ingest gives a window)")
            until_us = until_us if until_us is not None else last_until
        until_us = until_us if until_us is not None else now_us
        summary = MetricsSummary(f"prometheus:{server.url}", since_us, until_us)
        _run(con, summary, "prometheus", server.samples(chosen, since_us, until_us, progress))
        summaries.append(summary)
    for path in openmetrics or []:
        frame, bad = prom.read_openmetrics(Path(path))
        if since_us is not None:
            frame = frame.filter(frame["ts_us"] >= since_us)
        if until_us is not None:
            frame = frame.filter(frame["ts_us"] < until_us)
        lo = since_us if since_us is not None else (frame["ts_us"].min() if frame.height else None)
        hi = until_us if until_us is not None else (frame["ts_us"].max() + 1 if frame.height else None)  # type: ignore[operator]
        summary = MetricsSummary(prom.file_label(Path(path)), lo, hi, rejected=bad)  # type: ignore[arg-type]
        _run(con, summary, "openmetrics", iter([frame]))
        summaries.append(summary)
    targets = remap(con, overrides)
    for summary in summaries:
        summary.targets = targets
    return summaries


def _run(con: duckdb.DuckDBPyConnection, summary: MetricsSummary, reader: str, frames) -> None:  # type: ignore[no-untyped-def]
    summary.ingest_id = store.begin_ingest(
        con, summary.source, reader, "", summary.since_us, summary.until_us
    )
    status = "interrupted"
    try:
        for frame in frames:
            stored, duplicates = store_samples(con, summary.ingest_id, summary.source, frame)
            summary.read += frame.height
            summary.stored += stored
            summary.duplicates += duplicates
        if summary.rejected:
            con.execute(
                "UPDATE ingests SET rejected = ? WHERE ingest_id = ?", [summary.rejected, summary.ingest_id]
            )
        status = "complete"
    finally:
        store.finish_ingest(con, summary.ingest_id, status, reader)


def run_metrics_ingest(
    db: Path, since: str | None, until: str | None, prometheus: str | None, openmetrics: list[Path] | None,
    selectors: list[str] | None, map_file: Path | None, now_us: int, as_json: bool = False,
) -> list[str]:  # fmt: skip
    """The CLI's `ingest --prometheus/--openmetrics`: parse the window, store, and the summary's
    lines (as JSON lines with `as_json`)."""
    import json

    from pdforensics.api import checked_window, ingest_lock_wait_s

    window = checked_window(since, until, now_us)
    if prometheus is not None:
        prom.PrometheusServer(prometheus)  # a malformed URL is a usage error before the database opens
    con = store.open_db(db, wait_s=ingest_lock_wait_s())
    try:
        summaries = ingest_metrics(
            con, prometheus=prometheus, openmetrics=openmetrics, since_us=window.since_us,
            until_us=window.until_us, now_us=now_us, selectors=selectors, map_file=map_file,
        )  # fmt: skip
    finally:
        con.close()
    if as_json:
        return [json.dumps({"metrics": {
            "source": s.source, "ingest_id": s.ingest_id, "since_us": s.since_us, "until_us": s.until_us,
            "read": s.read, "stored": s.stored, "duplicates": s.duplicates, "rejected": s.rejected,
            "targets": [t.__dict__ for t in s.targets],
        }}) for s in summaries]  # fmt: skip
    return [line for s in summaries for line in s.describe()]
