"""The rules in front of ``attnkit explore`` (127.0.0.1): a foreign ``Host`` is refused (421), a body must be
``application/json`` (415, the cross-site ``text/plain`` POST) and within the size limit (413, before it is read),
a text over the character limit is a 400 before it is tokenized; views are computed one at a time on a worker
thread (the page's other requests keep answering) and a view that finds the waiting line full is a 429."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from explore_helpers import explore_server, raw, running

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = build_chat_model(tmp_path_factory.mktemp("llama") / "m")
    with explore_server(folder, tmp_path_factory.mktemp("explore-log") / "stderr.txt") as address:
        yield address


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", ""])
def test_a_foreign_host_is_refused(url: str, host: str) -> None:
    for method, path, body in (("GET", "/", b""), ("POST", "/api/view", b'{"text": "the cat"}')):
        status, data = raw(url, method, path, body, {**JSON, "Host": host})
        assert status == 421 and data["code"] == "host_not_allowed" and "loopback" in data["detail"], data


@pytest.mark.parametrize("host", ["localhost", "localhost:{port}", "127.0.0.1", "[::1]:{port}"])
def test_loopback_hosts_are_served(url: str, host: str) -> None:
    port = url.rstrip("/").rsplit(":", 1)[1]
    status, data = raw(url, "POST", "/api/view", b'{"text": "the cat"}', {**JSON, "Host": host.format(port=port)})
    assert status == 200 and data["input"]["text"] == "the cat"


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_json_is_415(url: str, kind: str | None) -> None:
    status, data = raw(url, "POST", "/api/view", b'{"text": "the cat"}', {"Content-Type": kind} if kind else {})
    assert status == 415 and data["code"] == "unsupported_media_type", data


def test_a_body_over_the_limit_is_413_before_it_is_read(url: str) -> None:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    head = f"POST /api/view HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    head += "Content-Length: 3000000\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"text": "')  # 3 MB announced; a server that waits for them times out
        data = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            data += chunk
    assert data.startswith(b"HTTP/1.1 413"), data
    assert b"1048576 bytes" in data


def test_a_text_over_the_character_limit_is_400(url: str) -> None:
    body = json.dumps({"text": "the cat " * 12_501}).encode()  # 100,008 characters, 0.1 MB
    start = time.perf_counter()
    status, data = raw(url, "POST", "/api/view", body, JSON)
    assert status == 400 and "100008 characters" in data["detail"] and "limit of 100000" in data["detail"], data
    assert time.perf_counter() - start < 2


class SlowExplorer:
    """A stand-in explorer whose views wait for ``release`` (counting how many ran)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.views = 0

    def info(self) -> dict[str, Any]:
        return {"kind": "stand-in"}

    def view(self, text: str, **options: Any) -> dict[str, Any]:
        self.views += 1
        self.started.release()
        assert self.release.wait(30)
        return {"input": {"text": text}}


def post(url: str, text: str) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url + "api/view", data=json.dumps({"text": text}).encode(), headers=JSON)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def test_views_run_one_at_a_time_off_the_event_loop_and_a_full_line_is_429() -> None:
    from attnkit.viz.explorer.app import create_explore_app

    explorer = SlowExplorer()
    with running(create_explore_app(explorer, max_waiting=2)) as url:  # type: ignore[arg-type]  # a stand-in Explorer
        results: list[tuple[int, dict[str, str], Any]] = []
        first = threading.Thread(target=lambda: results.append(post(url, "first")))
        first.start()
        try:
            assert explorer.started.acquire(timeout=30)  # the first view is being computed
            start = time.perf_counter()
            with urllib.request.urlopen(url + "api/info", timeout=10) as response:  # the loop is free meanwhile
                assert json.loads(response.read()) == {"kind": "stand-in"}
            assert time.perf_counter() - start < 2
            more = [threading.Thread(target=lambda t=t: results.append(post(url, t))) for t in "abcd"]
            for thread in more:
                thread.start()
            deadline = time.monotonic() + 10
            while len(results) < 2:  # two of the four wait for the first; the other two are refused at once
                assert time.monotonic() < deadline, f"not refused: {results}"
                time.sleep(0.01)
            assert [r[0] for r in results] == [429, 429], results
            assert all(r[1]["retry-after"] == "1" and "2 views are waiting" in r[2]["detail"] for r in results)
            assert explorer.views == 1  # one at a time
        finally:
            explorer.release.set()
        for thread in (first, *more):
            thread.join(30)
        assert sorted(r[0] for r in results) == [200, 200, 200, 429, 429]
        assert explorer.views == 3
