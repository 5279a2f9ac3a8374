"""Positional encodings: behaviour that mutation testing (tools/mutation.py) found the other tests did not pin
down (per-row positions, the table's growth, devices and dtypes, defaults, argument checks and messages).

The ``meta`` device stands in for an accelerator: a tensor built on the CPU where the input lives elsewhere fails.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from attnkit.nn.positional import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    rope_inv_freq,
    sinusoidal_encoding,
)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_positions_per_row_add_each_rows_own_encoding(kind: str) -> None:
    enc = SinusoidalPositionalEncoding(8, max_len=16) if kind == "sinusoidal" else LearnedPositionalEncoding(8, 6)
    x = torch.randn(2, 4, 8)
    positions = torch.tensor([[0, 0, 1, 2], [2, 3, 4, 5]])  # a left-padded row, and one starting at 2
    expected = torch.stack([x[0] + enc(torch.zeros(1, 6, 8))[0][positions[0]], x[1] + enc(torch.zeros(1, 6, 8))[0][2:]])
    torch.testing.assert_close(enc(x, positions=positions), expected)
    empty = torch.zeros(2, 0, 8)
    assert enc(empty, positions=torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 8)


def test_learned_positions_may_reach_max_len_but_not_beyond() -> None:
    enc = LearnedPositionalEncoding(8, 6)
    enc(torch.zeros(1, 6, 8))
    enc(torch.zeros(1, 2, 8), positions=torch.tensor([[4, 5]]))
    message = re.escape("positions reach 7 but the learned positional encoding has max_len=6; truncate the input or")
    with pytest.raises(ValueError, match=message):
        enc(torch.zeros(1, 2, 8), positions=torch.tensor([[5, 6]]))
    message = re.escape("sequence reaches position 7 but the learned positional encoding has max_len=6; truncate")
    with pytest.raises(ValueError, match=message + ".*build the model with a larger max_len"):
        enc(torch.zeros(1, 7, 8))
    with pytest.raises(ValueError, match=re.escape("x has 4 features (shape (1, 2, 4)), expected 8")):
        enc(torch.zeros(1, 2, 4))


def test_learned_positions_start_small() -> None:
    """GPT-2's initialisation: a normal of standard deviation 0.02."""
    weight = LearnedPositionalEncoding(64, 512).embedding.weight
    assert 0.018 < weight.std().item() < 0.022


def test_encodings_keep_the_inputs_dtype() -> None:
    x = torch.randn(1, 3, 8, dtype=torch.bfloat16)
    assert SinusoidalPositionalEncoding(8)(x).dtype == torch.bfloat16
    assert LearnedPositionalEncoding(8, 4)(x).dtype == torch.bfloat16
    assert LearnedPositionalEncoding(8, 4)(x, positions=torch.tensor([[0, 1, 2]])).dtype == torch.bfloat16
    assert SinusoidalPositionalEncoding(8)(x, positions=torch.tensor([[0, 1, 2]])).dtype == torch.bfloat16
    cos, sin = torch.ones(3, 8), torch.zeros(3, 8)
    assert apply_rotary(x, cos, sin).dtype == torch.bfloat16
    rope = RotaryEmbedding(8)
    cos, sin = rope.cos_sin(torch.arange(3), torch.float16)
    assert cos.dtype == sin.dtype == torch.float16
    cos, sin = rope.cos_sin(torch.arange(3))
    assert cos.dtype == sin.dtype == torch.float32


def test_sinusoidal_table_grows_to_the_next_power_of_two_only_when_needed() -> None:
    enc = SinusoidalPositionalEncoding(8, max_len=10)
    enc(torch.zeros(1, 10, 8))
    assert enc.pe.shape == (10, 8)
    enc(torch.zeros(1, 16, 8))
    assert enc.pe.shape == (16, 8)
    enc(torch.zeros(1, 17, 8))
    assert enc.pe.shape == (32, 8)
    torch.testing.assert_close(enc.pe, sinusoidal_encoding(32, 8))
    assert SinusoidalPositionalEncoding(8).pe.shape == (5000, 8)


