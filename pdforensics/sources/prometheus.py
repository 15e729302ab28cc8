"""Prometheus samples of SGLang's metrics: from a server's HTTP API, or from an OpenMetrics file.

Both readers yield frames of `schema.METRIC_SAMPLE_SCHEMA`'s first columns (`SAMPLE_COLUMNS`):
one row per stored sample, never a resampled grid. A server is asked range-vector instant
queries (`SELECTOR[Dms]` at time=end), which return each scrape's own timestamp and value, in
time chunks sized so that no response holds more than about `MAX_SAMPLES_PER_RESPONSE` samples.

A series is named the way Prometheus prints it, with its labels sorted: `series` is
`name{a="x",b="y"}` (label values escaped as the exposition format does), so a sample read from
the server and the same sample read from `promtool tsdb dump-openmetrics` are one row.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pdforensics.errors import SourceError, UsageError

if TYPE_CHECKING:
    import polars as pl

# The families pdforensics reads by default (SGLang's scheduler metrics; see docs/prometheus.md for
# when each is refreshed). `num_prefill_infight_queue_reqs` (sic) and `num_prefill_prealloc_queue_reqs`
# are older builds' names of the inflight and bootstrap gauges; `num_requests_total` shows a
# restart as a counter reset even when no request failed.
SGLANG_FAMILIES = (
    "num_prefill_inflight_queue_reqs", "num_prefill_infight_queue_reqs",
    "num_prefill_bootstrap_queue_reqs", "num_prefill_prealloc_queue_reqs",
    "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs",
    "num_running_reqs", "num_queue_reqs", "token_usage",
    "num_bootstrap_failed_reqs_total", "num_transfer_failed_reqs_total", "num_requests_total",
    "kv_transfer_.*",
)  # fmt: skip
SGLANG_NAME_RE = "sglang:(" + "|".join(SGLANG_FAMILIES) + ")"
DEFAULT_MATCH = f'{{__name__=~"{SGLANG_NAME_RE}"}}'

SAMPLE_COLUMNS = ("metric", "series", "labels", "job", "instance", "engine_type", "dp_rank", "ts_us", "value")

MAX_SAMPLES_PER_RESPONSE = 250_000
FIRST_CHUNK_S = 3600.0
MIN_CHUNK_S = 60.0
TIMEOUT_S = 30.0
RETRIES = 3  # attempts per request on a connection failure, a timeout or a 5xx


def _sample_schema() -> dict[str, pl.DataType]:
    import polars as pl

    return {
        "metric": pl.String(), "series": pl.String(), "labels": pl.String(), "job": pl.String(),
        "instance": pl.String(), "engine_type": pl.String(), "dp_rank": pl.Int16(),
        "ts_us": pl.Int64(), "value": pl.Float64(),
    }  # fmt: skip


def empty_samples() -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame(schema=_sample_schema())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _with_label_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """`metric` and `pairs` (the sorted `k="v"` strings, escaped) -> every SAMPLE_COLUMNS column
    but ts_us/value. Labels become JSON by quoting each key: the exposition format escapes
    values as JSON does (\\\\, \\", \\n)."""
    import polars as pl

    def label(name: str) -> pl.Expr:
        # `json_path_match` unescapes; the pair strings are escaped
        return pl.col("labels").str.json_path_match(f"$.{name}")

    frame = frame.with_columns(pl.col("pairs").list.sort())
    return frame.with_columns(
        series=pl.col("metric") + "{" + pl.col("pairs").list.join(",") + "}",
        labels="{" + pl.col("pairs").list.eval(pl.element().str.replace(r'^([^=]+)="', '"$1":"')).list.join(",") + "}",
    ).with_columns(
        job=label("job"), instance=label("instance"), engine_type=label("engine_type"),
        dp_rank=pl.coalesce(label("dp_rank"), label("dp")).cast(pl.Int16, strict=False),
    )  # fmt: skip


# ------------------------------------------------------------------ OpenMetrics / exposition files

_SAMPLE_RE = (
    r"^(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?[ \t]+(?P<value>\S+)(?:[ \t]+(?P<ts>\S+))?"
)
_PAIR_RE = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'


def read_openmetrics(path: Path, name_re: str = SGLANG_NAME_RE) -> tuple[pl.DataFrame, int]:
    """The samples of a `promtool tsdb dump-openmetrics` export or a saved exposition (a scrape of
    /metrics) whose metric name matches `name_re`, plus `up` of their jobs; and how many sample
    lines could not be read. OpenMetrics (a file ending in `# EOF`) stamps samples in seconds,
    the Prometheus text format in milliseconds; a sample with no time takes the file's mtime."""
    import polars as pl

    try:
        if not path.is_file():
            raise SourceError(f"--openmetrics {path}: no such file")
        mtime_us = int(path.stat().st_mtime * 1e6)
        lines = pl.read_csv(
            path, has_header=False, separator="\x1f", quote_char=None, new_columns=["line"],
            schema_overrides={"line": pl.String()}, truncate_ragged_lines=True, encoding="utf8-lossy",
        )["line"]  # fmt: skip
    except SourceError:
        raise
    except PermissionError:
        raise SourceError(f"--openmetrics {path}: permission denied") from None
    except (OSError, pl.exceptions.ComputeError, pl.exceptions.NoDataError) as exc:
        if isinstance(exc, pl.exceptions.NoDataError):
            return empty_samples(), 0
        raise SourceError(f"--openmetrics {path}: cannot read it: {str(exc).splitlines()[0]}") from None
    text = lines.str.strip_chars_end("\r")
    seconds = bool((text == "# EOF").any())
    samples = text.filter(text.str.len_chars().gt(0) & ~text.str.starts_with("#"))
    parts = samples.str.extract_groups(_SAMPLE_RE)
    frame = parts.struct.unnest().with_columns(pl.Series("raw", samples))
    bad = frame.filter(pl.col("metric").is_null() | pl.col("value").cast(pl.Float64, strict=False).is_null())
    frame = frame.filter(pl.col("metric").is_not_null())
    ts = pl.col("ts").cast(pl.Float64, strict=False)
    frame = frame.with_columns(
        value=pl.col("value").cast(pl.Float64, strict=False),
        ts_us=pl.when(pl.col("ts").is_null()).then(pl.lit(mtime_us, pl.Int64))
        .otherwise((ts * (1e6 if seconds else 1e3)).round().cast(pl.Int64)),
        pairs=pl.col("labels").fill_null("").str.extract_all(_PAIR_RE),
    ).filter(pl.col("value").is_not_null() & pl.col("ts_us").is_not_null())  # fmt: skip
    keep = frame.filter(pl.col("metric").str.contains(f"^(?:{name_re})$"))
    frame = _with_label_columns(pl.concat([keep, _up_of(frame, keep)]).drop("labels", "raw"))
    return frame.select(SAMPLE_COLUMNS), bad.height


def _up_of(frame: pl.DataFrame, keep: pl.DataFrame) -> pl.DataFrame:
    """The `up` samples of the jobs `keep` has series of."""
    import polars as pl

    job = pl.col("pairs").list.eval(pl.element().filter(pl.element().str.starts_with('job="'))).list.first()
    jobs = keep.select(job.alias("job")).unique()
    up = frame.filter(pl.col("metric") == "up").with_columns(job.alias("job"))
    return up.join(jobs, on="job", how="semi", nulls_equal=True).drop("job")


# ------------------------------------------------------------------ the HTTP API


@dataclass
class PrometheusServer:
    """A Prometheus-compatible query API at `url` (http://host:9090, or a prefix path)."""

    url: str
    timeout_s: float = TIMEOUT_S
    retries: int = RETRIES

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(f"--prometheus {self.url!r}: give the server's URL, e.g. http://127.0.0.1:9090")
        self.url = self.url.rstrip("/")

    def _get(self, path: str, params: dict[str, str]) -> dict:
        """One API call's `data`; a failure is one line (SourceError: unreachable, 5xx; UsageError:
        the server refused the query, e.g. a bad --match selector)."""
        body = urllib.parse.urlencode(params).encode()
        last = ""
        for attempt in range(self.retries):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))  # back off before retrying a failed request
            request = urllib.request.Request(
                self.url + path, data=body, method="POST",
                headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    payload = json.loads(response.read())
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if exc.code < 500:
                    raise UsageError(
                        f"--prometheus {self.url}: the server refused the query ({exc.code} {detail})"
                    ) from None
                last = f"{exc.code} {detail}"
                continue
            except urllib.error.URLError as exc:
                last = f"unreachable: {getattr(exc.reason, 'strerror', None) or exc.reason}"
                continue
            except (TimeoutError, OSError) as exc:
                last = f"no answer within {self.timeout_s:g}s" if isinstance(exc, TimeoutError) else str(exc)
                continue
            except ValueError:
                raise SourceError(
                    f"--prometheus {self.url}: the answer is not JSON (not a Prometheus API?)"
                ) from None
            if payload.get("status") != "success":
                raise UsageError(
                    f"--prometheus {self.url}: the server refused the query ({payload.get('errorType')}: "
                    f"{payload.get('error')})"
                )
            return payload.get("data") or {}
        raise SourceError(f"--prometheus {self.url}: {last} (tried {self.retries} times)")

    def samples(
        self, selectors: list[str], since_us: int, until_us: int,
        progress: Callable[[int], None] | None = None,
    ) -> Iterator[pl.DataFrame]:  # fmt: skip
        """Every sample of `selectors` in [since_us, until_us), chunk by chunk, then `up` of the
        jobs those series belong to (a target down the whole window has no other series)."""
        jobs: set[str] = set()
        for selector in selectors:
            for frame in self._range(selector, since_us, until_us, progress):
                jobs.update(j for j in frame["job"].unique().to_list() if j is not None)
                yield frame
        if jobs and not any(s.strip().startswith("up") for s in selectors):
            alternatives = "|".join(re.escape(j) for j in sorted(jobs))
            yield from self._range(f'up{{job=~"{_escape(alternatives)}"}}', since_us, until_us, progress)

    def _range(
        self, selector: str, since_us: int, until_us: int, progress: Callable[[int], None] | None
    ) -> Iterator[pl.DataFrame]:
        chunk_us = int(FIRST_CHUNK_S * 1e6)
        lo = since_us
        while lo < until_us:
            hi = min(lo + chunk_us, until_us)
            # [hi - d, hi] with d one millisecond longer than the chunk: Prometheus 2 includes the
            # left end, 3 leaves it out; the rows outside [lo, hi) are dropped below
            span_ms = (hi - lo) // 1000 + 1
            data = self._get("/api/v1/query", {"query": f"{selector}[{span_ms}ms]", "time": _seconds(hi)})
            if data.get("resultType") != "matrix":
                raise UsageError(
                    f"--match {selector!r} is not a series selector (it gave a {data.get('resultType')})"
                )
            frame = _matrix_frame(data.get("result") or [])
            frame = frame.filter((frame["ts_us"] >= lo) & (frame["ts_us"] < hi))
            if progress is not None:
                progress(frame.height)
            yield frame
            # the next chunk holds about MAX_SAMPLES_PER_RESPONSE at this chunk's density
            per_us = frame.height / max(hi - lo, 1)
            if per_us > 0:
                chunk_us = int(
                    min(FIRST_CHUNK_S * 6, max(MIN_CHUNK_S, MAX_SAMPLES_PER_RESPONSE / per_us / 1e6)) * 1e6
                )
            lo = hi


def _seconds(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read())
        return f"{payload.get('errorType')}: {payload.get('error')}"
    except (ValueError, OSError):
        return str(exc.reason)


def _matrix_frame(result: list[dict]) -> pl.DataFrame:
    """A query's matrix result as samples. Per series, not per sample: the values go to polars
    as two columns."""
    import polars as pl

    frames = []
    for item in result:
        labels = dict(item.get("metric") or {})
        name = labels.pop("__name__", "")
        values = item.get("values") or []
        if not values:
            continue
        ts, vs = zip(*values, strict=True)
        pairs = sorted(f'{k}="{_escape(v)}"' for k, v in labels.items())
        frames.append(pl.DataFrame({
            "ts_us": (pl.Series(ts, dtype=pl.Float64) * 1e6).round().cast(pl.Int64),
            "value": pl.Series(vs, dtype=pl.String).cast(pl.Float64),
        }).with_columns(metric=pl.lit(name), pairs=pl.lit(pairs, dtype=pl.List(pl.String))))  # fmt: skip
    if not frames:
        return empty_samples()
    return _with_label_columns(pl.concat(frames)).select(SAMPLE_COLUMNS)


def check_selectors(selectors: list[str] | None) -> list[str]:
    """--match values (repeatable), or the default: the SGLang families."""
    if not selectors:
        return [DEFAULT_MATCH]
    for s in selectors:
        if not s.strip():
            raise UsageError(
                "--match: give a series selector, e.g. 'sglang:num_running_reqs{job=\"prefill\"}'"
            )
    return list(selectors)


def file_label(path: Path) -> str:
    return f"openmetrics:{os.path.abspath(path)}"
