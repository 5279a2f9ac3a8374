"""Load and disconnects against the real server: 32 concurrent streaming clients (greedy) each get what
the same request gets alone, none is lost, and the server's memory returns to its level; clients that
hang up mid-stream free their rows while the others finish correctly."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import openai
import pytest
from serve_helpers import API_KEY, Server

from chat_models import CORPUS

CLIENTS = 32


def requests() -> list[dict[str, Any]]:
    """32 greedy requests of varied prompts and lengths, completions and chat."""
    out: list[dict[str, Any]] = []
    for i in range(CLIENTS):
        text = " ".join(CORPUS[(7 * i) % len(CORPUS)].split()[: 2 + i % 9])
        if i % 3 == 2:
            out.append({"messages": [{"role": "user", "content": text}], "max_tokens": 6 + (5 * i) % 50})
        else:
            out.append({"prompt": text, "max_tokens": 4 + (7 * i) % 60})
    return out


def stream(client: Any, request: dict[str, Any]) -> tuple[str, str | None]:
    """The streamed text and finish reason of one greedy request."""
    args = {"model": "tiny-chat", "temperature": 0, "stream": True, **request}
    text, reason = "", None
    if "messages" in request:
        for chunk in client.chat.completions.create(**args):
            for c in chunk.choices:
                text += c.delta.content or ""
                reason = c.finish_reason or reason
    else:
        for chunk in client.completions.create(**args):
            for c in chunk.choices:
                text += c.text
                reason = c.finish_reason or reason
    return text, reason


def concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on one thread each, started together; their results (an exception fails the test)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def work(i: int) -> None:
        try:
            start.wait(timeout=60)
            results[i] = calls[i]()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a client did not finish"
    assert not errors, errors
    return results


def wait_idle(server: Server, timeout: float = 60) -> dict[str, Any]:
    """The server's /health once no row is live (polled until then, failing after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        status, health = server.request("GET", "/health")
        assert status == 200
        if health["live_rows"] == 0 and health["waiting"] == 0:
            return health
        assert time.monotonic() < deadline, f"the batch did not empty: {health}"
        threading.Event().wait(0.05)


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def test_32_concurrent_streams_equal_their_answers_alone_and_memory_returns(server: Server, client: Any) -> None:
    reqs = requests()
    alone = [stream(client, r) for r in reqs]  # one at a time: the references (and a warm-up)
    assert all(reason in ("stop", "length") for _, reason in alone)
    concurrently([lambda r=r: stream(client, r) for r in reqs])  # warm-up under load
    wait_idle(server)
    before = server.rss_kib()
    peak_before = server.request("GET", "/health")[1]["peak_rows"]
    got = concurrently([lambda r=r: stream(client, r) for r in reqs])
    assert got == alone  # every answer, none lost, each as alone
    health = wait_idle(server)
    assert health["peak_rows"] >= 8 and peak_before >= 8, health  # they were decoded together
    after = server.rss_kib()
    assert after <= 1.10 * before, f"RSS {before} KiB before the load, {after} KiB after"


def hang_up_mid_stream(server: Server, body: dict[str, Any], chunks: int = 2) -> int:
    """Open a streamed completion, read ``chunks`` events, then close the connection; the events read."""
    url = urlparse(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}), headers)
    resp = conn.getresponse()
    assert resp.status == 200
    seen = 0
    while seen < chunks:
        line = resp.readline()
        assert line, "the stream ended early"
        seen += line.startswith(b"data: {")
    resp.close()
    conn.close()
    return seen


def test_clients_that_hang_up_free_their_rows_and_the_others_finish(server: Server, client: Any) -> None:
    long = {"model": "tiny-chat", "prompt": "The", "max_tokens": 100, "temperature": 0.8, "seed": 1}
    status, full = server.request("POST", "/v1/completions", {**long, "n": 4})
    assert status == 200 and full["usage"]["completion_tokens"] > 40  # long enough to be cut
    wait_idle(server)
    cancelled_before = server.request("GET", "/health")[1]["cancelled_rows"]
    reqs = requests()[:6]
    alone = [stream(client, r) for r in reqs]
    calls: list[Callable[[], Any]] = [lambda: hang_up_mid_stream(server, {**long, "n": 4}) for _ in range(4)]
    calls += [lambda r=r: stream(client, r) for r in reqs]
    results = concurrently(calls)
    assert results[4:] == alone
    health = wait_idle(server)
    assert health["cancelled_rows"] - cancelled_before >= 4, health  # rows freed before their end
    status, data = server.request("POST", "/v1/completions", {**long, "max_tokens": 3})
    assert status == 200 and data["usage"]["completion_tokens"] <= 3
