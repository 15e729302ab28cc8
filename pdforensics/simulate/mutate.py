"""Metamorphic mutations of a scenario's evidence (issue 26).

Each mutation is a pure function: it takes a scenario's journal entries (the dicts of
`journalctl -o json --all`, as `fixtures/<scenario>/journal.json` holds them: `MESSAGE`,
`_HOSTNAME`, `_SYSTEMD_UNIT`, `__REALTIME_TIMESTAMP`, `_PID`, `_SYSTEMD_INVOCATION_ID`, …) and a
position, and returns new entries; the input is never changed. None of them may make a verdict
greener or a request `completed` (tests/test_metamorphic.py holds the tool to that):

* `delete_stretch` — a contiguous stretch of one engine's lines is gone, untold or told by
  journald's `Suppressed N messages from UNIT` line;
* `drop_host`, `drop_unit` — one host, or one unit (a source: its lines and systemd's about it),
  left out entirely;
* `drop_prefill_end` — the prefill's end of one request (its `Finish:`, failure, watchdog and
  time-stats lines) is gone while its decode completes;
* `strip_queue_field` — prefill `Prefill batch` lines of one host lose `#inflight-req` from a
  time on; `restart_onto_build_without_field` — that host's prefill is restarted at a time onto a
  build whose batch lines lack the field (the old process's open requests end with it);
* `concatenate` — a second deployment (a copy of a scenario under other host names, rids and
  ids, time-shifted) whose rooms and addresses collide with the first's;
* `shift_clock` — one host's clock (journal time and the lines' own prefixes) moved;
* `cri_records` — plain SGLang lines as a Kubernetes CRI log, lines cut into `P` partial
  records at given byte positions (`walk_cuts`, `edge_cuts` choose them); `cri_lines` reads a
  CRI log back into whole lines.

`read_entries` / `write_entries` read and write the JSON-lines form; `write_entries` gives each
host's stream consecutive cursors in time order, so inserted and copied entries never collide
with another entry's `(seqnum id, seqnum)`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

Entry = dict[str, Any]

# A request's room as SGLang's lines name it: the request log and failure lines
# (`bootstrap_room=N`), slime's (`room=N`), the bootstrap timeout (`Request N timed out`).
ROOM = re.compile(r"(?:bootstrap_room=|\broom=|\bRequest )(\d+)")
ADDRESS = re.compile(r"bootstrap_host='([^']+)'")
APP_TIME = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")  # SGLang's local-time prefix
UCX_TIME = re.compile(r"^\[(\d{9,11})\.(\d{6})\]")  # UCX's `[epoch.usec]`
PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")  # SGLang's `[time ranks] ` groups
QUEUE_FIELD = re.compile(r"#(?:inflight|transferring)-req: \d+(?:, )?")  # 0.4.x: #transferring-req
HEX_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")  # rids, health-check ids
IPV4 = re.compile(r"(?<![\d.])\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\d.])")
JOURNALD = "systemd-journald.service"
SUPPRESSED_ID = "a596d6fe7bfa4994828e72309e95d61e"  # journald's MESSAGE_ID for a rate-limit drop
HEALTH_ADDRESS = "2.2.2.2"


# ------------------------------------------------------------------ entries


def read_entries(path: Path) -> list[Entry]:
    """The entries of a `journalctl -o json` file, in file order."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def write_entries(entries: Iterable[Entry], path: Path) -> None:
    """Write entries as `journalctl -o json` lines in time order (stable), each seqnum id's
    entries numbered 1, 2, … in that order (cursor `s=` kept, `i=`/`t=` rewritten)."""
    ordered = sorted(entries, key=ts)
    counters: Counter[str] = Counter()
    with open(path, "w") as f:
        for e in ordered:
            out = {k: v for k, v in e.items() if k not in ("__SEQNUM", "__SEQNUM_ID")}
            sid = seqnum_id(e)
            counters[sid] += 1
            boot = e.get("_BOOT_ID", "0" * 32)
            out["__CURSOR"] = f"s={sid};i={counters[sid]:x};b={boot};m=0;t={ts(e):x};x=0"
            f.write(json.dumps(out, separators=(",", ":")) + "\n")