def test_sinusoidal_base_is_kept_when_the_table_grows() -> None:
    enc = SinusoidalPositionalEncoding(8, max_len=4, base=100.0)
    torch.testing.assert_close(enc.pe, sinusoidal_encoding(4, 8, base=100.0))
    torch.testing.assert_close(enc.encoding(6), sinusoidal_encoding(6, 8, base=100.0))
    torch.testing.assert_close(enc.encoding(2), enc.pe[:2])  # offset 0 by default


def test_encodings_follow_the_inputs_device() -> None:
    meta = torch.device("meta")
    assert sinusoidal_encoding(4, 8, device=meta).device == meta
    assert rope_inv_freq(8, device=meta).device == meta
    enc = SinusoidalPositionalEncoding(8, max_len=4).to(meta)
    assert enc(torch.zeros(1, 6, 8, device=meta)).device == meta  # the table grows on the device
    assert LearnedPositionalEncoding(8, 6).to(meta)(torch.zeros(1, 3, 8, device=meta)).device == meta
    assert RotaryEmbedding(8).to(meta)(torch.zeros(1, 2, 3, 8, device=meta)).device == meta


def test_rope_inv_freq_defaults() -> None:
    plain = 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8)
    torch.testing.assert_close(rope_inv_freq(8), plain)
    torch.testing.assert_close(rope_inv_freq(8, scaling="linear"), plain)  # factor 1 by default
    explicit = dict(low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
    assert torch.equal(
        rope_inv_freq(128, scaling="llama3", factor=8.0), rope_inv_freq(128, scaling="llama3", factor=8.0, **explicit)
    )


def test_dynamic_rope_starts_after_the_original_length() -> None:
    plain = rope_inv_freq(8)
    at_original = rope_inv_freq(8, scaling="dynamic", factor=2.0, seq_len=8192)
    assert torch.equal(at_original, plain)
    assert not torch.equal(rope_inv_freq(8, scaling="dynamic", factor=2.0, seq_len=8193), plain)


def _llama3_reference(inv_freq: torch.Tensor, factor: float, low: float, high: float, original: int) -> list[float]:
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def test_llama3_rope_scaling_follows_its_definition() -> None:
    params = dict(factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_position_embeddings=1024)
    got = rope_inv_freq(64, scaling="llama3", **params)  # type: ignore[arg-type]
    expected = _llama3_reference(rope_inv_freq(64), 4.0, 2.0, 8.0, 1024)
    torch.testing.assert_close(got, torch.tensor(expected))
    rope = RotaryEmbedding(64, scaling="llama3", **params)  # type: ignore[arg-type]
    torch.testing.assert_close(rope.inv_freq, got)
    with pytest.raises(ValueError, match=re.escape("unknown RoPE scaling 'cubic'; choose one of linear, dynamic")):
        rope_inv_freq(8, scaling="cubic")  # type: ignore[arg-type]


def test_rotary_checks_and_messages() -> None:
    RotaryEmbedding(8, base=0.5)
    RotaryEmbedding(8, scaling="linear", factor=0.5)
    RotaryEmbedding(8, factor=0.0)  # no scaling: the factor is not used
    RotaryEmbedding(8, scaling="linear", low_freq_factor=4.0, high_freq_factor=1.0)  # only llama3 uses them
    with pytest.raises(ValueError, match=re.escape("rotary base (rope_theta) must be positive, got 0")):
        RotaryEmbedding(8, base=0)
    with pytest.raises(ValueError, match=re.escape("RoPE scaling factor must be positive, got 0")):
        RotaryEmbedding(8, scaling="linear", factor=0)
    message = re.escape("llama3 RoPE scaling needs high_freq_factor > low_freq_factor, got 2.0 and 2.0")
    with pytest.raises(ValueError, match=message):
        RotaryEmbedding(8, scaling="llama3", low_freq_factor=2.0, high_freq_factor=2.0)
    assert "inv_freq" not in RotaryEmbedding(8).state_dict()  # rebuilt, never saved
