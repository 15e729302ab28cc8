"""--since / --until: text -> UTC microseconds, with integer arithmetic throughout.

Accepted forms (case-insensitive):
* a duration before now: `6min`, `2h`, `90s`, `1d`, `1h30min`, `1.5h`, `6 min ago`, `-6min`,
  `2 hours ago` (`+6min` is after now);
* `now`, `today`, `yesterday`, `tomorrow` (midnight in the zone);
* `YYYY-MM-DD`, `YYYY-MM-DD HH:MM`, `YYYY-MM-DD HH:MM:SS[.ffffff]` in `tz` (an IANA zone name or
  "UTC"; default the local zone);
* ISO 8601 with a zone: `2026-11-29T10:00:00Z`, `…+02:00`, `…+0200`, fractional seconds;
* `@EPOCH` seconds, integer or fractional (`@1764410000.123457`).

Fractions beyond the microsecond are truncated toward the past (floor).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pdforensics.errors import UsageError
from pdforensics.sources import Window

US_PER_S = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)

FORMS = (
    "a duration before now (6min, 2h, 90s, 1d, '2 hours ago', -6min), now, today, yesterday, "
    "'YYYY-MM-DD[ HH:MM[:SS]]' (local time, or --tz), ISO 8601 with a zone "
    "(2026-11-29T10:00:00Z, 2026-11-29T10:00:00+02:00), or @EPOCH seconds (@1764410000.5)"
)

_UNITS: dict[str, int] = {}
for _names, _us in (
    (("us", "usec", "µs", "microsecond", "microseconds"), 1),
    (("ms", "msec", "millisecond", "milliseconds"), 1_000),
    (("s", "sec", "secs", "second", "seconds"), US_PER_S),
    (("m", "min", "mins", "minute", "minutes"), 60 * US_PER_S),
    (("h", "hr", "hrs", "hour", "hours"), 3_600 * US_PER_S),
    (("d", "day", "days"), 86_400 * US_PER_S),
    (("w", "week", "weeks"), 7 * 86_400 * US_PER_S),
):
    for _n in _names:
        _UNITS[_n] = _us

_NUMBER = r"(\d+)(?:\.(\d+))?"
_SPAN_PART = re.compile(rf"\s*{_NUMBER}\s*([a-zµ]+)")
_SPAN = re.compile(r"^([+-])?\s*((?:\d+(?:\.\d+)?\s*[a-zµ]+\s*)+?)\s*(ago)?$")
_EPOCH_RX = re.compile(rf"^@([+-])?{_NUMBER}$")
_ABSOLUTE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[t ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?)?"
    r"\s*(z|utc|[+-]\d{2}(?::?\d{2})?)?$"
)


# How far before a window its context reaches, as the views read it (queries/views/01_context.sql,
# `ctx_us`: 3 x (timeout + grace), at least 15 min; the timeout the operator states, else the
# patch's default 300 s). An ingest of a window reads as far back, so the verdict finds there what
# it looks for (tests/test_ingest_context.py checks the two agree).
CONTEXT_MIN_S = 900.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_GRACE_S = 10.0


def context_before_window_us(timeout_s: float | None, grace_s: float | None) -> int:
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    grace = DEFAULT_GRACE_S if grace_s is None else grace_s
    return int(max(CONTEXT_MIN_S, 3 * (timeout + grace)) * US_PER_S)


def parse_instant(text: str, now_us: int, tz: str | None = None) -> int:
    """One instant as UTC µs. Raises UsageError naming the accepted forms."""
    zone = _zone(tz)  # a bad --tz is an error whatever the form
    s = " ".join(text.strip().lower().split())
    if not s:
        raise _bad(text)
    if s == "now":
        return now_us
    if s in ("today", "yesterday", "tomorrow"):
        today = _from_us(now_us).astimezone(zone).date() if zone else _from_us(now_us).astimezone().date()
        day = today + timedelta(days={"today": 0, "yesterday": -1, "tomorrow": 1}[s])
        return _local_us(day.year, day.month, day.day, 0, 0, 0, 0, zone)
    if m := _EPOCH_RX.match(s):
        sign, whole, frac = m.groups()
        us = _scaled(whole, frac, US_PER_S)
        return -us if sign == "-" else us
    if m := _ABSOLUTE.match(s):
        return _absolute(m, text, zone)
    if m := _SPAN.match(s):
        sign, body, ago = m.groups()
        if sign == "+" and ago:
            raise _bad(text)
        span = 0
        for part in _SPAN_PART.finditer(body):
            whole, frac, unit = part.groups()
            if unit not in _UNITS:
                raise _bad(text)
            span += _scaled(whole, frac, _UNITS[unit])
        return now_us + span if sign == "+" else now_us - span
    raise _bad(text)


def parse_window(since: str | None, until: str | None, now_us: int, tz: str | None = None) -> Window:
    """The half-open window [since, until); either bound may be None (unbounded)."""
    since_us = parse_instant(since, now_us, tz) if since is not None else None
    until_us = parse_instant(until, now_us, tz) if until is not None else None
    if since_us is not None and until_us is not None and since_us > until_us:
        raise UsageError(f"--since ({since}) is after --until ({until})")
    return Window(since_us, until_us)


def _bad(text: str) -> UsageError:
    return UsageError(f"cannot read time {text!r}: use {FORMS}")


def _scaled(whole: str, frac: str | None, unit_us: int) -> int:
    """whole.frac × unit_us exactly, floored to the µs."""
    if not frac:
        return int(whole) * unit_us
    scale = 10 ** len(frac)
    return (int(whole) * scale + int(frac)) * unit_us // scale


def _zone(tz: str | None) -> tzinfo | None:
    """The named zone; None means the machine's local zone (resolved per instant, DST included)."""
    if tz is None or tz.lower() == "local":
        return None
    if tz.upper() in ("UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise UsageError(f"unknown time zone {tz!r}: use an IANA name such as Europe/Berlin, or UTC") from e


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _local_us(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int, zone: tzinfo | None) -> int:
    naive = datetime(y, mo, d, h, mi, s, us)
    # A naive datetime's astimezone() interprets it in the local zone (what journalctl does too).
    aware = naive.replace(tzinfo=zone) if zone else naive.astimezone()
    return (aware - _EPOCH) // _ONE_US


def _absolute(m: re.Match[str], text: str, zone: tzinfo | None) -> int:
    y, mo, d, h, mi, s, frac, zone_text = m.groups()
    frac_us = 0
    if frac:
        frac_us = _scaled("0", frac, US_PER_S)
    try:
        date(int(y), int(mo), int(d))
        parts = (int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), frac_us)
        if not zone_text:
            return _local_us(*parts, zone)
        if zone_text in ("z", "utc"):
            offset = timedelta(0)
        else:
            sign = -1 if zone_text[0] == "-" else 1
            digits = zone_text[1:].replace(":", "")
            offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        return (datetime(*parts, tzinfo=UTC) - offset - _EPOCH) // _ONE_US
    except (ValueError, OverflowError) as e:  # month 13, hour 25, day 31 of a 30-day month
        raise UsageError(f"cannot read time {text!r}: {e}") from e
