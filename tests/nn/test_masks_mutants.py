"""Mask helpers: what mutation testing (tools/mutation.py) found the other tests did not pin down.

The ``meta`` device stands in for an accelerator: a mask built on the CPU where the caller asked for another
device fails to combine with tensors there (or comes back on the wrong device), with no GPU needed.
"""

from __future__ import annotations

import re

import pytest
import torch

from attnkit.nn.masks import (
    band_mask,
    causal_mask,
    combine_masks,
    expand_attention_mask,
    finalize_mask,
    padding_mask,
    positions_from_padding_mask,
    prepare_attention,
)

META = torch.device("meta")


def test_masks_are_built_on_the_requested_device() -> None:
    assert causal_mask(3, 5, device=META).device == META
    assert band_mask(3, 5, causal=True, window=2, device=META).device == META
    assert band_mask(3, 5, causal=False, window=2, device=META).device == META
    assert band_mask(3, 5, causal=False, window=None, device=META).device == META
    assert padding_mask(torch.tensor([1, 3], device=META), max_len=4).device == META


def test_prepared_masks_are_on_the_requested_device() -> None:
    slopes = torch.tensor([0.5, 0.25])  # on the CPU: moved to the requested device
    for kwargs in (
        {"is_causal": True, "window": 2},
        {"is_causal": True, "need_weights": True},
        {"alibi_slopes": slopes},
        {"alibi_slopes": slopes, "is_causal": True, "window": 2},
    ):
        prepared = prepare_attention(batch=1, q_len=3, k_len=5, num_heads=2, device=META, **kwargs)
        assert prepared.mask is not None and prepared.mask.device == META, kwargs
    prepared = finalize_mask(None, q_len=3, k_len=5, window=2, device=META)
    assert prepared.mask is not None and prepared.mask.device == META


def test_band_mask_without_causality_is_symmetric() -> None:
    """Not causal: query at position p sees keys j with |p - j| < window, on both sides."""
    m = band_mask(4, 4, causal=False, window=2)
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    assert m.dtype == torch.bool
    assert torch.equal(m, expected)
    # bottom-right aligned: 2 queries are positions 3 and 4 of 5 keys
    m = band_mask(2, 5, causal=False, window=2)
    assert torch.equal(m, torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]], dtype=torch.bool))
    # neither causal nor windowed: every key
    m = band_mask(2, 3, causal=False, window=None)
    assert m.dtype == torch.bool and m.shape == (2, 3) and bool(m.all())


def test_band_mask_error_names_the_lengths() -> None:
    with pytest.raises(ValueError, match=r"q_len \(3\) must not exceed k_len \(2\)"):
        band_mask(3, 2, causal=True, window=None)


def test_positions_from_padding_mask_counts_real_tokens_before_each() -> None:
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
    assert torch.equal(positions_from_padding_mask(mask), torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]))
    # a single row (the batch dim is not the one counted along)
    assert torch.equal(positions_from_padding_mask(mask[:1]), torch.tensor([[0, 0, 0, 1, 2]]))


def test_combine_masks_error_names_the_argument() -> None:
    with pytest.raises(TypeError, match=r"^mask must be a boolean tensor .*`mask\.bool\(\)`.*`~mask`"):
        combine_masks(torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 2))


def test_mask_shape_errors_say_what_is_expected() -> None:
    with pytest.raises(ValueError, match=re.escape("[B, H, Tq, Tk]=[2, H, 3, 4] (True = may attend)")):
        expand_attention_mask(torch.ones(5, 4, dtype=torch.bool), None, batch=2, q_len=3, k_len=4)
    with pytest.raises(ValueError, match=re.escape("[B, H, Tq, Tk]=[2, 8, 3, 4]")):
        expand_attention_mask(torch.ones(5, 4, dtype=torch.bool), None, batch=2, q_len=3, k_len=4, num_heads=8)
    with pytest.raises(ValueError, match=re.escape("[B, Tk]=[2, 4] (True = real token, False = padding)")):
        expand_attention_mask(None, torch.ones(2, 5, dtype=torch.bool), batch=2, q_len=3, k_len=4)


def test_prepare_attention_checks_query_length_and_heads() -> None:
    with pytest.raises(ValueError, match="attn_mask has shape"):
        prepare_attention(torch.ones(4, 4, dtype=torch.bool), batch=1, q_len=3, k_len=4)
    with pytest.raises(ValueError, match=r"\[B, H, Tq, Tk\]=\[1, 2, 3, 4\]"):
        prepare_attention(torch.ones(1, 3, 3, 4, dtype=torch.bool), batch=1, q_len=3, k_len=4, num_heads=2)


def test_prepare_attention_window_of_one_is_each_query_alone() -> None:
    prepared = prepare_attention(batch=1, q_len=3, k_len=3, is_causal=True, window=1)
    assert prepared.mask is not None
    assert torch.equal(prepared.mask, torch.eye(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="sliding window must be >= 1, got 0"):
        prepare_attention(batch=1, q_len=3, k_len=3, window=0)


def test_alibi_bias_uses_the_queries_positions_after_a_cache() -> None:
    """One new query after 3 cached keys is position 3: its bias is -slope * |3 - j|."""
    slopes = torch.tensor([0.5, 1.0])
    prepared = prepare_attention(batch=1, q_len=1, k_len=4, num_heads=2, alibi_slopes=slopes)
    assert prepared.mask is not None
    expected = -slopes[None, :, None, None] * torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert torch.equal(prepared.mask, expected)


def test_additive_mask_has_the_requested_dtype() -> None:
    slopes = torch.tensor([0.5, 0.25])  # float32
    for dtype in (torch.float64, torch.bfloat16):
        prepared = prepare_attention(batch=1, q_len=3, k_len=3, num_heads=2, alibi_slopes=slopes, dtype=dtype)
        assert prepared.mask is not None and prepared.mask.dtype == dtype
        prepared = finalize_mask(None, q_len=3, k_len=3, bias=torch.zeros(1, 2, 3, 3), dtype=dtype)
        assert prepared.mask is not None and prepared.mask.dtype == dtype


def test_finalize_mask_defaults_are_not_causal_and_no_weights() -> None:
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    prepared = finalize_mask(mask, q_len=3, k_len=3)
    assert prepared.mask is not None and bool(prepared.mask.all())  # not causal
    assert not prepared.is_causal
    prepared = finalize_mask(None, q_len=3, k_len=3, is_causal=True)
    assert prepared.is_causal and prepared.mask is None  # no weights wanted: the fused kernel's causal mask


def test_has_key_is_none_when_every_row_has_a_key() -> None:
    mask = torch.tensor([[True, False], [False, True]])[None, None]
    assert finalize_mask(mask, q_len=2, k_len=2).has_key is None
    empty_row = torch.tensor([[True, False], [False, False]])[None, None]
    has_key = finalize_mask(empty_row, q_len=2, k_len=2).has_key
    assert has_key is not None and has_key.flatten().tolist() == [True, False]
