"""The engine's prefix cache: requests whose prompts share a long prefix (a system prompt) get the tokens they
get without the cache, alone or batched, greedy or seeded; the shared blocks are prefilled once (hits and reused
tokens counted); echo requests fill it but never read it; memory stays under its bound."""

from __future__ import annotations

from typing import Any

from test_engine import Collector, run

from attnkit.models.generation.prefix_cache import PrefixCache
from attnkit.serve import Engine, SamplingParams

SYSTEM = "You are a careful assistant. Answer briefly and plainly. "


def _texts(engine: Engine, prompts: list[list[int]], params: SamplingParams, together: bool) -> list[dict[int, str]]:
    if not together:
        return [run(engine, p, params).texts for p in prompts]
    sinks = [Collector() for _ in prompts]
    for p, sink in zip(prompts, sinks):
        engine.submit(p, params, sink)
    return [sink.wait(params.n).texts for sink in sinks]


def test_a_shared_prefix_gives_the_same_tokens_and_is_prefilled_once(pretrained: Any) -> None:
    prompts = [pretrained.encode_prompt(SYSTEM + q) for q in ("The old owl", "It was late.", "The big dog sat")]
    assert min(map(len, prompts)) > 24 and max(map(len, prompts)) + 16 < 128
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    seeded = SamplingParams(max_tokens=16, temperature=0.9, top_k=20, seed=11, n=2)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as plain:
        want = {(p, t): _texts(plain, prompts, p, t) for p in (greedy, seeded) for t in (False, True)}
        assert "prefix_hits" not in plain.stats()
    cache = PrefixCache(64 * 2**20, block=8)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[], prefix_cache=cache) as cached:
        for (params, together), texts in want.items():
            assert _texts(cached, prompts, params, together) == texts, (params, together)
        stats = cached.stats()
    assert stats["prefix_hits"] > 0 and stats["prefix_reused_tokens"] >= 8 * stats["prefix_hits"]
    assert stats["prefix_entries"] >= 1 and 0 < stats["prefix_bytes"] <= 64 * 2**20


def test_echo_requests_fill_the_cache_exactly_but_never_read_it(pretrained: Any) -> None:
    """An echo (the prompt's log-probabilities) scores every prompt position, and the cache holds keys and values,
    not logits: it never looks the cache up. Its prefill's keys and values are those of any prefill (which
    positions' logits are computed changes none of them), so it fills the cache, and a request after it gets the
    tokens it gets without a cache, from the echo's blocks."""
    prompt = pretrained.encode_prompt(SYSTEM + "The old owl")
    cache = PrefixCache(64 * 2**20, block=8)
    echo = SamplingParams(max_tokens=0, logprobs=1)
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as plain:
        want = run(plain, prompt, greedy).texts
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[], prefix_cache=cache) as engine:
        done = Collector()
        engine.submit(prompt, echo, done, prompt_logprobs=True)
        done.wait()
        assert len(cache) == 1 and cache.hits == cache.misses == 0  # filled, never looked up
        assert run(engine, prompt, greedy).texts == want
        assert cache.hits == 1 and cache.reused_tokens == (len(prompt) - 1) // 8 * 8
        done = Collector()
        engine.submit(prompt, echo, done, prompt_logprobs=True)
        done.wait()
        assert cache.hits == 1 and cache.misses == 0  # the echo scored every position itself


def test_memory_stays_under_the_bound(pretrained: Any) -> None:
    texts = [f"{i} " + SYSTEM for i in range(6)]  # no two share a first block
    cache = PrefixCache(2**20, block=8)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[], prefix_cache=cache) as engine:
        for text in texts:
            run(engine, pretrained.encode_prompt(text), SamplingParams(max_tokens=2, temperature=0.0))
            assert cache.nbytes <= 2**20
    one = cache.nbytes // max(1, len(cache))
    assert one * 6 > 2**20 or cache.evictions == 0  # evicted exactly when six would not fit
    assert (cache.evictions > 0) == (one * 6 > 2**20)
