"""How long does each command take, as a user runs it? (issue 27)

    python bench/latency.py [--runs 5] [--work /tmp/pdforensics-latency] [--keep] [--lines 100000]
                            [--pythonpath DIR] [--markdown]

Builds three databases the way a new user would (`pdforensics simulate`, then `pdforensics
ingest --file journal.export`): the `healthy` scenario (~300 lines), the same scenario scaled to
about `--lines` lines, and the 16-host fleet (`fleet_16_hosts`). Then times each command as a
whole process (`python -m pdforensics ...`: interpreter start, imports, database open, the
answer, printing), `--runs` times, beside `python -c pass` and DuckDB's own `select 1` (the
`duckdb` CLI when there is one, else `import duckdb` + a query) in the same run:

    verdict, sql stuck_requests, timeline <a rid>, export --format perfetto, report; the fleet's verdict.

Each line gives the first run after the ingest (`first`: what the first reader pays, e.g. the
`requests` rows the ingest's judgement does not keep) and the median of the later runs, wall time
and CPU time (user + system of the process and its children). On a shared machine the CPU time is
the steadier figure; the load average is printed before and after.

`--pythonpath DIR` runs another checkout's package (e.g. `git archive HEAD | tar -x -C DIR`), with
databases of its own (in `--work`/DIR's name), for a before/after in one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HEALTHY = "healthy"
FLEET = "fleet_16_hosts"
LINES_PER_SCALE = 122  # healthy --scale 800 writes ~98k journal entries


@dataclass
class Timing:
    label: str
    first_wall: float
    first_cpu: float
    walls: list[float]
    cpus: list[float]

    def row(self) -> str:
        wall = statistics.median(self.walls) if self.walls else float("nan")
        cpu = statistics.median(self.cpus) if self.cpus else float("nan")
        return (
            f"| {self.label} | {self.first_wall:.2f} | {wall:.2f} | {cpu:.2f} | "
            f"{min(self.walls, default=float('nan')):.2f} | {len(self.walls)} |"
        )


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one run; a failure stops the bench."""
    before = os.times()
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


def measure(label: str, cmd: list[str], runs: int, env: dict[str, str], cwd: Path) -> Timing:
    first_wall, first_cpu = timed(cmd, env, cwd)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = timed(cmd, env, cwd)
        walls.append(wall)
        cpus.append(cpu)
    t = Timing(label, first_wall, first_cpu, walls, cpus)
    print(t.row(), flush=True)
    return t


def pdf(*args: str) -> list[str]:
    return [sys.executable, "-m", "pdforensics", *args]


def output(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def build(work: Path, name: str, scenario: str, scale: float, env: dict[str, str], keep: bool) -> Path:
    """simulate + ingest, as the README's first steps; (the ingest's time is printed, not tabled)."""
    db = work / f"{name}.duckdb"
    if keep and db.exists():
        return db
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)
    shutil.rmtree(Path(f"{db}.judgements"), ignore_errors=True)
    incident = work / f"{name}-incident"
    shutil.rmtree(incident, ignore_errors=True)
    output(pdf("simulate", scenario, "--out", str(incident), "--scale", str(scale), "--now", "@1764410000"),
           env, work)  # fmt: skip
    wall, cpu = timed(
        pdf("ingest", "--db", str(db), "--file", str(incident / "journal.export"), "-q"), env, work
    )
    lines = output(pdf("sql", "--db", str(db), "--format", "csv", "SELECT count(*) FROM lines"), env, work)
    print(f"built {db.name}: {int(lines.split()[1]):,} lines, ingest {wall:.1f} s wall {cpu:.1f} s CPU")
    return db


def baselines(runs: int, env: dict[str, str], cwd: Path) -> list[Timing]:
    out = [measure("`python -c pass`", [sys.executable, "-c", "pass"], runs, env, cwd)]
    cli = shutil.which("duckdb")
    if cli:
        out.append(measure("`duckdb -c 'select 1'`", [cli, "-c", "select 1"], runs, env, cwd))
    else:
        query = "import duckdb; duckdb.connect().sql('select 1').fetchall()"
        out.append(
            measure("`python -c 'import duckdb; …select 1'`", [sys.executable, "-c", query], runs, env, cwd)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command after the first")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "pdforensics-latency")
    ap.add_argument("--keep", action="store_true", help="reuse the databases of an earlier run")
    ap.add_argument("--lines", type=int, default=100_000, help="size of the large database (about)")
    ap.add_argument("--pythonpath", type=Path, default=None, help="run another checkout's package")
    args = ap.parse_args(argv)
    env = dict(os.environ)
    work = args.work
    if args.pythonpath is not None:
        env["PYTHONPATH"] = str(args.pythonpath.resolve())
        work = work.with_name(f"{work.name}-{args.pythonpath.resolve().name}")
    else:  # this checkout's package, whatever the working directory
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; package from {env['PYTHONPATH']}")
    small = build(work, "healthy", HEALTHY, 1.0, env, args.keep)
    large = build(work, "large", HEALTHY, max(1.0, args.lines / LINES_PER_SCALE), env, args.keep)
    fleet = build(work, "fleet", FLEET, 1.0, env, args.keep)
    print()
    print("| command | first (s) | median wall (s) | median CPU (s) | fastest wall (s) | runs |")
    print("|---|---:|---:|---:|---:|---:|")
    baselines(args.runs, env, work)
    for name, db in (("healthy", small), ("large", large)):
        # a request's prefill rid, read from the table (a query of the views would be their first reader)
        rid = output(
            pdf("sql", "--db", str(db), "--format", "csv",
                "SELECT rid FROM events WHERE engine = 'prefill' AND event = 'request_received' "
                "AND bootstrap_room > 0 ORDER BY bootstrap_room LIMIT 1"),
            env, work,
        ).split()[1]  # fmt: skip
        on = ["--db", str(db)]
        measure(f"{name}: `verdict`", pdf("verdict", *on), args.runs, env, work)
        measure(f"{name}: `sql stuck_requests`", pdf("sql", "stuck_requests", *on), args.runs, env, work)
        measure(f"{name}: `timeline <rid>`", pdf("timeline", rid, *on), args.runs, env, work)
        trace = work / f"{name}.perfetto.json"
        measure(f"{name}: `export --format perfetto`", pdf("export", "--format", "perfetto", "--out", str(trace), *on),
                args.runs, env, work)  # fmt: skip
        page = work / f"{name}.html"
        measure(f"{name}: `report`", pdf("report", "--out", str(page), *on), args.runs, env, work)
    measure("fleet (16 hosts): `verdict`", pdf("verdict", "--db", str(fleet)), args.runs, env, work)
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
