"""--since / --until parsing: every accepted form, errors, and round trips (hypothesis)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdforensics.errors import UsageError
from pdforensics.sources import Window
from pdforensics.timewindow import parse_instant, parse_window

NOW = 1_764_410_000_123_457  # 2025-11-29T09:53:20.123457Z
MIN = 60_000_000
H = 60 * MIN


def at(text: str) -> int:
    """µs of a UTC ISO timestamp, computed independently of the parser."""
    dt = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6min", NOW - 6 * MIN),
        ("2h", NOW - 2 * H),
        ("90s", NOW - 90_000_000),
        ("1d", NOW - 24 * H),
        ("1w", NOW - 7 * 24 * H),
        ("250ms", NOW - 250_000),
        ("6 min ago", NOW - 6 * MIN),
        ("-6min", NOW - 6 * MIN),
        ("2 hours ago", NOW - 2 * H),
        ("  2   Hours  AGO ", NOW - 2 * H),
        ("1h30min", NOW - 90 * MIN),
        ("1h 30min", NOW - 90 * MIN),
        ("1.5h", NOW - 90 * MIN),
        ("+6min", NOW + 6 * MIN),
        ("now", NOW),
        ("today", at("2025-11-29T00:00:00")),
        ("yesterday", at("2025-11-28T00:00:00")),
        ("2026-11-29 10:00:00", at("2026-11-29T10:00:00")),
        ("2026-11-29 10:00", at("2026-11-29T10:00:00")),
        ("2026-11-29", at("2026-11-29T00:00:00")),
        ("2026-11-29 10:00:00.25", at("2026-11-29T10:00:00.250000")),
        ("2026-11-29T10:00:00Z", at("2026-11-29T10:00:00")),
        ("2026-11-29T10:00:00+02:00", at("2026-11-29T08:00:00")),
        ("2026-11-29T10:00:00-0530", at("2026-11-29T15:30:00")),
        ("2026-11-29T10:00:00.123456Z", at("2026-11-29T10:00:00.123456")),
        ("2026-11-29T10:00:00.1234569Z", at("2026-11-29T10:00:00.123456")),  # floor to the µs
        ("2026-11-29 10:00:00 UTC", at("2026-11-29T10:00:00")),
        ("@1764410000", 1_764_410_000_000_000),
        ("@1764410000.123457", 1_764_410_000_123_457),  # exact: no float on the way
        ("@1764410000.5", 1_764_410_000_500_000),
    ],
)
def test_accepted_forms_in_utc(text: str, expected: int) -> None:
    assert parse_instant(text, NOW, "UTC") == expected


def test_zone_option_applies_to_zone_less_forms_only() -> None:
    assert parse_instant("2026-11-29 10:00", NOW, "Europe/Berlin") == at("2026-11-29T09:00:00")  # CET
    assert parse_instant("2026-07-01 10:00", NOW, "Europe/Berlin") == at("2026-07-01T08:00:00")  # CEST
    assert parse_instant("today", NOW, "Asia/Tokyo") == at("2025-11-28T15:00:00")
    assert parse_instant("2026-11-29T10:00:00Z", NOW, "Europe/Berlin") == at("2026-11-29T10:00:00")
    assert parse_instant("@5", NOW, "Europe/Berlin") == 5_000_000
    assert parse_instant("6min", NOW, "Europe/Berlin") == NOW - 6 * MIN


def test_default_zone_is_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_instant("2026-11-29 10:00:00", NOW) == at("2026-11-29T15:00:00")  # EST
        assert parse_instant("2026-07-01 10:00:00", NOW) == at("2026-07-01T14:00:00")  # EDT
        assert parse_instant("today", NOW) == at("2025-11-29T05:00:00")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize(
    "text",
    [
        "garbage",
        "6",
        "six minutes",
        "6 parsecs",
        "",
        "   ",
        "@",
        "@abc",
        "+6min ago",
        "2026-11-29T10",
        "10:00",
        "--6min",
    ],
)
def test_garbage_names_the_accepted_forms(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_instant(text, NOW)
    msg = str(err.value)
    assert "\n" not in msg
    for form in ("6min", "2 hours ago", "now", "YYYY-MM-DD", "2026-11-29T10:00:00Z", "@EPOCH"):
        assert form in msg


@pytest.mark.parametrize(
    "text", ["2026-13-01", "2026-02-30 10:00", "2026-11-29 25:00", "2026-11-29T10:61:00Z"]
)
def test_impossible_dates(text: str) -> None:
    with pytest.raises(UsageError, match="cannot read time"):
        parse_instant(text, NOW, "UTC")


def test_unknown_zone() -> None:
    with pytest.raises(UsageError, match="unknown time zone"):
        parse_instant("@5", NOW, "Mars/Olympus_Mons")


def test_window() -> None:
    assert parse_window("2h", "1h", NOW) == Window(NOW - 2 * H, NOW - H)
    assert parse_window(None, None, NOW) == Window(None, None)
    assert parse_window("6min", None, NOW) == Window(NOW - 6 * MIN, None)
    assert parse_window(None, "@5", NOW) == Window(None, 5_000_000)
    assert parse_window("now", "now", NOW) == Window(NOW, NOW)
    with pytest.raises(UsageError, match="after --until"):
        parse_window("1h", "2h", NOW)
    with pytest.raises(UsageError, match="cannot read time"):
        parse_window("1h", "soon", NOW)


# -- round trips ---------------------------------------------------------------------------------


@settings(max_examples=300, database=None, derandomize=True)
@given(st.integers(min_value=-(10**17), max_value=10**17))
def test_epoch_round_trip(us: int) -> None:
    sign, mag = ("-", -us) if us < 0 else ("", us)
    assert parse_instant(f"@{sign}{mag // 1_000_000}.{mag % 1_000_000:06d}", NOW) == us
    if us % 1_000_000 == 0:
        assert parse_instant(f"@{us // 1_000_000}", NOW) == us


@settings(max_examples=300, database=None, derandomize=True)
@given(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)
def test_iso_round_trip(local: datetime, offset_min: int) -> None:
    aware = local.replace(tzinfo=timezone(timedelta(minutes=offset_min)))
    expected = (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert parse_instant(aware.isoformat(), NOW) == expected
    utc = aware.astimezone(UTC)
    assert parse_instant(utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), NOW) == expected
    assert parse_instant(utc.strftime("%Y-%m-%d %H:%M:%S.%f"), NOW, "UTC") == expected


@settings(max_examples=200, database=None, derandomize=True)
@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from([("us", 1), ("ms", 1_000), ("s", 10**6), ("min", 60 * 10**6), ("h", 3600 * 10**6)]),
    st.sampled_from(["{n}{u}", "{n} {u} ago", "-{n}{u}"]),
)
def test_duration_before_now(n: int, unit: tuple[str, int], form: str) -> None:
    name, us = unit
    assert parse_instant(form.format(n=n, u=name), NOW) == NOW - n * us
