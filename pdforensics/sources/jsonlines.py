"""`journalctl -o json` files (one JSON object per line; plain or gzip).

Field values in that format:
* a string: the common case;
* an array of byte values: the field is not valid UTF-8 or has control characters (e.g. ANSI
  colour) -> decoded as UTF-8 with replacement, never stored as "[27, 91, …]";
* an array of strings / byte arrays: the field is repeated in the entry -> MESSAGE joined with
  "\\n", other fields keep the last value (as for every journal reader, see _records);
* null: `journalctl -o json` without `--all` prints null for fields over 4096 bytes. The record is
  kept with message "" and counted in `RecordBatch.null_messages`, so ingest can tell the user to
  re-export with `--all`. Other null fields count as absent.

Vectorised: polars `str.json_decode` into a struct of the wanted fields (numbers come back as their
text). Lines where a wanted field holds an array, lines that do not look like one object, and
whole chunks that json_decode refuses go through `json.loads`, which finds the malformed lines:
those become rejects with their line number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from pdforensics.sources import RecordBatch, Selection
from pdforensics.sources._common import (
    CHUNK_BYTES,
    check_file,
    escape_sample,
    file_key,
    in_background,
    line_chunks,
    open_stream,
    read_head,
    rejects_frame,
    split_batch,
    split_lines,
    stream_problem,
)
from pdforensics.sources._records import FIELDS, RAW_SCHEMA, ensure_raw, journal_records

MAX_LINE_BYTES = 256 << 20  # beyond this a "line" is not journalctl output; skip it, bounded memory
_STRUCT = pl.Struct({f: pl.String() for f in FIELDS})
_NULL_MESSAGE = r'"MESSAGE"\s*:\s*null'


class JsonLinesSource:
    reader = "json"

    def __init__(self, path: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = check_file(Path(path))
        self.label = f"file:{self.path.resolve()}"
        self.chunk_bytes = chunk_bytes

    def batches(self, selection: Selection, batch_size: int = 100_000) -> Iterator[RecordBatch]:
        key = file_key(read_head(self.path))

        def produce(stopped: Callable[[], bool]) -> Iterator[RecordBatch]:
            line_no = 1
            with open_stream(self.path) as stream:
                for buf, base, long in line_chunks(stream, self.path, self.chunk_bytes, MAX_LINE_BYTES):
                    # Skipped over-long lines come before this chunk's lines: number them first.
                    too_long = [
                        (self.label, f"line {line_no + i}", "line longer than 256 MiB", escape_sample(head))
                        for i, (_, head) in enumerate(long)
                    ]
                    line_no += len(long)
                    lines = split_lines(buf, base).with_row_index("_line", offset=line_no)
                    line_no += lines.height
                    raw, rejects = self._parse(lines)
                    rejects.extend(too_long)
                    batch = journal_records(raw, selection, source=self.label, fallback_key=key)
                    batch.rejects = pl.concat([rejects_frame(rejects), batch.rejects])
                    yield from split_batch(batch, batch_size)
                    if stopped():
                        return
                if problem := stream_problem(stream, self.label):
                    yield problem

        return in_background(produce)

    def _parse(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, list[tuple[str, str, str, str]]]:
        c = pl.col
        lines = lines.filter(c("line").is_not_null()).with_columns(c("_line").cast(pl.Int64))
        # Cheap literal tests pick the lines json_decode can take; an array value (`":[`, as
        # journalctl writes it) or anything but a bare object goes the exact way. A form these
        # tests miss makes json_decode raise, and the chunk then goes the exact way: still correct.
        line = c("line")
        simple = (
            line.str.starts_with("{")
            & line.str.ends_with("}")
            & ~line.str.contains('":[', literal=True)
            & ~line.str.contains('": [', literal=True)
        )
        fast, slow = lines.filter(simple), lines.filter(~simple)
        frames: list[pl.DataFrame] = []
        if fast.height:
            try:
                decoded = fast.select(
                    "off",
                    "_line",
                    _msg_null=c("line").str.contains(_NULL_MESSAGE),
                    v=c("line").str.json_decode(_STRUCT),
                ).unnest("v")
                frames.append(ensure_raw(decoded.rename({"off": "_off"})))
            except pl.exceptions.PolarsError:
                slow = pl.concat([fast, slow])  # a malformed line among them: find it exactly
        rejects: list[tuple[str, str, str, str]] = []
        if slow.height:
            rows = []
            for off, line_no, text in slow.select("off", "_line", "line").iter_rows():
                if not text.strip():
                    continue
                row = _decode_line(text)
                if isinstance(row, str):
                    rejects.append((self.label, f"line {line_no}", row, escape_sample(text)))
                else:
                    row["_off"], row["_line"] = off, line_no
                    rows.append(row)
            if rows:
                frames.append(pl.from_dicts(rows, schema=RAW_SCHEMA))
        raw = pl.concat(frames).sort("_off") if frames else pl.DataFrame(schema=RAW_SCHEMA)
        return raw, rejects


def _decode_line(text: str) -> dict[str, Any] | str:
    """Wanted fields of one JSON line as text, or the reason it is not a journal entry."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        return f"malformed JSON: {e}"
    except RecursionError:
        return "JSON nested too deeply"
    if not isinstance(obj, dict):
        return "JSON line is not an object"
    row: dict[str, Any] = {}
    try:
        for name in FIELDS:
            if name in obj:
                row[name] = _field_text(obj[name], join=name == "MESSAGE")
    except RecursionError:  # a field nested almost as deep as json.loads allows
        return "JSON nested too deeply"
    row["_msg_null"] = "MESSAGE" in obj and obj["MESSAGE"] is None
    return row


def _field_text(value: Any, join: bool) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value):
            return bytes(value).decode("utf-8", "replace")
        # A repeated field: each element is itself a value.
        parts = [t for t in (_field_text(v, join) for v in value) if t is not None]
        if not parts:
            return None
        return "\n".join(parts) if join else parts[-1]
    return json.dumps(value)  # numbers, booleans, objects: their JSON text, as json_decode gives
