"""The documentation site's build, started in the background as soon as the suite is collected (when the
docs tests are among the selected ones), so that executing every tutorial overlaps the rest of the suite
instead of adding to it; the docs tests run last (tests/conftest.py moves them) and wait for it. Once the site is
built, every page is opened in Chromium in the background too (``docs/check_site.py --json``): :func:`pages`.

The build is the one ``make docs`` runs (from scratch, warnings as errors), at a lower priority (``nice``)
and on one thread, with its own token cache folder. :func:`result` gives its HTML folder, its output and how long
it took, starting it first if nothing did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
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
        self.env, self.check, self.stopping = env, None, False
        self.checker = threading.Thread(target=self._check_pages, name="docs-site-check", daemon=True)
        self.checker.start()

    def _check_pages(self) -> None:
        """Once the site is built, open every page in Chromium (a process of its own, at the same priority)."""
        if self.proc.wait() != 0 or self.stopping:
            return
        cmd = [sys.executable, str(DOCS / "check_site.py"), str(self.folder / "html"), "--json",
               str(self.folder / "pages.json")]  # fmt: skip
        if shutil.which("nice"):
            cmd = ["nice", "-n", "5", *cmd]
        with open(self.folder / "check.txt", "w") as log:
            self.check = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env)
            self.check.wait()

    def pages(self) -> list[dict[str, object]] | None:
        """Every page's report of the background check (``None`` if it did not run or failed to finish)."""
        self.result()
        self.checker.join(timeout=TIMEOUT)
        path = self.folder / "pages.json"
        if self.check is None or self.check.returncode is None or not path.is_file():
            return None
        return list(json.loads(path.read_text()))

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
        self.stopping = True
        if self.check is not None and self.check.poll() is None:
            self.check.kill()
            self.check.wait()
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


def pages() -> list[dict[str, object]] | None:
    """Every page's report (``docs/check_site.py``'s ``PageReport`` as a dict) from the background Chromium check
    of the built site; ``None`` when it did not run (no site, no Chromium), so the caller checks the pages itself."""
    start()
    assert _BUILD is not None
    return _BUILD.pages()


def wait() -> None:
    """Return once the build (where one was started) has ended."""
    if _BUILD is not None:
        _BUILD.proc.wait()


def stop() -> None:
    """Kill a build still running (an interrupted session) and remove its folder."""
    global _BUILD
    if _BUILD is not None:
        _BUILD.stop()
        _BUILD = None
