"""Load and abuse of a real ``attnkit serve``: well-behaved clients and bad ones at once, on 127.0.0.1.

Run::

    .venv/bin/python benchmarks/serve_abuse.py                 # 6 rounds (a few minutes)
    .venv/bin/python benchmarks/serve_abuse.py --rounds 2 --json out.json

The model: the tiny random chat model the server tests use (``tests/chat_models.py``: a Llama shape, a
byte-level BPE tokenizer trained here, a ChatML template, saved with ``save_pretrained``; nothing is
downloaded), served by ``python -m attnkit serve`` in its own process with an API key and small limits
(``SERVE_ARGS``), one OpenMP thread.

A round: 16 well-behaved clients (completions and chat, streamed and not, greedy and seeded sampling)
and the bad clients of :data:`BAD` (out-of-range sampling parameters, oversized bodies with and without a
``Content-Length``, malformed JSON, a cross-site ``text/plain`` request with a foreign ``Host``, too many
prompts, too much text, a wrong key, a full queue is not provoked here) plus two clients that hang up,
one streamed and one not, all started together. Meanwhile ``GET /health`` is polled.

Printed per round, and checked (the script exits 1 when one fails):

* well-behaved requests that failed: **0**;
* well-behaved answers unlike the same request's answer alone (taken one at a time before the rounds): **0**;
* bad requests not answered with the 4xx they must get: **0**;
* the server's resident memory once idle after the round, against before the first round: **<= 1.10x**;
* the slowest ``/health`` answer during the round (printed; checked <= 2 s).

``tests/serve/test_abuse.py`` runs one such round (the same functions) in the test suite.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = "abuse-key"
# Small limits, so that the oversized inputs are cheap to send.
MAX_BODY, MAX_PROMPTS, MAX_CHARS = 65_536, 8, 4_000
SERVE_ARGS = (
    "--api-key", KEY, "--max-batch", "32", "--model-name", "tiny-chat",
    "--max-body-bytes", str(MAX_BODY), "--max-prompts", str(MAX_PROMPTS), "--max-chars", str(MAX_CHARS),
    "--max-queue", "64", "--max-tokens", "64",
)  # fmt: skip
HEALTH_LIMIT_S = 2.0
RSS_LIMIT = 1.10


# ---------------------------------------------------------------------------------------- raw HTTP
@dataclass
class Target:
    host: str
    port: int

    def connect(self, timeout: float = 120) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def headers(key: str | None = KEY, content_type: str = "application/json", **extra: str) -> dict[str, str]:
    out = {"Content-Type": content_type, **extra}
    if key is not None:
        out["Authorization"] = f"Bearer {key}"
    return out


def post(target: Target, path: str, body: bytes | Iterator[bytes], head: dict[str, str]) -> tuple[int, bytes]:
    """``(status, body)`` of one POST (an iterator body is sent chunked, without a Content-Length)."""
    conn = target.connect()
    try:
        conn.request("POST", path, body, head, encode_chunked=not isinstance(body, bytes))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get(target: Target, path: str) -> tuple[int, bytes]:
    conn = target.connect()
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def health(target: Target) -> dict[str, Any]:
    status, body = get(target, "/health")
    assert status == 200, (status, body)
    return dict(json.loads(body))


# ------------------------------------------------------------------------------- well-behaved clients
TEXT = "the old owl sat on the hill and looked at the moon it was late quiet cat fox river stars"
WORDS = TEXT.split(" ")


def good_requests() -> list[dict[str, Any]]:
    """16 requests: completions and chat, streamed and not, greedy and seeded, one with ``n=2``."""
    out: list[dict[str, Any]] = []
    for i in range(16):
        text = " ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + i % 7))
        body: dict[str, Any] = {"model": "tiny-chat", "max_tokens": 4 + (7 * i) % 40, "stream": i % 2 == 0}
        if i % 4 < 2:
            body["temperature"] = 0
        else:
            body.update(temperature=0.9, top_p=0.95, seed=1000 + i)
        if i % 3 == 2:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if i == 5:
            body["n"] = 2
        out.append(body)
    return out


def answer(target: Target, body: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Each choice's ``(text, finish_reason)`` of one well-behaved request (streamed or not); raises on
    any status but 200."""
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    conn = target.connect()
    try:
        conn.request("POST", path, json.dumps(body).encode(), headers())
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{path} answered {resp.status}: {resp.read()[:300]!r}")
        choices: dict[int, list[Any]] = {}
        if not body.get("stream"):
            for c in json.loads(resp.read())["choices"]:
                text = c["message"]["content"] if "messages" in body else c["text"]
                choices[c["index"]] = [text, c["finish_reason"]]
        else:
            done = False
            for raw in resp:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    done = True
                    break
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"the stream failed: {event}")
                for c in event["choices"]:
                    got = choices.setdefault(c["index"], ["", None])
                    got[0] += (c["delta"].get("content") or "") if "messages" in body else c["text"]
                    got[1] = c.get("finish_reason") or got[1]
            if not done:
                raise RuntimeError("the stream ended without [DONE]")
        return [(choices[i][0], choices[i][1]) for i in sorted(choices)]
    finally:
        conn.close()


