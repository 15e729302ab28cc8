"""``python -m pdforensics.simulate``: write scenario fixtures.

python -m pdforensics.simulate --all --out fixtures --now 2026-11-29T12:10:00Z
python -m pdforensics.simulate decode_restart_old_build --out /tmp/incident --scale 1000
python -m pdforensics.simulate fleet_16_hosts --out /tmp/fleet --journal-remote /tmp/fleet/remote
python -m pdforensics.simulate healthy --out /tmp/healthy --openmetrics /tmp/healthy/metrics.om
python -m pdforensics.simulate --list
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from pdforensics.errors import PdfError, UsageError
from pdforensics.simulate import SCENARIOS, simulate, simulate_plain
from pdforensics.simulate.openmetrics import write_openmetrics
from pdforensics.simulate.remote import write_journal_remote


def parse_now(text: str | None) -> int | None:
    """ISO-8601 (``2026-11-29T12:10:00Z``; no zone = UTC) or integer µs since the epoch."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now: not an ISO-8601 time or epoch µs: {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp()) * 1_000_000 + dt.microsecond


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pdforensics.simulate", description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="*", help="scenario names (see --list)")
    ap.add_argument("--all", action="store_true", help="every scenario, each into OUT/<scenario>/")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--out", type=Path, help="output folder")
    ap.add_argument("--now", help="window end (default: now), e.g. 2026-11-29T12:10:00Z")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the background request rate")
    ap.add_argument("--no-plain", action="store_true", help="skip OUT/plain/*.log")
    ap.add_argument(
        "--journal-remote",
        type=Path,
        metavar="DIR",
        help="also write DIR/remote-<host>.journal per host with systemd-journal-remote "
        "(DIR/<scenario>/ for several scenarios)",
    )
    ap.add_argument(
        "--openmetrics",
        type=Path,
        metavar="FILE",
        help="also write the scenario's SGLang gauges as scraped every 10 s (OpenMetrics; "
        "FILE/<scenario>.om for several scenarios)",
    )
    args = ap.parse_args(argv)
    if args.list:
        for name, sc in SCENARIOS.items():
            print(f"{name:32s} {sc.verdict:16s} {sc.description}")
        return 0
    try:
        names = list(SCENARIOS) if args.all else args.scenario
        if not names or args.out is None:
            raise UsageError("give scenario names (or --all) and --out")
        now = parse_now(args.now)
        for name in names:
            out = args.out / name if args.all or len(names) > 1 else args.out
            t = time.perf_counter()
            simulate(name, out, now_us=now, seed=args.seed, scale=args.scale)
            if not args.no_plain:
                simulate_plain(name, out, now_us=now, seed=args.seed, scale=args.scale)
            if args.journal_remote is not None:
                remote = args.journal_remote / name if args.all or len(names) > 1 else args.journal_remote
                write_journal_remote(out / "journal.export", remote)
            if args.openmetrics is not None:
                several = args.all or len(names) > 1
                write_openmetrics(name, args.openmetrics / f"{name}.om" if several else args.openmetrics,
                                  now_us=now, seed=args.seed, scale=args.scale)  # fmt: skip
            print(f"{name}: {out} ({time.perf_counter() - t:.1f}s)")
    except PdfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
