"""The prefix cache (attnkit.models.generation.PrefixCache): a prompt that starts like a cached one prefills only
its rest, with the same logits and tokens as a full prefill; memory stays under its bound; a prefix is reused only
for a prompt that truly starts with it."""

from __future__ import annotations

import pytest
import torch

from attnkit.models.generation.prefix_cache import PrefixCache
from attnkit.models.lm import LanguageModel, LanguageModelConfig


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    torch.manual_seed(0)
    config = LanguageModelConfig(
        vocab_size=64, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, dim_feedforward=64, dropout=0.0,
        positional="rotary", max_len=256,
    )  # fmt: skip
    return LanguageModel(config).eval()


def _prefill(model: LanguageModel, ids: list[int], pc: PrefixCache | None = None) -> tuple[torch.Tensor, object]:
    cache = model.new_cache()
    start = 0
    if pc is not None:
        hit = pc.lookup(ids)
        pc.restore(hit, cache)
        start = hit.length
    with torch.inference_mode():
        logits = model(torch.tensor([ids[start:]]), cache=cache)[:, -1]
    return logits, cache


def _greedy(model: LanguageModel, ids: list[int], steps: int, pc: PrefixCache | None = None) -> list[int]:
    logits, cache = _prefill(model, ids, pc)
    out = []
    with torch.inference_mode():
        for _ in range(steps):
            token = int(logits.argmax())
            out.append(token)
            logits = model(torch.tensor([[token]]), cache=cache)[:, -1]  # type: ignore[arg-type]
    return out


def test_a_shared_prefix_is_prefilled_once_with_the_same_logits_and_tokens(model: LanguageModel) -> None:
    g = torch.Generator().manual_seed(1)
    system = torch.randint(1, 64, (45,), generator=g).tolist()
    first = [*system, 5, 6, 7]
    second = [*system, 9, 10, 11, 12]
    pc = PrefixCache(10**8, block=16)
    _, cache = _prefill(model, first, pc)  # a miss
    assert pc.stats()["misses"] == 1 and pc.stats()["hits"] == 0
    assert pc.store(first, cache)
    assert len(pc) == 1 and pc.nbytes > 0
    hit = pc.lookup(second)
    assert hit.length == 32  # 45 shared tokens: two whole blocks of 16
    cached_logits, _ = _prefill(model, second, pc)
    full_logits, _ = _prefill(model, second)
    torch.testing.assert_close(cached_logits, full_logits, atol=1e-5, rtol=0)
    assert _greedy(model, second, 20, pc) == _greedy(model, second, 20)
    assert pc.stats()["hits"] == 3 and pc.stats()["reused_tokens"] == 96


def test_one_token_is_always_left_to_prefill(model: LanguageModel) -> None:
    ids = list(range(1, 33))  # exactly two blocks: only the first may come from the cache
    pc = PrefixCache(10**8, block=16)
    _, cache = _prefill(model, ids)
    pc.store(ids, cache)
    assert pc.lookup(ids).length == 16
    assert pc.lookup(ids[:16]).length == 0  # 16 tokens: no whole block leaves one over
    assert not pc.store(ids[:10], cache)  # shorter than a block and a token: nothing to keep


def test_a_prompt_already_covered_is_not_stored_twice(model: LanguageModel) -> None:
    ids = list(range(1, 41))
    pc = PrefixCache(10**8, block=8)
    _, cache = _prefill(model, ids)
    assert pc.store(ids, cache)
    assert not pc.store(ids, cache)
    assert len(pc) == 1


def test_memory_stays_under_the_bound_and_the_oldest_prompt_goes_first(model: LanguageModel) -> None:
    prompts = [[p] * 1 + list(range(2, 40)) for p in (50, 51, 52)]  # differ in their first token: no sharing
    pc0 = PrefixCache(10**8, block=8)
    _, cache = _prefill(model, prompts[0])
    pc0.store(prompts[0], cache)
    one = pc0.nbytes
    pc = PrefixCache(2 * one, block=8)
    for ids in prompts:
        _, cache = _prefill(model, ids)
        assert pc.store(ids, cache)
        assert pc.nbytes <= 2 * one
    assert len(pc) == 2 and pc.evictions == 1
    assert pc.lookup(prompts[0]).length == 0  # evicted
    assert pc.lookup(prompts[2]).length == 32
    too_small = PrefixCache(one - 1, block=8)
    _, cache = _prefill(model, prompts[0])
    assert not too_small.store(prompts[0], cache)  # one prompt's blocks exceed the bound: not kept
    assert len(too_small) == 0 and too_small.nbytes == 0


def test_a_recently_used_prompt_outlives_an_older_one(model: LanguageModel) -> None:
    prompts = [[p, *list(range(2, 40))] for p in (50, 51, 52)]
    pc = PrefixCache(10**8, block=8)
    for ids in prompts[:2]:
        _, cache = _prefill(model, ids)
        pc.store(ids, cache)
    pc.max_bytes = pc.nbytes  # full
    assert pc.lookup(prompts[0]).length == 32  # prompts[0] is now the most recently used
    _, cache = _prefill(model, prompts[2])
    pc.store(prompts[2], cache)
    assert pc.lookup(prompts[0]).length == 32
    assert pc.lookup(prompts[1]).length == 0


def test_a_hash_collision_never_reuses_another_prompts_prefix(
    model: LanguageModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    pc = PrefixCache(10**8, block=8)
    ids = list(range(1, 30))
    _, cache = _prefill(model, ids)
    pc.store(ids, cache)
    other = [63, *ids[1:]]
    monkeypatch.setattr(pc, "_boundaries", lambda prompt, blocks: [key for key in pc._index][:blocks])
    assert pc.lookup(other).length == 0  # the keys match, the tokens do not


def test_a_prefix_of_a_left_padded_row_is_read_past_its_padding(model: LanguageModel) -> None:
    short, long = list(range(1, 30)), list(range(1, 45))
    ids = torch.zeros(2, 44, dtype=torch.long)
    mask = torch.zeros(2, 44, dtype=torch.bool)
    ids[0, 44 - 29 :], mask[0, 44 - 29 :] = torch.tensor(short), True
    ids[1], mask[1] = torch.tensor(long), True
    cache = model.new_cache()
    with torch.inference_mode():
        model(ids, mask, cache=cache)
    pc = PrefixCache(10**8, block=8)
    assert pc.store(short, cache, row=0, start=44 - 29)
    cached_logits, _ = _prefill(model, [*short, 3, 4], pc)
    full_logits, _ = _prefill(model, [*short, 3, 4])
    torch.testing.assert_close(cached_logits, full_logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_wrong_bounds_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block"):
        PrefixCache(10, block=bad if bad != -1 else 0)  # type: ignore[arg-type]
