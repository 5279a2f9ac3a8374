"""The one check of sampling options that ``generate``, ``chat``, ``serve`` and ``explore`` share
(:mod:`attnkit.models.generation.options`): the edges of each range, the field each error names, and the
temperature floor's reason (below it, logits / temperature overflows float32 and the draw fails)."""

from __future__ import annotations

import pytest
import torch

from attnkit.models.generation import (
    MAX_TOKENS,
    MIN_TEMPERATURE,
    SamplingError,
    check_max_tokens,
    check_sampling,
    check_seed,
    check_temperature,
    sample_next_token,
)


@pytest.mark.parametrize("seed", [None, 0, 1, 2**63, 2**64 - 1])
def test_seeds_a_generator_takes_are_accepted(seed: int | None) -> None:
    check_seed(seed)
    if seed is not None:
        torch.Generator().manual_seed(seed)  # the same range as torch's


@pytest.mark.parametrize("seed", [2**64, -1, True, 1.0, "1", 2**200])
def test_other_seeds_are_refused_naming_the_field(seed: object) -> None:
    with pytest.raises(SamplingError, match=r"^seed must be an integer in \[0, 2\*\*64\)") as err:
        check_sampling(1.0, seed=seed)
    assert err.value.field == "seed" and f"got {seed!r}" in str(err.value)
    with pytest.raises(SamplingError, match="or None") if seed is not None else pytest.raises(SamplingError):
        check_seed(seed)
    with pytest.raises(SamplingError, match=r"got None$"):
        check_seed(None, optional=False)


@pytest.mark.parametrize("temperature", [0, 0.0, MIN_TEMPERATURE, 0.5, 2, 1e30])
def test_temperatures_accepted(temperature: float) -> None:
    check_temperature(temperature)


@pytest.mark.parametrize(
    "temperature", [1.7e-39, 1e-300, 5e-324, MIN_TEMPERATURE * 0.99, -0.0001, float("nan"), float("inf"), 10**400]
)
def test_temperatures_that_cannot_be_used_are_refused(temperature: float) -> None:
    with pytest.raises(
        SamplingError, match=r"^temperature must be a number >= 0 \(0 = greedy; otherwise finite"
    ) as err:
        check_sampling(temperature)
    assert err.value.field == "temperature"


def test_an_upper_bound_is_the_entry_points() -> None:
    check_sampling(2.0, max_temperature=2.0)
    with pytest.raises(SamplingError, match=r"and <= 2, .*got 2.5$"):
        check_sampling(2.5, max_temperature=2.0)


def test_the_floor_keeps_the_division_finite_and_below_it_the_draw_failed() -> None:
    """At the floor, logits far larger than any model's stay finite after the division (float32, from
    bfloat16 or float16 logits too), so a token is drawn; at 1.7e-39 (which the server once accepted)
    the division overflows to inf: the check refuses it before sampling, as a ValueError, never a
    RuntimeError from the draw."""
    g = torch.Generator().manual_seed(0)
    for dtype, big in [(torch.float32, 1e36), (torch.bfloat16, 1e36), (torch.float16, 60000.0)]:
        logits = torch.tensor([[big, -big, 0.0, big / 2]], dtype=dtype)
        assert torch.isfinite(logits.float() / MIN_TEMPERATURE).all()
        assert sample_next_token(logits, temperature=MIN_TEMPERATURE, generator=g).tolist() == [0]
    assert torch.isinf(torch.tensor([[1.0, 0.5]]) / 1.7e-39).any()
    with pytest.raises(ValueError, match="temperature"):
        sample_next_token(torch.tensor([[1.0, 0.5]]), temperature=1.7e-39, generator=g)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"top_p": float("nan")}, "top_p"),
        ({"min_p": float("nan")}, "min_p"),
        ({"repetition_penalty": float("inf")}, "repetition_penalty"),
        ({"repetition_penalty": float("nan")}, "repetition_penalty"),
        ({"top_k": 0}, "top_k"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": MAX_TOKENS + 1}, "max_tokens"),
        ({"max_tokens": 2.0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 5, "min_tokens": 6, "max_tokens_field": "max_new_tokens"}, "max_new_tokens"),
    ],
)
def test_every_number_is_finite_and_in_range_and_the_error_names_it(kwargs: dict, field: str) -> None:
    with pytest.raises(SamplingError, match=f"^{field} must be") as err:
        check_sampling(1.0, **kwargs)
    assert err.value.field == field


def test_token_counts_at_their_edges() -> None:
    check_max_tokens(0)
    check_max_tokens(MAX_TOKENS)
    check_max_tokens(None)
    check_max_tokens(1, minimum=1)
    with pytest.raises(SamplingError, match=r"^max_tokens must be an int in \[1, 1048576\], got 0$"):
        check_max_tokens(0, minimum=1)
    with pytest.raises(SamplingError, match="got None"):
        check_max_tokens(None, optional=False)


def test_the_first_wrong_option_is_named() -> None:
    with pytest.raises(SamplingError) as err:
        check_sampling(-1.0, top_k=0, seed=-1)
    assert err.value.field == "temperature"
    with pytest.raises(SamplingError) as err:
        check_sampling(1.0, top_k=0, seed=-1)
    assert err.value.field == "top_k"


def test_the_defaults_are_temperature_1_and_no_token_minimum() -> None:
    """Options left out are the defaults: temperature 1 (within an entry point's bound of 1), and
    ``max_tokens`` may be 0 unless the entry point asks for more."""
    check_sampling(max_temperature=1.0)
    check_sampling(max_tokens=0)
    with pytest.raises(SamplingError, match=r"^max_tokens must be an int in \[1, 1048576\], got 0$"):
        check_sampling(max_tokens=0, min_tokens=1)


def test_a_seed_message_offers_none_only_where_none_is_allowed() -> None:
    with pytest.raises(SamplingError) as err:
        check_seed(-1)
    assert str(err.value) == "seed must be an integer in [0, 2**64) (or None: unseeded), got -1"
    with pytest.raises(SamplingError) as err:
        check_seed(-1, optional=False, field="random_seed")
    assert str(err.value) == "random_seed must be an integer in [0, 2**64), got -1"
    assert err.value.field == "random_seed"
