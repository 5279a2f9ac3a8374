"""Sampling helpers: the edges of their documented ranges, which mutation testing (tools/mutation.py) found
the other tests left open."""

from __future__ import annotations

import re

import pytest
import torch

from attnkit.models.generation import (
    apply_repetition_penalty,
    check_sampling,
    left_pad,
    min_p_filter,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)

TEMPERATURE = (
    "temperature must be a number >= 0 (0 = greedy; otherwise finite, >= 0.01, so that logits / temperature "
    "cannot overflow)"
)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0.0},  # greedy
        {"temperature": 2},  # an int is a number
        {"temperature": 1.0, "top_k": 1},
        {"temperature": 1.0, "top_p": 1.0},  # (0, 1]: 1 is in
        {"temperature": 1.0, "top_p": 1},
        {"temperature": 1.0, "min_p": 0.0},  # [0, 1]: both ends are in
        {"temperature": 1.0, "min_p": 1.0},
        {"temperature": 1.0, "min_p": 0},
        {"temperature": 1.0, "repetition_penalty": 1},
        {"temperature": 1.0, "repetition_penalty": 1e-3},
    ],
)
def test_check_sampling_accepts_the_ends_of_its_ranges(kwargs: dict) -> None:
    check_sampling(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, TEMPERATURE + ", got -0.1"),
        ({"temperature": True}, TEMPERATURE + ", got True"),
        ({"temperature": "1"}, TEMPERATURE + ", got '1'"),
        ({"temperature": 1.0, "top_k": 0}, "top_k must be None or an int >= 1, got 0"),
        ({"temperature": 1.0, "top_k": True}, "top_k must be None or an int >= 1, got True"),
        ({"temperature": 1.0, "top_k": 2.0}, "top_k must be None or an int >= 1, got 2.0"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p must be None or a number in (0, 1], got 0.0"),
        ({"temperature": 1.0, "top_p": 1.0001}, "top_p must be None or a number in (0, 1], got 1.0001"),
        ({"temperature": 1.0, "top_p": True}, "top_p must be None or a number in (0, 1], got True"),
        ({"temperature": 1.0, "top_p": "0.5"}, "top_p must be None or a number in (0, 1], got '0.5'"),
        ({"temperature": 1.0, "min_p": -0.01}, "min_p must be None or a number in [0, 1], got -0.01"),
        ({"temperature": 1.0, "min_p": 1.01}, "min_p must be None or a number in [0, 1], got 1.01"),
        ({"temperature": 1.0, "min_p": True}, "min_p must be None or a number in [0, 1], got True"),
        ({"temperature": 1.0, "min_p": "0.1"}, "min_p must be None or a number in [0, 1], got '0.1'"),
        (
            {"temperature": 1.0, "repetition_penalty": 0},
            "repetition_penalty must be a number > 0 (1 = none) and finite, got 0",
        ),
        ({"temperature": 1.0, "repetition_penalty": True}, "repetition_penalty must be a number > 0 (1 = none)"),
        ({"temperature": 1.0, "repetition_penalty": "2"}, "repetition_penalty must be a number > 0 (1 = none)"),
    ],
)
def test_check_sampling_rejects_with_a_clear_message(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        check_sampling(**kwargs)


def test_top_k_filter_keeps_everything_when_k_is_the_vocabulary() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.0, -1.0, 5.0]])
    assert torch.equal(top_k_filter(logits, 3), logits)
    assert top_k_filter(logits, 1).isfinite().tolist() == [[False, True, False], [False, False, True]]


def test_top_p_of_one_keeps_even_vanishing_tokens() -> None:
    """p = 1 keeps every token, even those whose probability rounds away next to a near-certain one."""
    logits = torch.tensor([[0.0, -30.0, -30.0, -40.0]])
    assert torch.equal(top_p_filter(logits, 1.0), logits)


def test_top_p_filter_works_per_row() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]])
    kept = top_p_filter(probs.log(), 0.7).isfinite()
    assert kept.tolist() == [[True, True, False, False], [False, False, True, True]]


def test_min_p_of_one_keeps_all_tokens_tied_at_the_top() -> None:
    logits = torch.tensor([[2.0, 2.0, 0.0], [0.0, 1.0, 1.0]])
    assert min_p_filter(logits, 1.0).isfinite().tolist() == [[True, True, False], [False, True, True]]


def test_min_p_filter_compares_with_each_rows_own_top() -> None:
    # row 0's top probability is far higher than row 1's: a global maximum would drop all of row 1
    logits = torch.tensor([[10.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.9]])
    assert min_p_filter(logits, 0.5).isfinite().tolist() == [[True, False, False, False], [True, True, True, True]]
    assert torch.equal(min_p_filter(logits, 0.0), logits)


def test_repetition_penalty_of_one_changes_nothing_and_others_only_seen_tokens() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0]])
    seen = torch.tensor([[True, True, False]])
    assert torch.equal(apply_repetition_penalty(logits, seen, 1.0), logits)
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [[1.0, -4.0, 1.0]]


def test_left_pad_accepts_tensors_and_pads_with_pad_id() -> None:
    ids, mask = left_pad([torch.tensor([[5, 6, 7]]), [8]], pad_id=9)
    assert ids.dtype == torch.long and mask.dtype == torch.bool
    assert ids.tolist() == [[5, 6, 7], [9, 9, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    with pytest.raises(ValueError, match=r"^no sequences to pad: pass at least one prompt$"):
        left_pad([], pad_id=0)
    with pytest.raises(ValueError, match=re.escape("prompt(s) [0, 2] are empty: start each prompt with bos_id")):
        left_pad([[], [1], torch.tensor([], dtype=torch.long)], pad_id=0)


def test_sample_next_token_applies_top_p_and_min_p() -> None:
    logits = torch.tensor([[3.0, 0.0, 0.0, 0.0]]).repeat(200, 1)  # the first token has p ~ 0.87
    g = torch.Generator().manual_seed(0)
    assert sample_next_token(logits, top_p=0.5, generator=g).eq(0).all()
    assert sample_next_token(logits, min_p=0.5, generator=g).eq(0).all()
    # without a filter the others do get drawn
    assert sample_next_token(logits, generator=g).ne(0).any()


def test_sample_next_token_returns_one_int64_id_per_row() -> None:
    logits = torch.tensor([[0.0, 5.0, 0.0], [9.0, 0.0, 0.0]], dtype=torch.float16)
    out = sample_next_token(logits, temperature=0.01, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2,) and out.dtype == torch.int64 and out.tolist() == [1, 0]
    greedy = sample_next_token(logits, temperature=0.0)
    assert greedy.shape == (2,) and greedy.tolist() == [1, 0]


def test_filters_work_on_the_last_dim_of_any_shape() -> None:
    """``[..., V]``: a 3-D batch filters each row as the rows on their own."""
    logits = torch.randn(2, 3, 5)
    for name, fn in (("top_k", lambda x: top_k_filter(x, 2)), ("top_p", lambda x: top_p_filter(x, 0.6)),
                     ("min_p", lambda x: min_p_filter(x, 0.3))):  # fmt: skip
        rows = torch.stack([fn(row) for row in logits.reshape(6, 5)]).reshape(2, 3, 5)
        assert torch.equal(fn(logits), rows), name


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"top_k": 0}, "top_k must be"), ({"top_p": 0.0}, "top_p must be"), ({"min_p": 2.0}, "min_p")]
)
def test_sample_next_token_checks_its_filters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample_next_token(torch.zeros(1, 4), **kwargs)
