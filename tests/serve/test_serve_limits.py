"""Admission control and local-only rules of the real ``attnkit serve`` (127.0.0.1): body size (413, before the
body is read whole, with or without Content-Length), prompt and character limits (400 naming the field, before
tokenizing), the ``--max-tokens`` cap, a full queue (429 with Retry-After), ``/health`` fast meanwhile, a
non-streamed request cancelled when its client hangs up, foreign ``Host`` headers (421), non-JSON bodies
(415) and the API key (from the environment, on every route but ``/health``)."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serve_helpers import API_KEY, Server, start_server, stop_server

ENV_KEY = "key-from-the-environment"
OK = {"model": "tiny-chat", "prompt": "The old owl", "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def limited(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Small limits, and the API key from $ATTNKIT_API_KEY (no --api-key)."""
    log = tmp_path_factory.mktemp("serve-limited") / "stderr.txt"
    args = ["--max-body-bytes", "20000", "--max-prompts", "4", "--max-chars", "3000", "--max-queue", "8"]
    srv = start_server(
        model_dir, *args, "--max-tokens", "5", "--model-name", "tiny-chat", log=log, env={"ATTNKIT_API_KEY": ENV_KEY}
    )
    try:
        yield srv
    finally:
        stop_server(srv.process)


@pytest.fixture(scope="module")
def busy(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One row at a time (--max-batch 1) and a queue of 64 prompts: a 64-prompt request keeps it busy."""
    log = tmp_path_factory.mktemp("serve-busy") / "stderr.txt"
    args = ["--max-batch", "1", "--max-prompts", "64", "--max-queue", "64", "--model-name", "tiny-chat"]
    srv = start_server(model_dir, *args, log=log)
    try:
        yield srv
    finally:
        stop_server(srv.process)


def raw(
    server: Server,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 30,
) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, JSON body)`` of one request written on a socket as given (``Host`` included)."""
    host, port = server.url.removeprefix("http://").split(":")
    head = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items())]
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return read_response(sock)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed in the response's body"
        rest += chunk
    is_json = headers.get("content-type", "").startswith("application/json")
    return int(status_line.split()[1]), headers, json.loads(rest[:length]) if is_json else rest[:length]


def post(server: Server, path: str, body: dict[str, Any], key: str | None, **kw: Any) -> tuple[int, dict, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return raw(server, "POST", path, json.dumps(body).encode(), headers, **kw)


def health(server: Server) -> dict[str, Any]:
    status, _, data = raw(server, "GET", "/health")
    assert status == 200, data
    return data


# ------------------------------------------------------------------ size, prompts, characters, max_tokens


def test_a_content_length_over_the_limit_is_413_before_the_body_is_read(limited: Server) -> None:
    host, port = limited.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {ENV_KEY}\r\nContent-Length: 5000000\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"model": "tiny-chat", "prompt": "')  # 5 MB announced, 34 bytes sent
        status, _, data = read_response(sock)  # a server that waits for the body times out here
    assert status == 413 and data["error"]["code"] == "request_too_large", data
    assert "20000 bytes" in data["error"]["message"] and "--max-body-bytes" in data["error"]["message"]


def test_a_chunked_body_is_counted_as_it_arrives(limited: Server) -> None:
    host, port = limited.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {ENV_KEY}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())
        sent = 0
        while not select.select([sock], [], [], 0.05)[0]:  # a chunk of 1000 bytes until the server answers
            assert sent < 200_000, "no answer after 200 kB of a body limited to 20000 bytes"
            sock.sendall(b"3e8\r\n" + b"x" * 1000 + b"\r\n")
            sent += 1000
        status, _, data = read_response(sock)
    assert status == 413 and data["error"]["code"] == "request_too_large", data
    assert sent <= 40_000  # refused soon after the limit, not at the body's end
    small = json.dumps(OK).encode()  # a chunked body within the limit is served
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + f"{len(small):x}\r\n".encode() + small + b"\r\n0\r\n\r\n")
        status, _, data = read_response(sock)
    assert status == 200 and data["choices"][0]["text"] is not None, data


