"""Helpers of the viz tests: a headless-Chromium DOM dump."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_binary() -> str:
    """Path of a Chromium-family browser; skips the calling test (saying why) on platforms without one."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    reason = f"no Chromium on this platform (looked for {', '.join(CHROMIUM_NAMES)} on PATH): report not opened"
    print(reason)
    pytest.skip(reason)


def dump_dom(path: Path, profile: Path) -> str:
    """The DOM of ``path`` after headless Chromium loaded it and ran its scripts."""
    cmd = [
        chromium_binary(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        path.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    assert "<body" in proc.stdout, f"chromium printed no DOM:\n{proc.stderr[-3000:]}"
    return proc.stdout


def attribute(dom: str, tag: str, name: str) -> str | None:
    """The value of attribute ``name`` on the first ``<tag ...>`` of ``dom``."""
    match = re.search(rf"<{tag}\b[^>]*\b{name}=\"([^\"]*)\"", dom)
    return match.group(1) if match else None
