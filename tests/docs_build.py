"""The documentation site's build, started in the background as soon as the suite is collected (when the
docs tests are among the selected ones), so that executing the eight tutorials overlaps the rest of the suite
instead of adding to it; the docs tests run last (tests/conftest.py moves them) and wait for it.

The build is the one ``make docs`` runs (from scratch, warnings as errors), at a lower priority (``nice``)
and on one thread, with its own token cache folder. :func:`result` gives its HTML folder, its output and how long
it took, starting it first if nothing did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TIMEOUT = 1500  # seconds: the build executes every tutorial (a loaded machine included)


class _Build:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="attnkit-docs-site-"))
        cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-b", "html", str(DOCS),
               str(self.folder / "html"), "-d", str(self.folder / "doctrees")]  # fmt: skip
        if shutil.which("nice"):
            cmd = ["nice", "-n", "5", *cmd]  # the tests in the foreground come first
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNKIT_CACHE": str(self.folder / "attnkit-cache")}
        self.stdout = open(self.folder / "stdout.txt", "w+")  # noqa: SIM115 (read back in result())
        self.stderr = open(self.folder / "stderr.txt", "w+")  # noqa: SIM115
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.stdout, stderr=self.stderr, text=True, cwd=ROOT, env=env)
        self.done: tuple[Path, subprocess.CompletedProcess[str], float] | None = None

    def result(self) -> tuple[Path, subprocess.CompletedProcess[str], float]:
        if self.done is None:
            try:
                code = self.proc.wait(timeout=max(1.0, TIMEOUT - (time.perf_counter() - self.start)))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
            seconds = time.perf_counter() - self.start
            out, err = (Path(f.name).read_text() for f in (self.stdout, self.stderr))
            proc = subprocess.CompletedProcess(self.proc.args, code, out, err)
            self.done = (self.folder / "html", proc, seconds)
        return self.done

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.stdout, self.stderr):
            f.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_BUILD: _Build | None = None


def start() -> None:
    """Start the build (once)."""
    global _BUILD
    if _BUILD is None:
        _BUILD = _Build()


def result() -> tuple[Path, subprocess.CompletedProcess[str], float]:
    """``(html folder, the build's output and return code, seconds from its start to its end)``."""
    start()
    assert _BUILD is not None
    return _BUILD.result()


def stop() -> None:
    """Kill a build still running (an interrupted session) and remove its folder."""
    global _BUILD
    if _BUILD is not None:
        _BUILD.stop()
        _BUILD = None
