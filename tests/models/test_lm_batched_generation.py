"""Batched generation of prompts of different lengths: each row equals generating its prompt alone
(greedy tokens identical, step logits within 1e-5), with and without the cache, for learned, rotary and
ALiBi positions; per-row EOS and stop strings; repetition penalty and min-p as transformers'."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor
from transformers import MinPLogitsWarper, RepetitionPenaltyLogitsProcessor

from attnkit.models.generation import apply_repetition_penalty, left_pad, min_p_filter, sample_next_token
from attnkit.models.lm import LanguageModel, LanguageModelConfig

V = 40
PROMPTS = [[1, 5, 9], [1, 7, 3, 22, 8, 30, 4], [1], [1, 12, 14, 16, 18]]


def _model(positional: str, **kw: object) -> LanguageModel:
    torch.manual_seed(0)
    config = LanguageModelConfig(
        vocab_size=V, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0,
        positional=positional, max_len=kw.pop("max_len", 64), **kw,
    )  # fmt: skip
    model = LanguageModel(config).eval()
    with torch.no_grad():  # larger logits than the N(0, 0.02) init: distinct greedy tokens, no near-ties
        model.token_embedding.weight.mul_(10)
    return model


def _recording(model: LanguageModel) -> list[Tensor]:
    """Record the logits ``[B, V]`` of every generation step."""
    steps: list[Tensor] = []
    inner: Callable[..., Tensor] = model._last_logits

    def record(*args: object) -> Tensor:
        logits = inner(*args)
        steps.append(logits.clone())
        return logits

    model._last_logits = record  # type: ignore[method-assign]
    return steps


@pytest.mark.parametrize(
    "positional, kw",
    [
        ("learned", {}),
        ("rotary", dict(num_kv_heads=2)),
        ("alibi", {}),
        ("sinusoidal", {}),
        ("learned", dict(max_len=12)),  # the batch slides its window before the short rows would
        ("rotary", dict(sliding_window=4, norm="rmsnorm", activation="swiglu")),
    ],
)
@pytest.mark.parametrize("use_cache", [True, False])
def test_each_row_equals_generating_it_alone(positional: str, kw: dict, use_cache: bool) -> None:
    model = _model(positional, **kw)
    n = 10
    options = dict(temperature=0.0, stop_at_eos=False, use_cache=use_cache, repetition_penalty=1.3)
    steps = _recording(model)
    batched = model.generate(PROMPTS, n, **options)
    batch_steps = list(steps)
    width = max(map(len, PROMPTS))
    assert batched.shape == (len(PROMPTS), width + n)
    for i, prompt in enumerate(PROMPTS):
        assert batched[i, : width - len(prompt)].eq(model.config.pad_id).all()
        assert batched[i, width - len(prompt) : width].tolist() == prompt
        steps.clear()
        alone = model.generate([prompt], n, **options)
        assert batched[i, width:].tolist() == alone[0, len(prompt) :].tolist()
        assert len(steps) == len(batch_steps) == n
        for s in range(n):
            torch.testing.assert_close(batch_steps[s][i], steps[s][0], atol=1e-5, rtol=0)


def test_batched_cached_equals_uncached_and_eos_per_row() -> None:
    model = _model("rotary")
    free = model.generate(PROMPTS, 8, temperature=0.0, stop_at_eos=False)
    width = max(map(len, PROMPTS))
    eos = int(free[0, width + 2])  # row 0's third new token
    model.config.eos_id = eos
    for use_cache in (True, False):
        out = model.generate(PROMPTS, 8, temperature=0.0, use_cache=use_cache)
        for i, prompt in enumerate(PROMPTS):
            alone = model.generate([prompt], 8, temperature=0.0, use_cache=use_cache)[0, len(prompt) :].tolist()
            row = out[i, width:].tolist()
            assert row[: len(alone)] == alone and all(t == model.config.pad_id for t in row[len(alone) :])
        first = free[0, width:].tolist().index(eos)  # row 0 stops at its first eos, the others go on
        assert out[0, width + first] == eos and out[0, width + first + 1 :].eq(model.config.pad_id).all()
        assert out[1:, width:].ne(model.config.pad_id).any()


def test_stop_strings_stop_a_row() -> None:
    model = _model("learned")

    def decode(ids: list[int]) -> str:
        return "".join(chr(ord("A") + t) for t in ids)

    free = model.generate(PROMPTS, 8, temperature=0.0, stop_at_eos=False)
    width = max(map(len, PROMPTS))
    stop = decode(free[1, width + 2 : width + 4].tolist())  # row 1's 3rd and 4th new tokens
    out = model.generate(PROMPTS, 8, temperature=0.0, stop_at_eos=False, stop_strings=[stop], decode=decode)
    for i in range(len(PROMPTS)):
        text = decode(free[i, width:].tolist())
        if stop in text:  # stops right after the token that completes the stop string
            cut = text.index(stop) + len(stop)
            assert out[i, width : width + cut].tolist() == free[i, width : width + cut].tolist()
            assert out[i, width + cut :].eq(model.config.pad_id).all()
        else:
            assert out[i, width:].tolist() == free[i, width:].tolist()
    with pytest.raises(ValueError, match="stop_strings need `decode`"):
        model.generate(PROMPTS, 2, stop_strings=["x"])


def test_repetition_penalty_matches_transformers() -> None:
    logits = torch.randn(3, V) * 3
    ids = torch.randint(0, V, (3, 6))
    seen = torch.zeros(3, V, dtype=torch.bool).scatter_(1, ids, True)
    expected = RepetitionPenaltyLogitsProcessor(1.7)(ids, logits.clone())
    torch.testing.assert_close(apply_repetition_penalty(logits, seen, 1.7), expected)


def test_repetition_penalty_counts_prompt_and_new_tokens_not_padding() -> None:
    model = _model("learned")
    out = model.generate([[1, 5, 5], [1]], 12, temperature=0.0, stop_at_eos=False, repetition_penalty=1e6)
    new = out[0, 3:].tolist()
    assert len(set(new)) == 12 and not {1, 5} & set(new)  # prompt tokens count as seen
    assert len(set(out[1, 2:].tolist())) == 13  # prompt + 12 new, no repeats; the padding is not "seen"


@pytest.mark.parametrize("min_p", [0.05, 0.3])
def test_min_p_matches_transformers(min_p: float) -> None:
    logits = torch.randn(4, V) * 2
    expected = MinPLogitsWarper(min_p)(torch.zeros(4, 1, dtype=torch.long), logits.clone())
    assert torch.equal(min_p_filter(logits, min_p).isinf(), expected.isinf())
    g = torch.Generator().manual_seed(0)
    tokens = sample_next_token(logits.repeat(50, 1), temperature=1.0, min_p=min_p, generator=g)
    assert not min_p_filter(logits, min_p).repeat(50, 1).gather(1, tokens[:, None]).isinf().any()


def test_left_pad_and_padding_errors() -> None:
    ids, mask = left_pad([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]] and mask.tolist() == [[True] * 3, [False, False, True]]
    model = _model("learned")
    with pytest.raises(ValueError, match="must be left-padded"):
        model.generate(ids, 2, padding_mask=torch.tensor([[True] * 3, [True, False, False]]))
    with pytest.raises(ValueError, match=r"prompt\(s\) \[1\] are empty"):
        model.generate([[1], []], 2)
    with pytest.raises(ValueError, match="repetition_penalty must be a number > 0"):
        model.generate([[1]], 2, repetition_penalty=0)
    with pytest.raises(ValueError, match=r"min_p must be None or a number in \[0, 1\]"):
        model.generate([[1]], 2, min_p=1.5)
    # a tensor with its padding mask gives what the list gives
    lists = model.generate([[1, 2, 3], [4]], 5, temperature=0.0, stop_at_eos=False)
    assert torch.equal(model.generate(ids, 5, padding_mask=mask, temperature=0.0, stop_at_eos=False), lists)
