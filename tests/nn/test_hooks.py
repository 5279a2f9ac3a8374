"""Hook points (attnkit.nn.hooks): names, run_with_cache, hooks() that read and replace, identity hooks that
change nothing bit for bit, hooks inside batched cached generation, and the logit lens / attribution."""

from __future__ import annotations

import pytest
import torch

from attnkit.models.encoders import ClassifierConfig, SequenceClassifier
from attnkit.models.lens import logit_attribution, logit_lens
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.nn.hooks import hook_points, hooks, run_with_cache

SCORES = ("hook_attn_scores", "hook_pattern")


def _lm(**kw: object) -> LanguageModel:
    torch.manual_seed(0)
    base: dict[str, object] = dict(vocab_size=40, d_model=32, num_heads=4, num_layers=2, dim_feedforward=48, max_len=32)
    return LanguageModel(LanguageModelConfig(**(base | kw))).eval()


LLAMA = dict(positional="rotary", norm="rmsnorm", activation="swiglu", num_kv_heads=2, bias=False, tie_weights=False)


def test_names_follow_transformer_lens_and_filters_pick_them() -> None:
    model = _lm()
    names = list(hook_points(model))
    for name in ("hook_embed", "hook_pos_embed", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_pattern",
                 "blocks.1.mlp.hook_post", "blocks.1.hook_resid_post", "ln_final.hook_out"):  # fmt: skip
        assert name in names
    assert list(hook_points(model, "blocks.*.attn.hook_z")) == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    assert list(hook_points(model, lambda n: n.endswith("resid_mid"))) == [
        "blocks.0.hook_resid_mid",
        "blocks.1.hook_resid_mid",
    ]
    assert "hook_pos_embed" not in hook_points(_lm(**LLAMA))  # rotary: no position embedding to hook
    with pytest.raises(ValueError, match=r"no hook point is named 'blocks.0.hook_resid_pr'.*blocks.0.hook_resid_pre"):
        hook_points(model, "blocks.0.hook_resid_pr")
    seq = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, num_heads=2,
                                           num_layers=1, dim_feedforward=16))  # fmt: skip
    seq_names = list(hook_points(seq))
    clf = SequenceClassifier(ClassifierConfig(vocab_size=20, num_classes=2, d_model=16, num_heads=2, num_layers=1,
                                              dim_feedforward=16, pooling="cls")).eval()  # fmt: skip
    cache = run_with_cache(clf, torch.randint(1, 20, (2, 5)), names=["hook_embed", "blocks.0.attn.hook_pattern"])
    assert cache["hook_embed"].shape == (2, 6, 16) and cache["blocks.0.attn.hook_pattern"].shape == (2, 2, 6, 6)
    assert "encoder.blocks.0.attn.hook_pattern" in seq_names and "decoder.blocks.0.cross_attn.hook_pattern" in seq_names


