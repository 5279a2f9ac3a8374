"""The long fuzz run: every target of tests/fuzz with many more examples than the suite gives it.

    OMP_NUM_THREADS=1 .venv/bin/python tools/fuzz.py --examples 3000
    OMP_NUM_THREADS=1 .venv/bin/python tools/fuzz.py --target readers.table --examples 20000 --seed 7

Prints one row per target: the examples tried and the failures (0, or 1: Hypothesis stops at the
first failing input, shrinks it and prints it below the table; an example that takes longer than
--timeout seconds fails too). Exit code 1 when any target failed.
The targets, their strategies and the oracle live in tests/fuzz (fuzz_*_targets.py, fuzz_core.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
FUZZ_DIR = Path(__file__).resolve().parents[1] / "tests" / "fuzz"
sys.path.insert(0, str(FUZZ_DIR))

import fuzz_checkpoint_targets  # noqa: E402, F401  (registers its targets)
import fuzz_config_targets  # noqa: E402, F401
import fuzz_reader_targets  # noqa: E402, F401
import torch  # noqa: E402
from fuzz_core import TARGETS, Assets, Hang, run_target  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="examples per target (default 2000)")
    parser.add_argument(
        "--target", action="append", help="a target name or prefix (e.g. readers); repeatable; default: all"
    )
    parser.add_argument("--seed", type=int, help="Hypothesis seed (default: random; the suite derandomizes)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one example may take (default 60)")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    args = parser.parse_args(argv)
    names = [n for n in TARGETS if not args.target or any(n == t or n.startswith(t) for t in args.target)]
    if args.list or not names:
        print("\n".join(TARGETS) if args.list else f"no target matches {args.target}; see --list")
        return 0 if args.list else 2
    torch.set_num_threads(1)
    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="attnkit-fuzz-") as root:
        assets = Assets(Path(root))
        for name in names:
            start = time.perf_counter()
            try:
                tried = run_target(
                    TARGETS[name], assets, args.examples, derandomize=False, seed=args.seed, timeout_s=args.timeout
                )
                failed = 0
            except (Exception, Hang):
                tried, failed = -1, 1
                failures.append((name, traceback.format_exc()))
            rows.append((name, tried, failed, time.perf_counter() - start))
            print(f"  {name}: {'FAILED' if failed else f'{tried} examples'}", file=sys.stderr, flush=True)
    print(f"\n{'target':<28} {'examples':>9} {'failures':>9} {'seconds':>8}")
    for name, tried, failed, seconds in rows:
        print(f"{name:<28} {tried if tried >= 0 else '-':>9} {failed:>9} {seconds:>8.1f}")
    print(f"{'total':<28} {sum(max(r[1], 0) for r in rows):>9} {sum(r[2] for r in rows):>9}")
    for name, text in failures:
        print(f"\n=== {name} ===\n{text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
