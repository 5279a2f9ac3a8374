"""Start-up: commands that do not train must not pay for Lightning.

Times whole processes, each against the reference it names, in paired rounds (reference and command
one after the other, the order alternating per round, so that a slow moment hits both):

    attnkit tasks            vs  python -c "import torch"               goal: at most 1.5 s more
    attnkit generate --help  vs  python -c "import torch"               goal: at most 1.5 s more
    import attnkit.viz       vs  python -c "import torch, matplotlib"   goal: at most 1.0 s more

The figure of a command is the median over rounds of (command - its reference); each round is a win
(within the goal), or a loss. A goal is met when the median is within it and at least two thirds of the
rounds are wins: one outlier round cannot decide it. Checks that fail the run (exit status 1), besides a
missed goal: each command succeeds, and none of them imports ``lightning`` (asked of the same interpreter:
``sys.modules`` after the import, or ``-X importtime`` for the two commands). Before timing, the machine's
1-minute load average is printed; above 0.5 per core a warning says the figures are unreliable. The count
of modules each command imports beyond its reference (``-X importtime``), and their top-level packages,
is printed too: a figure that a busy machine does not blur. Before timing, the bytecode of attnkit's
modules that lack it (or whose source changed since) is written, as an installed package has it: the
reference's torch and matplotlib are timed with theirs, and a tree run with ``PYTHONDONTWRITEBYTECODE``
(as here) would otherwise compile each changed module again in every round.

    .venv/bin/python benchmarks/startup.py              # 8 rounds
    .venv/bin/python benchmarks/startup.py --quick      # 1 round, goals not enforced: a smoke test
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
ATTNKIT = [PY, "-m", "attnkit"]
REF_TORCH = [PY, "-c", "import torch"]
REF_TORCH_MPL = [PY, "-c", "import torch, matplotlib"]
REF_TORCH_MPL_NAME = 'python -c "import torch, matplotlib"'

# (name, command, reference command, reference name, goal in seconds over the reference)
CASES = [
    ("attnkit tasks", [*ATTNKIT, "tasks"], REF_TORCH, 'python -c "import torch"', 1.5),
    ("attnkit generate --help", [*ATTNKIT, "generate", "--help"], REF_TORCH, 'python -c "import torch"', 1.5),
    (
        "import attnkit.viz",
        [PY, "-c", "import attnkit.viz"],
        REF_TORCH_MPL,
        'python -c "import torch, matplotlib"',
        1.0,
    ),
]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def run_timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def compile_bytecode() -> tuple[int, int]:
    """Write the bytecode of every attnkit module that lacks it or is older than its source (``compileall``,
    into the package's ``__pycache__`` folders, which git ignores); (modules compiled, modules)."""
    spec = importlib.util.find_spec("attnkit")  # finds the package without importing it
    assert spec is not None and spec.submodule_search_locations, "attnkit is not installed"
    package = Path(next(iter(spec.submodule_search_locations)))
    sources = sorted(package.rglob("*.py"))
    stale = 0
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        stale += not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit(f"FAILED: compiling {package} (compileall): see the errors above")
    return stale, len(sources)


def imported_modules(cmd: list[str]) -> set[str]:
    """Every module ``cmd`` imports (``python -X importtime``'s report)."""
    assert cmd[0] == PY
    done = subprocess.run([PY, "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="paired rounds per command (default 8)")
    p.add_argument("--quick", action="store_true", help="1 round, goals not enforced (a smoke test)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    if not args.quick and rounds < 6:
        raise SystemExit("use at least 6 rounds (one outlier must not decide a goal), or --quick")
    ncpu = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("# attnkit start-up benchmark")
    print()
    print(f"python {sys.version.split()[0]}, cpu_count={ncpu}, OMP_NUM_THREADS=1, {rounds} paired rounds")
    print(f"1-minute load average at start: {load:.2f}")
    if load > 0.5 * ncpu:
        print("WARNING: the machine is not quiet: start-up times of whole processes will be noisy")
    failures: list[str] = []
    stale, total = compile_bytecode()
    print(f"bytecode: {stale} of attnkit's {total} modules compiled first (missing or older than the source)")

    # Lightning must not be imported by any of the commands. What each imports beyond its reference is
    # counted too: a figure that a busy machine does not blur (the times below it does).
    extra: dict[str, list[str]] = {}
    references = {ref_name: imported_modules(ref) for _, _, ref, ref_name, _ in CASES}  # each once
    for name, cmd, _, ref_name, _ in CASES:
        modules = imported_modules(cmd)
        heavy = sorted(m for m in modules if m == "lightning" or m.startswith("lightning."))
        if heavy:
            failures.append(f"{name} imports Lightning ({len(heavy)} modules, e.g. {heavy[0]})")
        extra[name] = sorted(modules - references[ref_name])
        tops = sorted({m.split(".")[0] for m in extra[name]})
        print(f"`{name}` imports {len(extra[name])} modules beyond `{ref_name}`, of: {', '.join(tops)}")

    for _ in range(0 if args.quick else 1):  # warm the file cache for every command (not in the smoke test)
        for _, cmd, ref, *_ in CASES:
            run_timed(ref)
            run_timed(cmd)

    results = []
    print()
    print(
        "| command | reference | command (median s) | reference (median s) | over the reference (median s) "
        "| goal | wins | met |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, cmd, ref, ref_name, goal in CASES:
        own, base, diffs = [], [], []
        for r in range(rounds):
            if r % 2 == 0:
                b, c = run_timed(ref), run_timed(cmd)
            else:
                c, b = run_timed(cmd), run_timed(ref)
            own.append(c)
            base.append(b)
            diffs.append(c - b)
        over = statistics.median(diffs)
        wins = sum(d <= goal for d in diffs)
        met = over <= goal and wins * 3 >= 2 * rounds
        results.append(
            {"command": name, "reference": ref_name, "command_s": own, "reference_s": base, "over_s": diffs,
             "median_over_s": over, "goal_s": goal, "wins": wins, "rounds": rounds, "met": met,
             "extra_modules": len(extra[name])}
        )  # fmt: skip
        print(
            f"| `{name}` | `{ref_name}` | {statistics.median(own):.2f} | {statistics.median(base):.2f} | "
            f"{over:+.2f} | {goal:.1f} | {wins}/{rounds} | {'yes' if met else 'NO'} |"
        )
        if not met and not args.quick:
            failures.append(
                f"{name}: {over:+.2f} s over {ref_name} (goal {goal:.1f} s; {wins}/{rounds} rounds within it)"
            )
    if args.json:
        args.json.write_text(json.dumps({"load": load, "rounds": rounds, "results": results}, indent=1))
    print()
    if shutil.which("attnkit") is None:
        print("note: timed as `python -m attnkit` (the `attnkit` script runs the same code)")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
