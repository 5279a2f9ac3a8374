"""The ``attnkit explore`` process the browser tests open (127.0.0.1, ``--port 0``, its URL read from its first
line of output; stopped by the tests) and a headless Chromium that refuses every request off 127.0.0.1."""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from viz_helpers import chromium_binary

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
from check_site import CHROMIUM_ARGS  # the site check's browser flags


@contextmanager
def explore_server(folder: Path, log: Path) -> Iterator[str]:
    """``attnkit explore FOLDER --port 0 --no-browser`` running while the block runs; yields its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "attnkit", "explore", str(folder), "--port", "0", "--no-browser"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip
    first: queue.Queue[str] = queue.Queue()

    def read() -> None:  # until the process exits, so its stdout never fills up
        assert process.stdout is not None
        for line in process.stdout:
            first.put(line)
        first.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = first.get(timeout=120)
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        if match is None:
            raise RuntimeError(f"attnkit explore did not report its URL: {line!r}; stderr: {log.read_text()}")
        yield match.group(0)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


@contextmanager
def browser() -> Iterator[object]:
    """A headless Chromium (Debian's, through Playwright)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_binary(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Watch:
    """A page's console errors, uncaught exceptions and every request it makes."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

    def check(self, allowed: tuple[str, ...]) -> None:
        assert self.errors == []
        off = [u for u in self.requests if not u.startswith(allowed)]
        assert off == [], f"requests outside 127.0.0.1: {off}"


def wait_for(page: Any, text: str, version: int = 0) -> int:
    """Wait until the views show ``text`` (and a version after ``version``); returns the version."""
    page.wait_for_function(
        "([t, v]) => document.body.dataset.text === t && Number(document.body.dataset.version) > v", arg=[text, version]
    )
    return int(page.evaluate("document.body.dataset.version"))


def raw(url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """``(status, body)`` of one request written on a socket as given (``Host`` included)."""
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    head = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items())]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_text, _, rest = data.partition(b"\r\n\r\n")
    status = int(head_text.split()[1])
    return status, json.loads(rest) if b"application/json" in head_text.lower() else rest


@contextmanager
def running(app: Any) -> Iterator[str]:
    """``app`` on uvicorn on 127.0.0.1 (a free port) in a thread of this process; yields its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(32)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
