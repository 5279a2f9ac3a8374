"""Helpers of the viz tests: a headless-Chromium DOM dump."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
from check_site import CHROMIUM_ARGS, CHROMIUM_NAMES, find_chromium  # the site check's browser


def chromium_binary() -> str:
    """Path of a Chromium-family browser; skips the calling test (saying why) on platforms without one."""
    found = find_chromium()
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
        *CHROMIUM_ARGS,
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
