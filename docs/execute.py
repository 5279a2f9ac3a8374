"""Run tutorial notebooks top to bottom, as Jupyter would, and say how long each took.

    python docs/execute.py                       # every docs/tutorials/*.py
    python docs/execute.py docs/tutorials/03_reverse.py --out build/notebooks

The tutorials are jupytext "percent" scripts (``# %%`` cells). Each one is read with jupytext, run by
nbclient on an IPython kernel in its own folder, and (with ``--out``) written as an executed
``.ipynb`` with its outputs. The first error stops that notebook and is printed with its cell; the
exit status is 1 if any notebook failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TUTORIALS = Path(__file__).resolve().parent / "tutorials"
# One thread per kernel: the notebooks are checked on a shared 2-core machine, where PyTorch's
# default of one thread per core slows 5-12x as soon as another process wants a core.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# tqdm (imported by Lightning's and Optuna's dependencies) notes in every kernel that ipywidgets is not
# installed; the site shows no progress bars, so that notice is not shown either.
os.environ.setdefault("PYTHONWARNINGS", "ignore:IProgress not found")


def execute(path: Path, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """The notebook of ``path`` after running every cell, and the seconds it took."""
    nb = jupytext.read(path)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every docs/tutorials/*.py")
    parser.add_argument("--out", type=Path, default=None, help="write the executed .ipynb files here")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may take")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(TUTORIALS.glob("[0-9]*.py"))
    failed = 0
    for path in paths:
        try:
            nb, seconds = execute(path, args.timeout)
        except CellExecutionError as err:
            failed += 1
            print(f"FAILED {path}:\n{err}", file=sys.stderr)
            continue
        print(f"{path.name}: {seconds:.1f} s", flush=True)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.out / f"{path.stem}.ipynb")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