def test_too_many_prompts_or_characters_are_400_naming_the_field(limited: Server) -> None:
    status, _, data = post(limited, "/v1/completions", {**OK, "prompt": ["a"] * 5}, ENV_KEY)
    assert status == 400 and data["error"]["param"] == "prompt", data
    assert "5 prompts" in data["error"]["message"] and "--max-prompts" in data["error"]["message"]
    status, _, data = post(limited, "/v1/completions", {**OK, "prompt": ["ab" * 1000, "c" * 1001]}, ENV_KEY)
    assert status == 400 and data["error"]["param"] == "prompt", data
    assert "3001 characters" in data["error"]["message"] and "--max-chars" in data["error"]["message"]
    messages = [{"role": "system", "content": "s" * 2000}, {"role": "user", "content": "u" * 1001}]
    chat = {"model": "tiny-chat", "messages": messages}
    status, _, data = post(limited, "/v1/chat/completions", chat, ENV_KEY)
    assert status == 400 and data["error"]["param"] == "messages" and "--max-chars" in data["error"]["message"]
    status, _, data = post(limited, "/v1/completions", {**OK, "prompt": ["The old owl"] * 4}, ENV_KEY)
    assert status == 200 and len(data["choices"]) == 4  # at the limits: served


def test_max_tokens_is_capped_and_is_chats_default(limited: Server) -> None:
    status, _, data = post(limited, "/v1/completions", {**OK, "max_tokens": 60}, ENV_KEY)
    assert status == 200 and data["usage"]["completion_tokens"] == 5, data
    assert data["choices"][0]["finish_reason"] == "length"
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "The old owl"}], "temperature": 0}
    status, _, data = post(limited, "/v1/chat/completions", chat, ENV_KEY)
    assert status == 200 and data["usage"]["completion_tokens"] == 5, data


def test_health_stays_fast_while_huge_prompts_are_refused(server: Server) -> None:
    """A prompt of 1.5 million characters (under the 2 MiB body limit, over the 100,000 characters) is refused
    before it is tokenized; one of 99,000 is tokenized on a worker thread. /health answers meanwhile."""
    results: list[tuple[int, Any]] = []

    def send(text: str) -> None:
        status, _, data = post(server, "/v1/completions", {**OK, "prompt": text}, API_KEY, timeout=120)
        results.append((status, data))

    for text in ("moon river " * 136_000, "moon river " * 9_000):
        sender = threading.Thread(target=send, args=(text,))
        sender.start()
        slowest = 0.0
        while sender.is_alive():
            start = time.perf_counter()
            health(server)
            slowest = max(slowest, time.perf_counter() - start)
        sender.join()
        assert slowest < 1.0, f"/health took {slowest:.2f} s while a prompt of {len(text)} characters was handled"
    (big, big_data), (small, small_data) = results
    assert big == 400 and big_data["error"]["param"] == "prompt" and "--max-chars" in big_data["error"]["message"]
    assert small == 400 and small_data["error"]["code"] == "context_length_exceeded", small_data


# ------------------------------------------------------------------ the queue, and clients that hang up


def hanging_request(server: Server, prompts: int) -> socket.socket:
    """A non-streamed completions request of ``prompts`` long prompts, its response never read; once the
    engine works on it (a row live, most prompts waiting), its socket (close it to hang up)."""
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"model": "tiny-chat", "prompt": ["The"] * prompts, "max_tokens": 120, "temperature": 0})
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(head.encode() + body.encode())
    deadline = time.monotonic() + 30
    while (now := health(server))["live_rows"] < 1 or now["waiting"] < prompts // 2:
        assert time.monotonic() < deadline, f"the request did not reach the engine: {now}"
        time.sleep(0.01)
    return sock


def wait_idle(server: Server, timeout: float) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    while (now := health(server))["live_rows"] or now["waiting"]:
        assert time.monotonic() - start < timeout, f"the engine still works {timeout} s later: {now}"
        time.sleep(0.02)
    return now, time.monotonic() - start


