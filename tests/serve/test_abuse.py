"""Load and abuse of the real server (``benchmarks/serve_abuse.py``'s round, once): 16 well-behaved clients
(streamed and not, greedy and seeded) and the bad ones (out-of-range sampling parameters, oversized bodies
with and without a Content-Length, malformed JSON, a cross-site request, too many prompts, too much text, a
wrong key, two clients that hang up) at once on 127.0.0.1. No well-behaved request fails, each answer
equals its answer alone, every bad request gets its 4xx, ``/health`` stays fast and the server's memory
returns to within 10 % of its level before."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import Server, start_server, stop_server

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import serve_abuse as abuse  # noqa: E402 -- the benchmark's own round


@pytest.fixture(scope="module")
def limited(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("abuse-log") / "stderr.txt"
    srv = start_server(model_dir, *abuse.SERVE_ARGS, log=log)
    try:
        yield srv
    finally:
        stop_server(srv.process)


def test_bad_clients_never_fail_good_ones_and_memory_returns(limited: Server) -> None:
    target = abuse.Target("127.0.0.1", int(limited.url.rsplit(":", 1)[1]))
    alone = abuse.references(target)
    assert all(reason in ("stop", "length") for choices in alone for _, reason in choices)
    warm = abuse.one_round(target, alone)  # the allocator's pools reach their size under this load
    assert not (warm.good_failed or warm.good_unlike or warm.bad_wrong), warm
    before = limited.rss_kib()
    got = abuse.one_round(target, alone)
    assert got.good_failed == [] and got.good_unlike == [], got
    assert got.bad_wrong == [], got
    assert got.health_max_s <= abuse.HEALTH_LIMIT_S, got
    after = limited.rss_kib()
    assert after <= abuse.RSS_LIMIT * before, f"RSS {before} KiB before the round, {after} KiB after"
