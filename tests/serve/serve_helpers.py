"""The ``attnkit serve`` process the server tests talk to: started on 127.0.0.1 with ``--port 0`` (its port
read from its first line of output), driven with raw HTTP, stopped by the tests."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

API_KEY = "test-key"


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT
    lines: list[str]

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def request(
        self, method: str, path: str, body: bytes | dict[str, Any] | None = None, key: str | None = API_KEY
    ) -> tuple[int, Any]:
        """``(status, parsed JSON body)`` of a raw HTTP request."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if key is not None:
            req.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match is not None
        return int(match.group(1))


def start_server(folder: Path, *args: str, log: Path, env: dict[str, str] | None = None) -> Server:
    """``attnkit serve FOLDER --port 0 ARGS`` in a process (``env``: variables to set besides ours, e.g. the
    API key); waits for the line giving its URL."""
    env = {**{k: v for k, v in os.environ.items() if k != "ATTNKIT_API_KEY"}, **(env or {})}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    stderr = log.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "attnkit", "serve", str(folder), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    stderr.close()
    lines: list[str] = []
    first: queue.Queue[str] = queue.Queue()

    def read() -> None:  # reads until the process exits, so its stdout never fills up
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            first.put(line)
        first.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = first.get(timeout=120)
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if match is None:
            raise RuntimeError(f"the server did not report its URL: {line!r}; stderr: {log.read_text()}")
    except BaseException:
        stop_server(process)
        raise
    return Server(process, f"http://127.0.0.1:{match.group(1)}", lines)


def stop_server(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
