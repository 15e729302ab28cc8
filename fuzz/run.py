"""Run the record-reader fuzz target from a seed corpus, for a number of inputs (what CI runs: the
same inputs on any machine) or for a time.

    python fuzz/run.py --runs 400 --seed 1            # exit 0: no input broke the readers
    python fuzz/run.py --seconds 20 --seed 1
    python fuzz/run.py --seconds 600 --corpus fuzz-corpus --keep

The seed corpus is made from the fixtures (the head of each journal format, for each reader),
so the fuzzer starts from real structure instead of rediscovering it. A failing input is saved
as `crash-*` in --artifacts and its traceback printed; exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def write_seed_corpus(folder: Path) -> int:
    from readers import seed_inputs

    from pdforensics.paths import fixtures_dir

    folder.mkdir(parents=True, exist_ok=True)
    seeds = seed_inputs(fixtures_dir())
    for data in seeds:
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return len(seeds)


def run(
    seconds: int, seed: int, corpus: Path, artifacts: Path, max_len: int = 4096, runs: int | None = None
) -> subprocess.CompletedProcess[str]:
    """libFuzzer over the readers: `runs` inputs when given (with `seed`, the same inputs every
    time), else for `seconds`."""
    write_seed_corpus(corpus)
    artifacts.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        str(HERE / "fuzz_readers.py"),
        f"-runs={runs}" if runs is not None else f"-max_total_time={seconds}",
        f"-seed={seed}",
        f"-max_len={max_len}",
        "-rss_limit_mb=2048",
        "-timeout=30",  # one input taking longer than this is a hang: reported like a crash
        f"-artifact_prefix={artifacts}/",
        str(corpus),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=(seconds if runs is None else 0) + 600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--runs", type=int, help="this many inputs instead of --seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", type=Path, help="corpus folder to grow (default: a temporary one)")
    ap.add_argument("--artifacts", type=Path, default=Path("."), help="where crash-* inputs are written")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pdforensics-corpus-") as tmp:
        proc = run(args.seconds, args.seed, args.corpus or Path(tmp), args.artifacts, runs=args.runs)
    sys.stderr.write(proc.stderr[-20000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
