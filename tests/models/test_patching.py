"""Activation patching (attnkit.models.patching) and head scores (attnkit.models.heads): patching every position
is the clean run and none the corrupted run, bit for bit; the batched sweeps equal one run per cell done with plain
hooks; zero and mean ablation; heads made previous-token, duplicate-token and induction heads by a pattern hook
score 1 there and low elsewhere."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from attnkit.models.heads import head_scores, repeated_tokens
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.patching import (
    ablate_heads,
    logit_diff,
    patch_heads,
    patch_residual,
    run_patched,
    target_logprob,
)
from attnkit.nn.hooks import HookPoint, hooks, run_with_cache


def _lm(**kw: object) -> LanguageModel:
    torch.manual_seed(0)
    base: dict[str, object] = dict(vocab_size=40, d_model=32, num_heads=4, num_layers=2, dim_feedforward=48, max_len=48)
    return LanguageModel(LanguageModelConfig(**(base | kw))).eval()


def _pair(length: int = 7, where: int = 3) -> tuple[Tensor, Tensor]:
    clean = torch.randint(3, 40, (1, length))
    corrupted = clean.clone()
    corrupted[0, where] = 3 + (int(clean[0, where]) - 3 + 11) % 37  # another token at one position
    return clean, corrupted


def test_patching_every_position_is_the_clean_run_and_none_the_corrupted_run() -> None:
    model = _lm()
    clean, corrupted = _pair()
    with torch.no_grad():
        clean_logits, corrupted_logits = model(clean), model(corrupted)
    for layer in range(2):
        assert torch.equal(run_patched(model, clean, corrupted, layer), clean_logits)
        assert torch.equal(run_patched(model, clean, corrupted, layer, []), corrupted_logits)
    assert not torch.equal(run_patched(model, clean, corrupted, 1, [3]), corrupted_logits)
    # Only position 3 differs: patching it at layer 0 restores the clean run (1), any other position changes nothing.
    result = patch_residual(model, clean, corrupted, logit_diff(5, 6), chunk_size=5)
    torch.testing.assert_close(result.scores[0], (torch.arange(7) == 3).float(), atol=1e-5, rtol=0)
    assert result.scores.shape == (2, 7)


def _loop(model: LanguageModel, corrupted: Tensor, cells: list[tuple[str, object]], metric) -> Tensor:
    """One forward pass per cell with plain hooks: the reference for the batched sweeps."""
    out = []
    for name, fn in cells:
        with torch.no_grad(), hooks(model, {name: fn}):
            out.append(metric(model(corrupted)).mean())
    return torch.stack(out)


def test_batched_sweeps_equal_one_cell_per_forward_pass() -> None:
    model = _lm(positional="rotary", norm="rmsnorm", activation="swiglu", num_kv_heads=2)
    clean, corrupted = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 6))
    metric = target_logprob(7)
    result = patch_residual(model, clean, corrupted, metric, chunk_size=5)  # chunks span layers, the last one short
    cache = run_with_cache(model, clean)

    def resid(layer: int, pos: int):
        def fn(x: Tensor, hook: HookPoint) -> Tensor:
            x = x.clone()
            x[:, pos] = cache[f"blocks.{layer}.hook_resid_pre"][:, pos]
            return x

        return fn

    cells = [(f"blocks.{lay}.hook_resid_pre", resid(lay, p)) for lay in range(2) for p in range(6)]
    torch.testing.assert_close(result.raw.flatten(), _loop(model, corrupted, cells, metric), atol=1e-5, rtol=0)
    with torch.no_grad():
        clean_m, corrupted_m = metric(model(clean)).mean(), metric(model(corrupted)).mean()
    torch.testing.assert_close(result.scores, (result.raw - corrupted_m) / (clean_m - corrupted_m))

    def head(layer: int, h: int):
        def fn(z: Tensor, hook: HookPoint) -> Tensor:
            z = z.clone()
            z[:, :, h] = cache[f"blocks.{layer}.attn.hook_z"][:, :, h]
            return z

        return fn

    heads = patch_heads(model, clean, corrupted, metric, chunk_size=3)
    cells = [(f"blocks.{lay}.attn.hook_z", head(lay, h)) for lay in range(2) for h in range(4)]
    torch.testing.assert_close(heads.raw.flatten(), _loop(model, corrupted, cells, metric), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        patch_heads(model, clean, corrupted, metric, chunk_size=1).raw, heads.raw, atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("how", ["zero", "mean"])
def test_zero_and_mean_ablation_of_each_head(how: str) -> None:
    model = _lm()
    ids = torch.randint(3, 40, (3, 5))
    metric = logit_diff(4, 9)
    cache = run_with_cache(model, ids)

    def ablate(layer: int, h: int):
        def fn(z: Tensor, hook: HookPoint) -> Tensor:
            z = z.clone()
            mean = cache[f"blocks.{layer}.attn.hook_z"][:, :, h].mean(dim=(0, 1))
            z[:, :, h] = 0.0 if how == "zero" else mean
            return z

        return fn

    result = ablate_heads(model, ids, metric, how=how, chunk_size=3)  # type: ignore[arg-type]  # both literals
    cells = [(f"blocks.{lay}.attn.hook_z", ablate(lay, h)) for lay in range(2) for h in range(4)]
    torch.testing.assert_close(result.raw.flatten(), _loop(model, ids, cells, metric), atol=1e-5, rtol=0)
    with torch.no_grad():
        assert result.base == pytest.approx(float(metric(model(ids)).mean()), abs=1e-6)
    assert float(result.effect.abs().max()) > 1e-3


def test_patching_errors_say_what_was_wrong() -> None:
    model = _lm()
    with pytest.raises(ValueError, match="clean has 5 tokens, corrupted 6"):
        patch_residual(model, torch.randint(3, 40, (1, 5)), torch.randint(3, 40, (1, 6)), logit_diff(1, 2))
    clean, corrupted = _pair()
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
        patch_heads(model, clean, corrupted, logit_diff(1, 2), chunk_size=0)
    with pytest.raises(ValueError, match="same metric"):
        patch_heads(model, clean, clean, logit_diff(1, 2))
    with pytest.raises(ValueError, match=r"layers \[5\] out of range"):
        patch_residual(model, clean, corrupted, logit_diff(1, 2), layers=[5])
    with pytest.raises(ValueError, match="how must be 'zero' or 'mean'"):
        ablate_heads(model, clean, logit_diff(1, 2), how="one")  # type: ignore[arg-type]  # the wrong value tested
    with pytest.raises(TypeError, match="decoder-only LanguageModel"):
        head_scores(torch.nn.Linear(2, 2))


def _attend(tokens: Tensor, rule: str) -> Tensor:
    """A pattern ``[B, T, T]`` that follows ``rule`` from the tokens alone (uniform over the matching earlier
    positions, else position 0): the previous position, the earlier copies of the token, or the positions after them."""
    batch, length = tokens.shape
    pattern = torch.zeros(batch, length, length)
    for b in range(batch):
        for i in range(length):
            if rule == "previous":
                src = [i - 1] if i else [0]
            elif rule == "duplicate":
                src = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
            else:  # induction
                src = [j for j in range(1, i) if tokens[b, j - 1] == tokens[b, i]]
            pattern[b, i, src or [0]] = 1.0 / max(1, len(src))
    return pattern


def test_heads_made_previous_duplicate_and_induction_heads_score_there_and_low_elsewhere() -> None:
    model = _lm(vocab_size=64, num_heads=2)
    length, batch = 10, 3
    config = model.config
    tokens = repeated_tokens(64, length, batch, seed=5, bos=config.bos_id, avoid=(config.pad_id, config.eos_id))
    made = {
        (0, 0): _attend(tokens, "previous"),
        (1, 0): _attend(tokens, "duplicate"),
        (1, 1): _attend(tokens, "induction"),
    }

    def set_head(layer: int):
        def fn(pattern: Tensor, hook: HookPoint) -> Tensor:
            pattern = pattern.clone()
            for (lay, h), p in made.items():
                if lay == layer:
                    pattern[:, h] = p
            return pattern

        return fn

    untrained = head_scores(model, length=length, batch=batch, seed=5)
    assert torch.equal(untrained.tokens, tokens)
    with hooks(model, {"blocks.0.attn.hook_pattern": set_head(0), "blocks.1.attn.hook_pattern": set_head(1)}):
        scores = head_scores(model, length=length, batch=batch, seed=5)
    for kind, (layer, head) in (("previous_token", (0, 0)), ("duplicate_token", (1, 0)), ("induction", (1, 1))):
        values = getattr(scores, kind)
        assert values[layer, head] >= 0.9, (kind, values)
        others = values.clone()
        others[layer, head] = 0
        assert float(others.max()) < 0.3, (kind, values)  # the untouched head (0, 1) and the other kinds' heads
        assert float(getattr(untrained, kind).max()) < 0.3, (kind, getattr(untrained, kind))
    with pytest.raises(ValueError, match="exceed the model's context of 48"):
        head_scores(model, length=30)