def ts(e: Entry) -> int:
    return int(e["__REALTIME_TIMESTAMP"])


def seqnum_id(e: Entry) -> str:
    cursor = e.get("__CURSOR") or ""
    for part in cursor.split(";"):
        if part.startswith("s="):
            return part[2:]
    return e.get("__SEQNUM_ID") or _digest("seqnum", e.get("_HOSTNAME", ""))


def text(e: Entry) -> str:
    """The message as text; a byte-array MESSAGE is read as Latin-1, so editing its ASCII parts
    and writing it back (`edit_message`) keeps every other byte."""
    m = e.get("MESSAGE")
    if isinstance(m, list):
        return bytes(m).decode("latin-1")
    return m or ""


def edit_message(e: Entry, fn: Callable[[str], str]) -> Entry:
    """A copy of `e` with `fn` applied to its message (a byte array stays one)."""
    out = dict(e)
    m = e.get("MESSAGE")
    if isinstance(m, list):
        out["MESSAGE"] = list(fn(bytes(m).decode("latin-1")).encode("latin-1"))
    elif isinstance(m, str):
        out["MESSAGE"] = fn(m)
    return out


def body(e: Entry) -> str:
    """The message without SGLang's `[time ranks]` prefix groups."""
    return PREFIX.sub("", text(e), count=1)


def unit_of(e: Entry) -> str | None:
    """The unit a line is about: systemd's lines name it in UNIT=."""
    if e.get("_SYSTEMD_UNIT") == "init.scope" and e.get("UNIT"):
        return e["UNIT"]
    return e.get("_SYSTEMD_UNIT")


def engine_of(e: Entry) -> str | None:
    """prefill | decode for an SGLang unit's own lines (by unit name, as the fixtures name them)."""
    unit = e.get("_SYSTEMD_UNIT") or ""
    if "prefill" in unit:
        return "prefill"
    if "decode" in unit:
        return "decode"
    return None


def rooms_in(message: str) -> set[int]:
    return {int(r) for r in ROOM.findall(message) if int(r) != 0}


def hosts(entries: list[Entry]) -> list[str]:
    return sorted({e["_HOSTNAME"] for e in entries if e.get("_HOSTNAME")})


def engine_units(entries: list[Entry], engine: str | None = None) -> list[tuple[str, str]]:
    """(host, unit) of every SGLang engine unit (of one engine), sorted."""
    return sorted(
        {
            (e["_HOSTNAME"], e["_SYSTEMD_UNIT"])
            for e in entries
            if engine_of(e) and (engine is None or engine_of(e) == engine)
        }
    )


def prefill_addresses(entries: list[Entry]) -> dict[str, str]:
    """Each prefill host's address: the `bootstrap_host` its own request lines name."""
    seen: dict[str, Counter[str]] = {}
    for e in entries:
        if engine_of(e) == "prefill":
            for addr in ADDRESS.findall(text(e)):
                if addr not in (HEALTH_ADDRESS, "None"):
                    seen.setdefault(e["_HOSTNAME"], Counter())[addr] += 1
    return {host: c.most_common(1)[0][0] for host, c in seen.items()}


def rooms_by_appearance(entries: list[Entry]) -> list[int]:
    """Every room the entries name, in order of first appearance."""
    out: dict[int, None] = {}
    for e in sorted(entries, key=ts):
        for room in sorted(rooms_in(text(e))):
            out.setdefault(room, None)
    return list(out)


def is_request_line(e: Entry, kind: str) -> bool:
    """A request-log line of that kind (`Receive`, `Finish`)."""
    return body(e).startswith(f"{kind}: ")


def completes(e: Entry) -> bool:
    """A decode line that ends its request normally: a `Finish:` that is not an abort, or the
    decode's time-stats line."""
    b = body(e)
    if b.startswith("Finish: "):
        return "'finish_reason': {'type': 'abort'" not in b and "'finish_reason': None" not in b
    return b.startswith("ReqTimeStats(") and "type=decode" in b


def decode_completed_rooms(entries: list[Entry]) -> dict[int, int]:
    """Rooms whose decode completes, with the time of the first such line."""
    out: dict[int, int] = {}
    for e in entries:
        if engine_of(e) == "decode" and completes(e):
            for room in rooms_in(text(e)):
                out[room] = min(out.get(room, ts(e)), ts(e))
    return out


