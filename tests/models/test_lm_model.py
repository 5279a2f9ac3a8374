"""The decoder-only language model and the sampling helpers.

(Named test_lm_model.py, not test_lm.py: tests/training/test_lm.py exists and the test folders are
not packages, so two files of the same name would clash.)
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnkit.models import LanguageModel, LanguageModelConfig, build_model
from attnkit.models.generation import check_sampling, sample_next_token, top_k_filter, top_p_filter

POSITIONALS = ("learned", "sinusoidal", "rotary")


def tiny(**kw) -> LanguageModel:
    cfg = dict(vocab_size=23, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0, max_len=24)
    return LanguageModel(LanguageModelConfig(**{**cfg, **kw})).eval()


def ids(batch: int, length: int, vocab: int = 23, seed: int = 0) -> torch.Tensor:
    return torch.randint(4, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- structure
def test_attribute_names_and_registry():
    model = build_model("lm", dict(vocab_size=23, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64))
    assert isinstance(model, LanguageModel)
    assert isinstance(model.token_embedding, torch.nn.Embedding)
    assert type(model.positional).__name__ == "LearnedPositionalEncoding"
    assert isinstance(model.dropout, torch.nn.Dropout)
    assert type(model.decoder).__name__ == "TransformerDecoder"
    assert all(layer.cross_attn is None for layer in model.decoder.layers)
    assert model.decoder.norm is not None  # pre-norm stacks end with a LayerNorm
    assert model.lm_head.bias is None and model.lm_head.out_features == 23
    assert tiny(positional="rotary").positional is None
    assert type(tiny(positional="sinusoidal").positional).__name__ == "SinusoidalPositionalEncoding"


def test_weight_tying_shares_storage_and_can_be_turned_off():
    model = tiny()
    assert model.lm_head.weight is model.token_embedding.weight
    assert model.lm_head.weight.data_ptr() == model.token_embedding.weight.data_ptr()
    with torch.no_grad():
        model.token_embedding.weight[5, 0] = 123.0
    assert model.lm_head.weight[5, 0] == 123.0
    n_tied = sum(p.numel() for p in model.parameters())
    untied = tiny(tie_weights=False)
    assert untied.lm_head.weight is not untied.token_embedding.weight
    assert sum(p.numel() for p in untied.parameters()) == n_tied + 23 * 32
    # the tied model's state dict round-trips and stays tied
    again = tiny()
    again.load_state_dict(model.state_dict())
    assert again.lm_head.weight is again.token_embedding.weight and again.lm_head.weight[5, 0] == 123.0


def test_gpt2_initialisation_gives_near_uniform_first_predictions():
    torch.manual_seed(0)
    model = LanguageModel(LanguageModelConfig(vocab_size=500, d_model=64, num_heads=4, num_layers=2))
    assert model.token_embedding.weight.std().item() == pytest.approx(0.02, rel=0.1)
    x = torch.randint(500, (4, 32))
    loss = F.cross_entropy(model(x).reshape(-1, 500), torch.randint(500, (4 * 32,)))
    assert loss.item() == pytest.approx(math.log(500), abs=0.1)


# ---------------------------------------------------------------------------------------------- forward
@pytest.mark.parametrize("positional", POSITIONALS)
def test_causality(positional):
    model = tiny(positional=positional)
    x = ids(2, 16)
    y = x.clone()
    y[:, 9:] = ids(2, 7, seed=1)
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("positional", POSITIONALS)
def test_cached_logits_match_full_forward(positional):
    model = tiny(positional=positional)
    x = ids(3, 20)
    with torch.no_grad():
        full = model(x)
        cache = model.new_cache()
        chunks = [model(x[:, :5], cache=cache), model(x[:, 5:8], cache=cache)]  # a 3-token chunk after a cache
        chunks += [model(x[:, t : t + 1], cache=cache) for t in range(8, 20)]
    assert cache.length == 20
    assert (torch.cat(chunks, dim=1) - full).abs().max().item() < 1e-5


def test_attention_maps_are_causal_distributions():
    model = tiny(num_layers=3)
    maps = model.get_attention_maps(ids(2, 10))
    assert len(maps) == 3 and all(m.shape == (2, 4, 10, 10) for m in maps)
    for m in maps:
        assert torch.allclose(m.sum(-1), torch.ones(2, 4, 10), atol=1e-5)
        assert m.triu(diagonal=1).abs().max() == 0
    logits, again = model.forward_with_attention(ids(2, 10))
    assert torch.allclose(logits, model(ids(2, 10)), atol=1e-5) and torch.allclose(again[0], maps[0])


def test_key_padding_mask_hides_padded_keys():
    model = tiny()
    x = ids(1, 8)
    padded = torch.cat([x, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[True] * 8 + [False] * 4])
    with torch.no_grad():
        assert torch.allclose(model(padded, mask)[:, :8], model(x), atol=1e-5)


def test_bad_inputs_give_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\)"):
        model(torch.tensor([[1, 2, 23]]))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\)"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"expected token ids \[batch, seq\]"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="context is max_len=24"):
        model(ids(1, 25))
    cache = model.new_cache()
    model(ids(1, 20), cache=cache)
    with pytest.raises(ValueError, match=r"reaches position 25 \(20 cached \+ 5 new"):
        model(ids(1, 5), cache=cache)
    with pytest.raises(ValueError, match="seq >= 1"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0"):
        model.generate(ids(1, 3), -1)
    with pytest.raises(ValueError, match="temperature must be a number >= 0"):
        model.generate(ids(1, 3), 5, temperature=-1.0)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\)"):
        model.generate(torch.tensor([[99]]), 5)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(bos_id=23), r"bos_id \(23\) must be < vocab_size \(23\)"),
        (dict(positional="rotary", d_model=20, num_heads=4), "even head dimension"),
        (dict(num_heads=5), "must divide d_model"),
        (dict(positionnal="learned"), "Extra inputs are not permitted"),
        (dict(positional="xpos"), "'learned', 'sinusoidal', 'rotary' or 'alibi'"),
    ],
)
def test_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        LanguageModelConfig(**{"vocab_size": 23, "d_model": 32, **kw})


# ---------------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("positional", POSITIONALS)
def test_cached_and_uncached_generation_give_identical_tokens(positional):
    model = tiny(positional=positional)
    prompt = ids(3, 4)
    cached = model.generate(prompt, 15, temperature=0.0, stop_at_eos=False)
    uncached = model.generate(prompt, 15, temperature=0.0, stop_at_eos=False, use_cache=False)
    assert cached.shape == (3, 19) and torch.equal(cached, uncached)
    assert torch.equal(cached[:, :4], prompt)
    # greedy really is the argmax of the full forward pass at every step
    with torch.no_grad():
        assert torch.equal(model(cached[:, :-1])[:, 3:].argmax(-1), cached[:, 4:])
    # sampling with the same seed too
    a = model.generate(prompt, 15, top_k=5, generator=torch.Generator().manual_seed(3), stop_at_eos=False)
    b = model.generate(
        prompt, 15, top_k=5, generator=torch.Generator().manual_seed(3), stop_at_eos=False, use_cache=False
    )
    assert torch.equal(a, b)


@pytest.mark.parametrize("positional", POSITIONALS)
def test_generation_past_the_context_slides_a_window(positional):
    model = tiny(positional=positional, max_len=12)
    prompt = ids(2, 16)  # longer than the context already
    out = model.generate(prompt, 20, temperature=0.0, stop_at_eos=False)
    assert out.shape == (2, 36) and torch.equal(out[:, :16], prompt)
    assert torch.equal(out, model.generate(prompt, 20, temperature=0.0, stop_at_eos=False, use_cache=False))
    with torch.no_grad():  # each token is the argmax given the last max_len tokens
        for t in range(16, 36):
            assert torch.equal(model(out[:, t - 12 : t])[:, -1].argmax(-1), out[:, t])
    short = model.generate(ids(1, 3), 20, temperature=0.0, stop_at_eos=False)  # crosses the context mid-way
    assert torch.equal(short, model.generate(ids(1, 3), 20, temperature=0.0, stop_at_eos=False, use_cache=False))


def test_rows_stop_at_eos_and_generation_ends_when_all_have():
    model = tiny(vocab_size=6)
    prompt = torch.ones(4, 1, dtype=torch.long)
    streamed = []
    out = model.generate(
        prompt, 200, temperature=2.0, generator=torch.Generator().manual_seed(0), on_token=streamed.append
    )
    new = out[:, 1:]
    assert len(streamed) == new.shape[1] and torch.equal(torch.stack(streamed, dim=1), new)
    first_eos = [(row == 2).nonzero()[0].item() for row in new]  # every row ended
    for row, k in zip(new, first_eos):
        assert (row[k + 1 :] == 0).all()  # pad after the end
    assert new.shape[1] == max(first_eos) + 1 < 200  # stopped as soon as the last row ended
    assert len(set(first_eos)) > 1
    full = model.generate(prompt, 30, temperature=2.0, generator=torch.Generator().manual_seed(0), stop_at_eos=False)
    assert full.shape == (4, 31)


def test_generation_is_reproducible_and_restores_the_training_mode():
    model = tiny(dropout=0.1).train()
    prompt = ids(2, 3)
    a = model.generate(prompt, 12, generator=torch.Generator().manual_seed(7), stop_at_eos=False)
    b = model.generate(prompt, 12, generator=torch.Generator().manual_seed(7), stop_at_eos=False)
    c = model.generate(prompt, 12, generator=torch.Generator().manual_seed(8), stop_at_eos=False)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert model.training
    assert torch.equal(model.generate(prompt, 0), prompt)


# ---------------------------------------------------------------------------------------------- sampling helpers
def test_top_k_and_top_p_filters():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    kept = top_k_filter(logits, 2).isfinite()
    assert kept.tolist() == [[False, True, True, False], [True, True, True, True]]  # ties at the k-th kept
    assert torch.equal(top_k_filter(logits, 10), logits)
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert top_p_filter(probs.log(), 0.5).isfinite().tolist() == [[True, False, False, False]]
    assert top_p_filter(probs.log(), 0.7).isfinite().tolist() == [[True, True, False, False]]
    assert top_p_filter(probs.log(), 0.81).isfinite().tolist() == [[True, True, True, False]]
    assert top_p_filter(probs.log()[:, [3, 1, 0, 2]], 0.7).isfinite().tolist() == [[False, True, True, False]]
    assert top_p_filter(probs.log(), 0.01).isfinite().sum() == 1  # the most likely token is always kept


def test_sample_next_token():
    logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 5.0]])
    assert sample_next_token(logits, temperature=0.0).tolist() == [1, 0]  # greedy: first of equal maxima
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_next_token(logits[:1], generator=g) for _ in range(3000)]).flatten()
    freq = torch.bincount(draws, minlength=3).float() / 3000
    assert torch.allclose(freq, logits[0].softmax(-1), atol=0.03)
    draws = torch.stack([sample_next_token(logits[:1], top_k=1, generator=g) for _ in range(50)])
    assert (draws == 1).all()
    cold = torch.stack([sample_next_token(logits[:1], temperature=0.05, generator=g) for _ in range(50)])
    assert (cold == 1).all()
    with pytest.raises(ValueError, match=r"logits must be \[batch, vocab\]"):
        sample_next_token(logits[0])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-0.1, None, None), "temperature"),
        ((1.0, 0, None), "top_k"),
        ((1.0, None, 0.0), "top_p"),
        ((1.0, None, 1.5), "top_p"),
    ],
)
def test_check_sampling_errors(args, match):
    with pytest.raises(ValueError, match=match):
        check_sampling(*args)