# -------------------------------------------------------------------------------------- bad clients
def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _chunks(total: int) -> Iterator[bytes]:
    """A JSON body of ``total`` bytes in 8 KiB chunks (sent without a Content-Length)."""
    yield b'{"model": "tiny-chat", "prompt": "'
    left = total
    while left > 0:
        yield b"a" * min(8192, left)
        left -= 8192
    yield b'"}'


def hang_up(target: Target, body: dict[str, Any], after_s: float) -> None:
    """Send ``body`` to /v1/completions, then close the connection after ``after_s`` seconds (streamed:
    after the first event) without reading the answer."""
    conn = target.connect()
    conn.request("POST", "/v1/completions", _json(body), headers())
    if body.get("stream"):
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        while not resp.readline().startswith(b"data: {"):
            pass
    else:
        time.sleep(after_s)
    conn.close()


COMPLETION = {"model": "tiny-chat", "prompt": "The old owl", "max_tokens": 8}
CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}


def _send(body: Any, path: str = "/v1/completions", **head: Any) -> Callable[[Target], tuple[int, bytes]]:
    """A bad client: POST ``body`` (a dict as JSON; bytes or an iterator as they are) with ``headers(**head)``."""
    data = _json(body) if isinstance(body, dict) else body
    return lambda t: post(t, path, data, headers(**head))


# name -> (the bad client, the statuses it may get)
BAD: dict[str, tuple[Callable[[Target], tuple[int, bytes]], tuple[int, ...]]] = {
    "seed 2**64": (_send({**COMPLETION, "seed": 2**64}), (400,)),
    "seed -1, chat": (_send({**CHAT, "seed": -1}, "/v1/chat/completions"), (400,)),
    "temperature 1.7e-39": (_send({**COMPLETION, "temperature": 1.7e-39}), (400,)),
    "body over the limit": (_send({**COMPLETION, "prompt": "a" * (MAX_BODY + 10)}), (413,)),
    "chunked body over the limit": (lambda t: post(t, "/v1/completions", _chunks(4 * MAX_BODY), headers()), (413,)),
    "malformed JSON": (_send(b'{"prompt": "The'), (400, 422)),
    "cross-site text/plain": (_send(COMPLETION, key=None, content_type="text/plain", Host="evil.example:80"), (421,)),
    "text/plain": (_send(COMPLETION, content_type="text/plain"), (415,)),
    "too many prompts": (_send({**COMPLETION, "prompt": ["hi"] * (MAX_PROMPTS + 1)}), (400,)),
    "too much text": (_send({**COMPLETION, "prompt": "ab " * MAX_CHARS}), (400,)),
    "wrong key": (_send(COMPLETION, key="not-the-key"), (401,)),
}
HANG_UPS: dict[str, dict[str, Any]] = {
    "hang-up, not streamed": {**COMPLETION, "prompt": ["The"] * MAX_PROMPTS, "max_tokens": 64, "temperature": 0},
    "hang-up, streamed": {**COMPLETION, "max_tokens": 64, "stream": True, "n": 4, "temperature": 0.8, "seed": 3},
}


# --------------------------------------------------------------------------------------------- a round
@dataclass
class Round:
    good_failed: list[str] = field(default_factory=list)
    good_unlike: list[str] = field(default_factory=list)
    bad_wrong: list[str] = field(default_factory=list)
    health_max_s: float = 0.0
    cancelled_rows: int = 0
    wall_s: float = 0.0
    rss_ratio: float = 0.0


def wait_idle(target: Target, timeout: float = 120) -> dict[str, Any]:
    """``/health`` once no row is live and nothing waits (polled; raises after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        h = health(target)
        if h["live_rows"] == 0 and h["waiting"] == 0:
            return h
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server did not become idle: {h}")
        time.sleep(0.05)


def references(target: Target) -> list[list[tuple[str, str | None]]]:
    """Each well-behaved request's answer alone, one at a time."""
    return [answer(target, body) for body in good_requests()]


