"""Hand-built pdforensics databases for the classification tests.

Rows go straight into `lines` and `events` (the documented contract, docs/internals.md), so each
test states exactly which log lines exist and nothing depends on the catalog or the parser.
Times are seconds after T0 on the writing host's own clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from pdforensics import store, verdict
from pdforensics.schema import EVENT_FIELDS

T0 = 1_796_000_000_000_000  # 2026-11-30 UTC, in us
S = 1_000_000

PREFILL = {"host": "gpu-a", "unit": "sglang-prefill.service", "engine": "prefill", "pid": 1100,
           "invocation_id": "inv-p1"}  # fmt: skip
DECODE = {"host": "gpu-b", "unit": "sglang-decode.service", "engine": "decode", "pid": 2200,
          "invocation_id": "inv-d1"}  # fmt: skip


def room(n: int) -> int:
    """A bootstrap_room that looks like the router's (large, above 2**62)."""
    return 5_000_000_000_000_000_000 + n


class Log:
    """A database under construction: `add` a line, then `verdict()` / `requests()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # as an ingest starts one: a copy of the user's cache's empty database (schema and views
        # installed once per test run, ~0.35 s each otherwise); created statement by statement
        # when the cache is off (tests/test_prebuilt_database.py: the same database either way)
        verdict.prebuilt_database(path)
        self.con = store.open_db(path)
        self.n = 0
        self.installed = False
        self._pending: dict[tuple[str, str], list[list[Any]]] | None = None
        # (from, until) of requests held in the inflight queue: the batches in between count them
        self.pinned: list[tuple[float, float | None]] = []
        self.con.execute(
            "INSERT INTO ingests (ingest_id, started_at, sources, status) VALUES (1, now(), 'hand-built', 'ok')"
        )

    def add(self, t: float, who: dict, event: str | None, message: str = "", *,
            parse_error: str | None = None, **fields: Any) -> Log:  # fmt: skip
        """One line at `t` seconds; `fields` are event columns (tp_rank/dp_rank go to both tables)."""
        self.n += 1
        ts = T0 + round(t * S)
        tp_rank = fields.pop("tp_rank", None)
        dp_rank = fields.pop("dp_rank", None)
        entry = fields.pop("entry", event)
        line = {
            "line_id": self.n, "ingest_id": 1, "source": "hand-built", "source_key": "hand-built", "seq": self.n,
            "host": who["host"], "unit": who["unit"], "engine": who["engine"], "pid": who.get("pid"),
            "boot_id": "boot-" + who["host"], "invocation_id": who.get("invocation_id"),
            "syslog_identifier": who.get("syslog_identifier", "python3"), "priority": 6, "ts_us": ts,
            "app_ts_us": ts // S * S, "ts_origin": "journal", "app_ts_precision_us": S, "dp_rank": dp_rank,
            "tp_rank": tp_rank, "message": message or (event or ""), "event": event, "entry": entry,
            "parse_error": parse_error,
        }  # fmt: skip
        self._insert("lines", line)
        if event is not None:
            unknown = set(fields) - set(EVENT_FIELDS)
            assert not unknown, unknown
            row = {k: line[k] for k in ("line_id", "ts_us", "app_ts_us", "host", "unit", "engine", "pid",
                                        "invocation_id", "boot_id", "dp_rank", "tp_rank", "event", "entry")}  # fmt: skip
            row.update(fields)
            row["extra"] = json.dumps({})
            self._insert("events", row)
        return self

    def _insert(self, table: str, row: dict) -> None:
        cols = ", ".join(row)
        if self._pending is not None:
            self._pending.setdefault((table, cols), []).append(list(row.values()))
            return
        self.con.execute(
            f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values())
        )

    @contextmanager
    def bulk(self) -> Iterator[Log]:
        """Write the lines added inside in a few multi-row INSERTs (thousands of lines, quickly)."""
        self._pending = {}
        try:
            yield self
        finally:
            pending, self._pending = self._pending, None
            for (table, cols), rows in pending.items():
                marks = "(" + ", ".join("?" * len(rows[0])) + ")"
                for i in range(0, len(rows), 200):
                    chunk = rows[i : i + 200]
                    self.con.execute(
                        f"INSERT INTO {table} ({cols}) VALUES {', '.join([marks] * len(chunk))}",
                        [v for row in chunk for v in row],
                    )

    # ---- common lines -------------------------------------------------------------------------

    def receive(self, t: float, who: dict, r: int, rid: str) -> Log:
        return self.add(t, who, "request_received", f"Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_room={r})",
                        rid=rid, bootstrap_room=r, bootstrap_host="10.0.0.5")  # fmt: skip

    def finish(self, t: float, who: dict, r: int, rid: str, abort: str | None = None) -> Log:
        return self.add(t, who, "request_finished", f"Finish: obj=GenerateReqInput(rid='{rid}')", rid=rid,
                        bootstrap_room=r, finish_type="abort" if abort else "length", reason=abort)  # fmt: skip

    def completed(self, t: float, r: int, p: dict = PREFILL, d: dict = DECODE, skew: float = 0.0) -> Log:
        """A request both engines saw and finished (decode lines on a clock `skew` seconds ahead)."""
        self.receive(t, p, r, f"p{r}").receive(t + 0.001 + skew, d, r, f"d{r}")
        return self.finish(t + 0.5, p, r, f"p{r}").finish(t + 3 + skew, d, r, f"d{r}")

    def batch(self, t: float, inflight: int, new_seq: int = 1, queue: int = 0, bootstrap: int = 0,
              who: dict = PREFILL, entry: str = "prefill_batch_0518") -> Log:  # fmt: skip
        inflight += sum(1 for a, b in self.pinned if a < t and (b is None or t < b))
        return self.add(t, who, "prefill_stats", f"Prefill batch, #new-seq: {new_seq}, #inflight-req: {inflight}",
                        new_seq=new_seq, inflight_req=inflight, queue_req=queue, bootstrap_req=bootstrap,
                        tp_rank=0, entry=entry)  # fmt: skip

    def failure(self, t: float, who: dict, event: str, r: int, rid: str, reason: str, ranks: int = 4) -> Log:
        for rank in range(ranks):
            self.add(t, who, event, f"{event} rank={rank} rid={rid} room={r}: {reason}", rid=rid,
                     bootstrap_room=r, rank=rank, tp_rank=rank, reason=reason)  # fmt: skip
        return self

    # ---- answers ------------------------------------------------------------------------------

    def close(self) -> None:
        self.con.close()

    def install(self) -> None:
        if not self.installed:
            verdict.ensure_views(self.con)  # a prebuilt database has this version's already
            self.installed = True

    def verdict(self, timeout: float | None = 60, **opts: Any) -> verdict.Verdict:
        self.install()
        return verdict.compute_verdict(self.con, verdict.VerdictOptions(watchdog_timeout_s=timeout, **opts))

    def requests(self, timeout: float | None = 60, **opts: Any) -> dict[int, dict[str, Any]]:
        self.install()
        verdict.apply_options(self.con, verdict.VerdictOptions(watchdog_timeout_s=timeout, **opts))
        with verdict.materialised(self.con):
            cur = self.con.execute("SELECT * FROM requests")
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        return {int(row[0]): dict(zip(names, row, strict=True)) for row in rows}

    def query(self, sql: str) -> list[tuple]:
        return self.con.execute(sql).fetchall()


def connect_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    return store.open_db(path, read_only=True)