def test_a_full_queue_is_429_with_retry_after(busy: Server) -> None:
    wait_idle(busy, 60)
    sock = hanging_request(busy, 64)
    try:
        body = {**OK, "prompt": ["The old owl"] * 40}  # refused while more than 24 of the 64 wait
        status, headers, data = post(busy, "/v1/completions", body, None, timeout=10)
        assert status == 429, data
        assert headers["retry-after"] == "1" and data["error"]["code"] == "queue_full", (headers, data)
        assert "--max-queue" in data["error"]["message"]
        assert health(busy)["waiting"] > 0  # the queue is still full of the first request's prompts
    finally:
        sock.close()
    wait_idle(busy, 10)
    status, _, data = post(busy, "/v1/completions", body, None, timeout=30)
    assert status == 200 and len(data["choices"]) == 40


def test_a_non_streamed_request_whose_client_hangs_up_leaves_the_engine(busy: Server) -> None:
    wait_idle(busy, 60)
    sock = hanging_request(busy, 64)  # 64 prompts of up to 120 tokens, one row at a time: ~7,700 steps
    steps = health(busy)["steps"]
    sock.close()
    after, took = wait_idle(busy, 10)
    assert after["steps"] - steps < 1000, f"{after['steps'] - steps} steps after the client left ({took:.1f} s)"
    start = time.monotonic()
    status, _, data = post(busy, "/v1/completions", OK, None, timeout=30)  # the next client is served at once
    assert status == 200 and data["usage"]["completion_tokens"] >= 1
    assert time.monotonic() - start < 5


# ------------------------------------------------------------------ local only: Host, content type, API key


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil", ""]
)
def test_a_foreign_host_is_refused(limited: Server, host: str) -> None:
    port = limited.url.rsplit(":", 1)[1]
    headers = {"Host": host.format(port=port), "Content-Type": "application/json", "Authorization": f"Bearer {ENV_KEY}"}
    for method, path, body in (("GET", "/health", b""), ("POST", "/v1/completions", json.dumps(OK).encode())):
        status, _, data = raw(limited, method, path, body, headers)
        assert status == 421 and data["error"]["code"] == "host_not_allowed", data
        assert "loopback" in data["error"]["message"]


LOOPBACK = [
    "localhost",
    "localhost:{port}",
    "LOCALHOST:{port}",
    "127.0.0.1",
    "127.3.2.1:{port}",
    "[::1]:{port}",
    "[::1]",
]


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts_are_served(limited: Server, host: str) -> None:
    port = limited.url.rsplit(":", 1)[1]
    status, _, data = raw(limited, "GET", "/health", headers={"Host": host.format(port=port)})
    assert status == 200 and data["status"] == "ok", data


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_a_body_that_is_not_json_is_415(limited: Server, kind: str | None) -> None:
    headers = {"Authorization": f"Bearer {ENV_KEY}", **({"Content-Type": kind} if kind else {})}
    status, _, data = raw(limited, "POST", "/v1/completions", json.dumps(OK).encode(), headers)
    assert status == 415 and data["error"]["code"] == "unsupported_media_type", data
    headers["Content-Type"] = "Application/JSON; charset=utf-8"
    status, _, data = raw(limited, "POST", "/v1/completions", json.dumps(OK).encode(), headers)
    assert status == 200, data


@pytest.mark.parametrize("path", ["/docs", "/openapi.json", "/redoc", "/v1/models", "/nowhere"])
def test_every_route_but_health_needs_the_key_from_the_environment(limited: Server, path: str) -> None:
    for key in (None, "wrong", API_KEY):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        status, _, data = raw(limited, "GET", path, headers=headers)
        assert status == 401 and data["error"]["code"] == "invalid_api_key", (path, key, data)
    status, _, _ = raw(limited, "GET", path, headers={"Authorization": f"Bearer {ENV_KEY}"})
    assert status == (404 if path == "/nowhere" else 200)
    assert raw(limited, "GET", "/health")[0] == 200
    cmdline = Path(f"/proc/{limited.process.pid}/cmdline").read_bytes()
    assert ENV_KEY.encode() not in cmdline  # what ps shows


def test_a_queue_smaller_than_a_request_is_refused_at_start(tmp_path: Path) -> None:
    from attnkit.cli import main

    result = CliRunner().invoke(main, ["serve", str(tmp_path), "--max-prompts", "8", "--max-queue", "4"])
    assert result.exit_code == 2, result.output
    assert "max_queue (4) must be at least max_prompts (8)" in result.output
