""":class:`attnkit.models.generation.SamplingParams`, the one parameters type: its fields declared once (default,
meaning), what it converts, and the one check of every field (the ends of each range in, one step past them
out, with the field named)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from attnkit.models.generation import FIELDS, SamplingError, SamplingParams, field_doc
from attnkit.models.generation.params import (
    MAX_LOGIT_BIAS,
    MAX_LOGPROBS,
    MAX_N,
    MAX_PENALTY,
    MAX_STOP_LENGTH,
    MAX_STOPS,
)

DEFAULTS = {
    "max_tokens": 16,
    "temperature": 1.0,
    "top_k": None,
    "top_p": None,
    "min_p": None,
    "typical_p": None,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logit_bias": (),
    "seed": None,
    "stop": (),
    "stop_ids": (),
    "n": 1,
    "logprobs": None,
}


def test_the_fields_their_defaults_and_docs() -> None:
    params = SamplingParams()
    assert list(FIELDS) == list(DEFAULTS)
    assert {name: getattr(params, name) for name in FIELDS} == DEFAULTS
    assert {name: f.default for name, f in FIELDS.items()} == DEFAULTS
    for name in FIELDS:
        doc = field_doc(name)
        assert isinstance(doc, str) and len(doc) > 20 and doc == FIELDS[name].metadata["doc"]
    assert "typical" in field_doc("typical_p") and "OpenAI" in field_doc("presence_penalty")
    assert (MAX_PENALTY, MAX_LOGIT_BIAS, MAX_LOGPROBS, MAX_N, MAX_STOPS) == (2.0, 100.0, 20, 128, 64)
    assert MAX_STOP_LENGTH == 1024


def test_lists_and_mappings_become_tuples_and_it_never_changes() -> None:
    params = SamplingParams(stop=["a", "b"], stop_ids=[3, 4], logit_bias={5: 1.0, 2: -2})
    assert params.stop == ("a", "b") and params.stop_ids == (3, 4)
    assert params.logit_bias == ((5, 1.0), (2, -2)) and params.bias_map() == {5: 1.0, 2: -2.0}
    assert all(type(v) is float for v in params.bias_map().values())
    assert SamplingParams(stop="end").stop == ("end",)
    assert SamplingParams(logit_bias=[[5, 1.0], (6, 2.0)]).logit_bias == ((5, 1.0), (6, 2.0))
    assert hash(params) == hash(SamplingParams(stop=("a", "b"), stop_ids=(3, 4), logit_bias=((5, 1.0), (2, -2))))
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.temperature = 0.5  # type: ignore[misc]
    with pytest.raises(SamplingError, match="stop_ids must be a tuple of token ids, got 'ab'"):
        SamplingParams(stop_ids="ab")  # type: ignore[arg-type]


def test_replace_checks_again_and_greedy() -> None:
    params = SamplingParams(temperature=0)
    assert params.greedy and not SamplingParams(temperature=0.5).greedy and not SamplingParams().greedy
    assert params.replace(top_k=3) == SamplingParams(temperature=0, top_k=3)
    assert params.replace(top_k=3) is not params and params.top_k is None
    with pytest.raises(SamplingError) as err:
        params.replace(temperature=-1)
    assert err.value.field == "temperature"


def test_check_vocab() -> None:
    SamplingParams(logit_bias={9: 1.0}, stop_ids=[9]).check_vocab(10)
    for params, field in (
        (SamplingParams(logit_bias={3: 1.0, 10: 1.0, 12: 2.0}), "logit_bias"),
        (SamplingParams(stop_ids=[1, 10, 11]), "stop_ids"),
    ):
        with pytest.raises(
            SamplingError, match=re.escape(f"{field}: token id 1") + r"0 is past the vocabulary \(10 "
        ) as err:
            params.check_vocab(10)
        assert err.value.field == field


PENALTY = "{f} must be a number in [-2, 2] (0 = none), got {v!r}"
N = f"n must be an int in [1, {MAX_N}], got {{v!r}}"
LOGPROBS = f"logprobs must be None (none) or an int in [0, {MAX_LOGPROBS}] (the chosen token's log-probability"
STOP_EACH = "each stop string must be a non-empty string of at most 1024 characters, got {v!r}"
BIAS = "logit_bias of token 1 must be a number in [-100, 100], got {v!r}"
PAIRS = "logit_bias must be (token id, bias) pairs, got {v!r}"
IDS = "{f} must hold token ids (ints >= 0), got {v!r}"

GOOD = [
    ("presence_penalty", -2),
    ("presence_penalty", 2.0),
    ("frequency_penalty", -2.0),
    ("frequency_penalty", 2),
    ("n", 1),
    ("n", MAX_N),
    ("logprobs", 0),
    ("logprobs", MAX_LOGPROBS),
    ("stop", ("x" * MAX_STOP_LENGTH,)),
    ("stop", tuple(f"s{i}" for i in range(MAX_STOPS))),
    ("stop_ids", (0,)),
    ("logit_bias", ((0, -100), (1, 100.0))),
    ("max_tokens", 0),
    ("max_tokens", None),
    ("typical_p", 1),
    ("typical_p", 1e-6),
    ("seed", 0),
    ("top_k", 1),
]


@pytest.mark.parametrize(("name", "value"), GOOD)
def test_the_ends_of_each_range_are_accepted(name: str, value: object) -> None:
    assert getattr(SamplingParams(**{name: value}), name) == value


BAD = [
    *((f, v, PENALTY) for f in ("presence_penalty", "frequency_penalty") for v in (-2.01, 2.01, True, "1", 10**400)),
    ("presence_penalty", float("nan"), PENALTY),
    ("frequency_penalty", float("inf"), PENALTY),
    ("presence_penalty", None, PENALTY),
    *(("n", v, N) for v in (0, MAX_N + 1, True, 1.0, None)),
    *(("logprobs", v, LOGPROBS) for v in (-1, MAX_LOGPROBS + 1, True, 1.0)),
    ("stop", ("x" * (MAX_STOP_LENGTH + 1),), STOP_EACH.format(v="x" * (MAX_STOP_LENGTH + 1))),
    ("stop", ("a", ""), STOP_EACH.format(v="")),
    ("stop", ("a", 3), STOP_EACH.format(v=3)),
    ("stop", tuple(f"s{i}" for i in range(MAX_STOPS + 1)), f"at most {MAX_STOPS} stop strings, got {MAX_STOPS + 1}"),
    ("stop", {"a"}, "stop must be a tuple of non-empty strings, got {v!r}"),
    ("stop_ids", (1, -1), IDS.format(f="stop_ids", v=-1)),
    ("stop_ids", (True,), IDS.format(f="stop_ids", v=True)),
    ("stop_ids", ("1",), IDS.format(f="stop_ids", v="1")),
    ("stop_ids", {1}, "stop_ids must be a tuple of token ids, got {v!r}"),
    ("logit_bias", ((1, 100.5),), BIAS.format(v=100.5)),
    ("logit_bias", ((1, -100.5),), BIAS.format(v=-100.5)),
    ("logit_bias", ((1, True),), BIAS.format(v=True)),
    ("logit_bias", ((1, float("nan")),), BIAS.format(v=float("nan"))),
    ("logit_bias", ((-1, 1.0),), IDS.format(f="logit_bias", v=-1)),
    ("logit_bias", ((1.0, 1.0),), IDS.format(f="logit_bias", v=1.0)),
    ("logit_bias", ((1, 1.0), (1, 2.0)), "logit_bias gives token 1 twice"),
    ("logit_bias", ((1, 1.0, 2.0),), PAIRS.format(v=(1, 1.0, 2.0))),
    ("logit_bias", ((1,),), PAIRS.format(v=(1,))),
    ("logit_bias", (1, 2), PAIRS.format(v=1)),
    ("logit_bias", [1, 2], PAIRS.format(v=1)),  # a list of ids, not of pairs
    ("logit_bias", {(1, 2)}, PAIRS),
    ("max_tokens", -1, "max_tokens must be an int in [0, "),
    ("typical_p", 0, "typical_p must be None or a number in (0, 1], got 0"),
    ("typical_p", 1.5, "typical_p must be None or a number in (0, 1], got 1.5"),
    ("temperature", -0.5, "temperature must be a number >= 0"),
    ("top_k", 0, "top_k must be None or an int >= 1, got 0"),
    ("top_p", 0.0, "top_p must be None or a number in (0, 1], got 0.0"),
    ("min_p", 1.5, "min_p must be None or a number in [0, 1], got 1.5"),
    ("repetition_penalty", 0, "repetition_penalty must be a number > 0"),
    ("seed", -1, "seed must be an integer in [0, 2**64)"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD])
def test_a_wrong_value_names_its_field_and_says_why(name: str, value: object, message: str) -> None:
    with pytest.raises(SamplingError) as err:
        SamplingParams(**{name: value})
    assert err.value.field == name
    assert str(err.value).startswith(message.format(f=name, v=value)), str(err.value)
    assert isinstance(err.value, ValueError)
