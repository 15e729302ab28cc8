"""atheris (libFuzzer) target for the record readers: coverage-guided search for inputs that break them.

    python fuzz/fuzz_readers.py [libFuzzer flags] [corpus folders]
    python fuzz/fuzz_readers.py -max_total_time=60 -seed=1 fuzz-corpus/

An input that breaks the contract (fuzz/readers.py) ends the run with its traceback and a
`crash-<sha1>` file; replay it with `python fuzz/fuzz_readers.py crash-<sha1>`.
`fuzz/run.py` runs this for a bounded time from a seed corpus made of the fixtures (what CI does).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["pdforensics", "readers"]):
    import readers


def test_one_input(data: bytes) -> None:
    readers.check(data)


def main(argv: list[str]) -> None:
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