def one_round(target: Target, alone: list[list[tuple[str, str | None]]], timeout: float = 240) -> Round:
    """Every client of a round at once; what went wrong (empty lists: nothing)."""
    result = Round()
    before = wait_idle(target)
    goods = good_requests()
    calls: list[tuple[str, Callable[[], Any]]] = [
        (f"good {i}", lambda b=b: answer(target, b)) for i, b in enumerate(goods)
    ]
    calls += [(name, lambda call=call: call(target)) for name, (call, _) in BAD.items()]
    calls += [(name, lambda b=b: hang_up(target, b, 0.3)) for name, b in HANG_UPS.items()]
    results: dict[str, Any] = {}
    start = threading.Barrier(len(calls) + 1)
    stop = threading.Event()

    def work(name: str, call: Callable[[], Any]) -> None:
        try:
            start.wait(timeout=60)
            results[name] = call()
        except BaseException as err:  # recorded, judged below
            results[name] = err

    def poll_health() -> None:
        start.wait(timeout=60)
        while not stop.is_set():
            t0 = time.perf_counter()
            health(target)
            result.health_max_s = max(result.health_max_s, time.perf_counter() - t0)
            stop.wait(0.05)

    threads = [threading.Thread(target=work, args=c, daemon=True) for c in calls]
    threads.append(threading.Thread(target=poll_health, daemon=True))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads[:-1]:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    result.wall_s = time.perf_counter() - t0
    stop.set()
    threads[-1].join(timeout=10)
    for i, want in enumerate(alone):
        got = results.get(f"good {i}", TimeoutError("no answer in time"))
        if isinstance(got, BaseException):
            result.good_failed.append(f"good {i}: {got!r}")
        elif got != want:
            result.good_unlike.append(f"good {i}: {got!r} alone {want!r}")
    for name, (_, statuses) in BAD.items():
        got = results.get(name, TimeoutError("no answer in time"))
        if isinstance(got, BaseException) or got[0] not in statuses:
            result.bad_wrong.append(f"{name}: {got!r} (wanted {statuses})")
    for name in HANG_UPS:
        got = results.get(name, TimeoutError("did not hang up in time"))
        if isinstance(got, BaseException):
            result.bad_wrong.append(f"{name}: {got!r}")
    after = wait_idle(target)
    result.cancelled_rows = after["cancelled_rows"] - before["cancelled_rows"]
    return result


# ------------------------------------------------------------------------------------------ the server
def rss_kib(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match is not None
    return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "serve"))
    from serve_helpers import start_server, stop_server  # the server tests' own start and stop

    from chat_models import build_chat_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_chat_model(Path(tmp) / "tiny-chat")
        srv = start_server(folder, *SERVE_ARGS, log=Path(tmp) / "stderr.txt")
        try:
            port = int(srv.url.rsplit(":", 1)[1])
            target = Target("127.0.0.1", port)
            alone = references(target)
            one_round(target, alone)  # warm-up: the allocator's pools reach their size under this load
            rss0 = rss_kib(srv.process.pid)
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            print("| round | good failed | good unlike alone | bad without their 4xx | /health max s | rows cancelled "
                  "| RSS after / before | wall s |")  # fmt: skip
            print("|---:|---:|---:|---:|---:|---:|---:|---:|")
            rounds = []
            for k in range(args.rounds):
                r = one_round(target, alone)
                r.rss_ratio = rss_kib(srv.process.pid) / rss0
                rounds.append(r)
                print(f"| {k + 1} | {len(r.good_failed)} | {len(r.good_unlike)} | {len(r.bad_wrong)} | "
                      f"{r.health_max_s:.3f} | {r.cancelled_rows} | {r.rss_ratio:.3f} | {r.wall_s:.1f} |")  # fmt: skip
                for line in r.good_failed + r.good_unlike + r.bad_wrong:
                    print("   ", line)
        finally:
            stop_server(srv.process)
    clean = sum(
        not (r.good_failed or r.good_unlike or r.bad_wrong)
        and r.health_max_s <= HEALTH_LIMIT_S
        and r.rss_ratio <= RSS_LIMIT
        for r in rounds
    )
    print(f"{clean} of {len(rounds)} rounds clean (0 failures, answers as alone, every bad one its 4xx, /health "
          f"<= {HEALTH_LIMIT_S} s, RSS <= {RSS_LIMIT}x); load at the end: {os.getloadavg()[0]:.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rounds], indent=2))
    return 0 if clean == len(rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