def prefill_end_lines(entries: list[Entry], room: int) -> list[Entry]:
    """The prefill's lines about `room` other than its `Receive:`: its `Finish:`, failure,
    watchdog, timeout and time-stats lines — everything that can end the prefill's hold."""
    return [
        e
        for e in entries
        if engine_of(e) == "prefill" and room in rooms_in(text(e)) and not is_request_line(e, "Receive")
    ]


def prefill_ended_rooms(entries: list[Entry]) -> set[int]:
    """Rooms that have a `prefill_end_lines` line."""
    return {
        room
        for e in entries
        if engine_of(e) == "prefill" and not is_request_line(e, "Receive")
        for room in rooms_in(text(e))
    }


def host_offset_us(entries: list[Entry], host: str) -> int:
    """The host's zone offset (local prefix - journal time, to 15 minutes) from its SGLang lines."""
    diffs = []
    for e in entries:
        if e.get("_HOSTNAME") == host and (m := APP_TIME.match(text(e))):
            local = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC)
            diffs.append(int(local.timestamp() * 1_000_000) - ts(e))
    if not diffs:
        return 0
    quarter = 900_000_000
    return Counter(round(d / quarter) * quarter for d in diffs).most_common(1)[0][0]


def app_prefix(t_us: int, offset_us: int, ranks: str = "") -> str:
    local = datetime.fromtimestamp((t_us + offset_us) // 1_000_000, UTC)
    return f"[{local:%Y-%m-%d %H:%M:%S}{ranks}] "


def _digest(*parts: object) -> str:
    return hashlib.md5("|".join(map(str, parts)).encode()).hexdigest()


def _at(e: Entry, t_us: int) -> Entry:
    out = dict(e)
    out["__REALTIME_TIMESTAMP"] = str(t_us)
    return out


# ------------------------------------------------------------------ deletions


def delete_stretch(
    entries: list[Entry], host: str, unit: str, start: int, count: int, told: bool = False
) -> list[Entry]:
    """Delete `count` consecutive lines of one unit on one host, from its `start`-th line on.

    Told: journald's `Suppressed N messages from UNIT` line (from systemd-journald.service on that
    host, N = count) comes where journald writes it: just before the unit's next kept line (at
    the end of the stretch when none follows)."""
    own = [i for i, e in enumerate(entries) if e.get("_HOSTNAME") == host and e.get("_SYSTEMD_UNIT") == unit]
    gone = set(own[start : start + count])
    out = [e for i, e in enumerate(entries) if i not in gone]
    if told and gone:
        later = [ts(entries[i]) for i in own[start + count :]]
        when = later[0] - 1 if later else max(ts(entries[i]) for i in gone) + 1
        out.append(suppressed_line(entries, host, unit, len(gone), when))
    return out


def suppressed_line(entries: list[Entry], host: str, unit: str, n: int, t_us: int) -> Entry:
    """journald's rate-limit line, modelled on a journald entry of that host when there is one."""
    base = next(
        (e for e in entries if e.get("_HOSTNAME") == host and e.get("_SYSTEMD_UNIT") == JOURNALD), None
    )
    if base is None:
        any_line = next(e for e in entries if e.get("_HOSTNAME") == host)
        base = {
            "__CURSOR": any_line.get("__CURSOR", ""),
            "_BOOT_ID": any_line.get("_BOOT_ID"),
            "_MACHINE_ID": any_line.get("_MACHINE_ID"),
            "_HOSTNAME": host,
            "_SYSTEMD_UNIT": JOURNALD,
            "_SYSTEMD_INVOCATION_ID": _digest("journald", host),
            "_PID": "339",
            "_COMM": "systemd-journal",
            "SYSLOG_IDENTIFIER": "systemd-journald",
            "PRIORITY": "5",
            "_TRANSPORT": "driver",
        }
    line = {k: v for k, v in base.items() if v is not None}
    line.update(MESSAGE_ID=SUPPRESSED_ID, N_DROPPED=str(n), MESSAGE=f"Suppressed {n} messages from {unit}")
    return _at(line, t_us)


def drop_host(entries: list[Entry], host: str) -> list[Entry]:
    """Every entry of one host left out (a journal-remote file not collected)."""
    return [e for e in entries if e.get("_HOSTNAME") != host]


def drop_unit(entries: list[Entry], host: str, unit: str) -> list[Entry]:
    """One unit of one host left out, systemd's lines about it too (an export without it)."""
    return [e for e in entries if not (e.get("_HOSTNAME") == host and unit_of(e) == unit)]


def drop_prefill_end(entries: list[Entry], room: int) -> list[Entry]:
    """The prefill's end of one request gone (`prefill_end_lines`), its decode's lines kept."""
    gone = {id(e) for e in prefill_end_lines(entries, room)}
    return [e for e in entries if id(e) not in gone]


# ------------------------------------------------------------------ builds and restarts


def strip_queue_field(entries: list[Entry], host: str, since_us: int) -> list[Entry]:
    """From `since_us` on, that host's `Prefill batch` lines lack `#inflight-req` (0.4.x:
    `#transferring-req`); the catalog still reads them (its catch-all `Prefill batch` entry)."""
    return [
        _without_field(e)
        if e.get("_HOSTNAME") == host and engine_of(e) == "prefill" and ts(e) >= since_us
        else e
        for e in entries
    ]


def _without_field(e: Entry) -> Entry:
    if not body(e).startswith("Prefill batch"):
        return e
    return edit_message(e, lambda m: QUEUE_FIELD.sub("", m, count=1))


def restart_onto_build_without_field(entries: list[Entry], host: str, at_us: int) -> list[Entry]:
    """`systemctl restart` of that host's prefill at `at_us` onto a build whose batch lines lack
    `#inflight-req`: the old process's `SIGTERM received…`, systemd's `Stopped`/`Started`, the new
    process (new _PID and invocation id) printing `server_args=` and `fired up and ready to roll`;
    from then on its lines are the new process's, its batch lines without the field. The requests
    the old process held end with it: no line about them follows on that prefill (their decode
    lines stay)."""
    mine = [e for e in entries if e.get("_HOSTNAME") == host and engine_of(e) == "prefill"]
    before = [e for e in mine if ts(e) < at_us]
    if not before:
        raise ValueError(f"{host}: no prefill line before {at_us}")
    old = max(before, key=ts)
    unit = old["_SYSTEMD_UNIT"]
    held = set().union(*(rooms_in(text(e)) for e in before))
    new_pid = str(int(old.get("_PID") or 0) + 7919)
    new_inv = _digest("restart", host, at_us)
    offset = host_offset_us(entries, host)
    out: list[Entry] = []
    for e in entries:
        if e.get("_HOSTNAME") == host and engine_of(e) == "prefill" and ts(e) >= at_us:
            if rooms_in(text(e)) & held:
                continue  # the old process's request: gone with it
            e = _without_field(dict(e, _PID=new_pid, _SYSTEMD_INVOCATION_ID=new_inv))
        out.append(e)
    template = {k: v for k, v in old.items() if k not in ("MESSAGE", "MESSAGE_ID")}
    args = next(
        (body(e) for e in mine if body(e).startswith("server_args=")),
        "server_args=ServerArgs(disaggregation_mode='prefill')",
    )

    def line(t: int, message: str, **fields: str) -> Entry:
        return _at(template | fields | {"MESSAGE": app_prefix(t, offset) + message}, t)

    new = {"_PID": new_pid, "_SYSTEMD_INVOCATION_ID": new_inv}
    out += [
        line(at_us - 500, "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."),
        systemd_line(template, at_us - 400, unit, old.get("_SYSTEMD_INVOCATION_ID"), f"Stopped {unit}."),
        systemd_line(template, at_us - 300, unit, new_inv, f"Started {unit}."),
        line(at_us - 200, args, **new),
        line(at_us - 100, "The server is fired up and ready to roll!", **new),
    ]
    return out


def systemd_line(template: Entry, t_us: int, unit: str, invocation: str | None, message: str) -> Entry:
    """pid 1's line about a unit, on the template's host."""
    e = {
        "__CURSOR": template.get("__CURSOR", ""),
        "_BOOT_ID": template.get("_BOOT_ID"),
        "_MACHINE_ID": template.get("_MACHINE_ID"),
        "_HOSTNAME": template.get("_HOSTNAME"),
        "_SYSTEMD_UNIT": "init.scope",
        "_PID": "1",
        "_COMM": "systemd",
        "SYSLOG_IDENTIFIER": "systemd",
        "PRIORITY": "6",
        "_TRANSPORT": "journal",
        "UNIT": unit,
        "INVOCATION_ID": invocation,
        "MESSAGE": message,
    }
    return _at({k: v for k, v in e.items() if v is not None}, t_us)


# ------------------------------------------------------------------ clocks and deployments


def shift_clock(entries: list[Entry], host: str, delta_s: int) -> list[Entry]:
    """One host's clock `delta_s` whole seconds off: its journal times and its lines' own time
    prefixes (SGLang's local `[YYYY-MM-DD HH:MM:SS`, UCX's `[epoch.usec]`) move together."""
    return [_shifted(e, delta_s) if e.get("_HOSTNAME") == host else e for e in entries]


def _shifted(e: Entry, delta_s: int) -> Entry:
    def move(m: str) -> str:
        if app := APP_TIME.match(m):
            moved = datetime.fromisoformat(app.group(1)) + timedelta(seconds=delta_s)
            return f"[{moved:%Y-%m-%d %H:%M:%S}" + m[app.end() :]
        if ucx := UCX_TIME.match(m):
            return f"[{int(ucx.group(1)) + delta_s}.{ucx.group(2)}]" + m[ucx.end() :]
        return m

    return _at(edit_message(e, move), ts(e) + delta_s * 1_000_000)


def renamed_host(host: str, tag: str) -> str:
    return f"{tag}-{host}"


def renamed_id(hex_id: str, tag: str) -> str:
    """A rid / health-check id / journal id of the copy (32 hex digits, deterministic)."""
    return _digest(tag, hex_id)


@dataclass
class Concatenation:
    """Two deployments' entries in one input, and how the second's names map to the first's."""

    entries: list[Entry]
    tag: str
    offset_s: int
    hosts: dict[str, str] = field(default_factory=dict)  # second's original host -> its name here
    rooms: dict[int, int] = field(default_factory=dict)  # second's original room -> its room here
    addresses: dict[str, str] = field(default_factory=dict)

    def rid(self, rid: str | None) -> str | None:
        """The second deployment's rid as it reads here."""
        return None if rid is None else HEX_ID.sub(lambda m: renamed_id(m.group(0), self.tag), rid)


def concatenate(
    first: list[Entry],
    second: list[Entry],
    offset_s: int,
    tag: str = "b",
    rooms: dict[int, int] | None = None,
    addresses: dict[str, str] | None = None,
) -> Concatenation:
    """The first deployment's entries and a copy of the second's, `offset_s` later, on other
    hosts (`tag-<host>`, new boot, machine, invocation and seqnum ids, new rids) whose rooms and
    addresses are the same numbers (a copy of the same scenario), or are mapped onto the first's
    (`rooms`, `addresses`) so that they collide."""
    rooms = dict(rooms or {})
    addresses = dict(addresses or {})
    names = {h: renamed_host(h, tag) for h in hosts(second)}
    host_re = re.compile(
        r"(?<![\w.-])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w-])"
    )
    room_re = (
        re.compile(r"(?<!\d)(" + "|".join(str(r) for r in sorted(rooms, reverse=True)) + r")(?!\d)")
        if rooms
        else None
    )
    addr_re = IPV4 if addresses else None

    def rewrite(m: str) -> str:
        m = host_re.sub(lambda x: names[x.group(1)], m)
        m = HEX_ID.sub(lambda x: renamed_id(x.group(0), tag), m)
        if room_re is not None:
            m = room_re.sub(lambda x: str(rooms[int(x.group(1))]), m)
        if addr_re is not None:
            m = addr_re.sub(lambda x: addresses.get(x.group(0), x.group(0)), m)
        return m

    copied = []
    for e in second:
        c = _shifted(edit_message(e, rewrite), offset_s)
        c["_HOSTNAME"] = names.get(e.get("_HOSTNAME"), e.get("_HOSTNAME"))
        for key in ("_BOOT_ID", "_MACHINE_ID", "_SYSTEMD_INVOCATION_ID", "INVOCATION_ID"):
            if c.get(key):
                c[key] = renamed_id(c[key], tag)
        c["__CURSOR"] = f"s={renamed_id(seqnum_id(e), tag)};i=0"
        copied.append(c)
    return Concatenation(copy.copy(first) + copied, tag, offset_s, names, rooms, addresses)


# ------------------------------------------------------------------ CRI container logs


def cri_stamps(lines: list[bytes], utc_offset_s: float) -> list[str]:
    """RFC 3339 UTC times for plain SGLang lines of a host `utc_offset_s` east of UTC: each line's
    own prefix (else the previous line's), made unique within the second."""
    out: list[str] = []
    last: datetime | None = None
    firsts = (re.match(rb"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", ln) for ln in lines)
    first = next((m for m in firsts if m), None)
    if first is not None:
        last = datetime.fromisoformat(first.group(1).decode())
    seen: Counter[datetime] = Counter()
    for ln in lines:
        if m := re.match(rb"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", ln):
            last = datetime.fromisoformat(m.group(1).decode())
        when = (last or datetime(2026, 11, 29)) - timedelta(seconds=utc_offset_s)
        seen[when] += 1
        out.append(f"{when:%Y-%m-%dT%H:%M:%S}.{seen[when] * 1000:09d}Z")
    return out


CRI_RECORD = re.compile(rb"^(\d{4}-\d{2}-\d{2}T\S+) (?:stdout|stderr) ([PF]) ?(.*)$", re.S)


def cri_lines(records: list[bytes]) -> tuple[list[bytes], list[str]] | None:
    """The whole lines of a CRI container log and each one's time (its first record's), its
    `P` partial records joined; None when `records` is not a CRI log."""
    if not records or not CRI_RECORD.match(records[0]):
        return None
    lines: list[bytes] = []
    stamps: list[str] = []
    pending: bytes | None = None
    for rec in records:
        m = CRI_RECORD.match(rec)
        if m is None:
            return None
        if pending is None:
            pending = b""
            stamps.append(m.group(1).decode())
        pending += m.group(3)
        if m.group(2) == b"F":
            lines.append(pending)
            pending = None
    if pending is not None:
        lines.append(pending)
    return lines, stamps


def cri_records(
    lines: list[bytes], stamps: list[str], cuts: list[list[int]] | None = None, stream: bytes = b"stderr"
) -> bytes:
    """Lines as a CRI container log (`TIME STREAM F line`); a line with cut positions (byte
    offsets, 0 < k <= len) is written as partial `P` records up to each cut and an `F` record
    with the rest (empty when the last cut is its length), as the kubelet splits long lines."""
    out = bytearray()
    for i, (ln, stamp) in enumerate(zip(lines, stamps, strict=True)):
        at = [0, *(cuts[i] if cuts else []), len(ln)]
        for j in range(len(at) - 1):
            tag = b"F" if j == len(at) - 2 else b"P"
            out += stamp.encode() + b" " + stream + b" " + tag + b" " + ln[at[j] : at[j + 1]] + b"\n"
    return bytes(out)


def walk_cuts(lines: list[bytes], seed: int, pieces: int = 1) -> list[list[int]]:
    """`pieces` cut positions per line that walk through every byte position of the lines: line
    i's first cut is at 1 + (seed + 131 i) mod len (a cut at len leaves an empty `F` record)."""
    out = []
    for i, ln in enumerate(lines):
        if not ln:
            out.append([])
            continue
        first = 1 + (seed + 131 * i) % len(ln)
        out.append(sorted({1 + (first - 1 + p * (len(ln) // pieces + 1)) % len(ln) for p in range(pieces)}))
    return out


def edge_cuts(lines: list[bytes]) -> list[list[int]]:
    """Cuts at the edges: after a line's first byte, before its last, or at its end (an empty
    `F` record), in turn."""
    out = []
    for i, ln in enumerate(lines):
        if not ln:
            out.append([])
        else:
            out.append([(1, max(1, len(ln) - 1), len(ln))[i % 3]])
    return out