@pytest.mark.parametrize("kind", [{}, LLAMA])
def test_cache_is_the_forward_pass_and_identity_hooks_change_nothing_bit_for_bit(kind: dict[str, object]) -> None:
    model = _lm(**kind)
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        ref = model(ids)
        explicit, maps = model.forward_with_attention(ids)  # the explicit attention path, with the weights
    same = [(lambda n: not n.endswith(SCORES), lambda x, h: x.clone())]
    with torch.no_grad(), hooks(model, same):
        assert torch.equal(model(ids), ref)  # no scores/pattern hooked: the fused kernel, bit for bit
    with torch.no_grad(), hooks(model, {"*": lambda x, h: x.clone()}) as used:
        assert torch.equal(model(ids), explicit)  # pattern hooked: the explicit path, bit for bit
    assert len(used) == len(hook_points(model))
    assert all(not point.fns for point in hook_points(model).values())  # removed on exit
    cache = run_with_cache(model, ids, names=["blocks.*.attn.hook_pattern", "blocks.1.hook_resid_post"])
    assert list(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern", "blocks.1.hook_resid_post"]
    torch.testing.assert_close(cache.logits, ref)
    for i, weights in enumerate(maps):
        assert torch.equal(cache[f"blocks.{i}.attn.hook_pattern"], weights)
    assert bool((cache["blocks.0.attn.hook_pattern"].triu(1) == 0).all())  # causal, also from a fused-kernel stack


def test_a_hook_replaces_an_activation() -> None:
    model = _lm()
    ids = torch.randint(0, 40, (1, 6))
    with torch.no_grad(), hooks(model, {"blocks.1.hook_resid_post": lambda x, h: torch.zeros_like(x)}):
        out = model(ids)
    bias = model.decoder.norm.bias
    torch.testing.assert_close(out, model.lm_head(bias).expand_as(out))  # norm(0) = its bias
    seen: list[tuple[int, ...]] = []
    with torch.no_grad(), hooks(model, {"blocks.0.attn.hook_v": lambda x, h: seen.append(tuple(x.shape))}):
        model(ids)
    assert seen == [(1, 6, 4, 8)]  # [B, T, H, head_dim]
    wrong = {"blocks.0.hook_mlp_out": lambda x, h: torch.zeros(3)}
    with (
        pytest.raises(ValueError, match=r"hook on blocks.0.hook_mlp_out returned \(3,\).*\(1, 6, 32\)"),
        hooks(model, wrong),
    ):
        model(ids)


@pytest.mark.parametrize("kind", [{}, LLAMA])
def test_hooks_inside_batched_cached_generation_see_the_full_forward_pass(kind: dict[str, object]) -> None:
    model = _lm(**kind)
    prompts = [[3, 7, 1, 9, 2], [5, 6]]
    names = ["blocks.1.hook_resid_post", "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_k"]
    steps: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    with hooks(model, [(names, lambda x, h: steps[h.name].append(x.clone()))]):
        out = model.generate(prompts, 4, temperature=0.0, stop_at_eos=False)
    real = torch.tensor([[True] * 9, [False] * 3 + [True] * 6])
    full = run_with_cache(model, out[:, :-1], real[:, :-1], names=names)  # the last token is never fed back
    for name in ("blocks.1.hook_resid_post", "blocks.1.attn.hook_k"):
        got = torch.cat(steps[name], dim=1)  # the prompt, then one position per step
        torch.testing.assert_close(got[real[:, :-1]], full[name][real[:, :-1]], atol=1e-5, rtol=1e-5)
    patterns = steps["blocks.0.attn.hook_pattern"]
    assert patterns[0].shape[-2:] == (5, 5) and patterns[-1].shape[-2:] == (1, 8)
    last = full["blocks.0.attn.hook_pattern"][:, :, -1:, :]
    torch.testing.assert_close(patterns[-1], last, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", [{}, LLAMA])
def test_logit_lens_at_the_last_layer_is_the_logits_and_attribution_adds_up(kind: dict[str, object]) -> None:
    model = _lm(**kind)
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        logits = model(ids)
    lens = logit_lens(model, ids)
    assert lens.logits.shape == (3, 2, 7, 40) and lens.names[-1] == "blocks.1.hook_resid_post"
    torch.testing.assert_close(lens.logits[-1], logits, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(lens.logits[0], logits, atol=1e-2)  # the embeddings alone predict otherwise
    probs, top = lens.top(2)
    assert top.shape == (3, 2, 7, 2) and bool((probs[..., 0] >= probs[..., 1]).all())
    nxt = logits.argmax(-1)
    torch.testing.assert_close(lens.target_probs(nxt)[-1], logits.softmax(-1).max(-1).values)
    att = logit_attribution(model, ids, nxt, against=0)
    assert att.heads.shape == (2, 7, 2, 4) and att.mlps.shape == (2, 7, 2)
    parts = att.heads.sum((-1, -2)) + att.mlps.sum(-1) + att.embed + att.rest
    torch.testing.assert_close(parts, logits.gather(-1, nxt[..., None])[..., 0] - logits[..., 0], atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"target must be one token id or \[B, T\]"):
        logit_attribution(model, ids, torch.zeros(3, dtype=torch.long))
