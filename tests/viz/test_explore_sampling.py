"""The explorer checks its sampling options with the check ``generate``, ``chat`` and ``serve`` share: a wrong
temperature or seed is a 400 whose message names the field, never a 500 from inside the model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from explore_helpers import raw, running

from attnkit.interop import Pretrained, load_pretrained
from attnkit.models.generation import SamplingError
from attnkit.viz.explorer import load_explorer
from attnkit.viz.explorer.app import create_explore_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Pretrained:
    return load_pretrained(build_chat_model(tmp_path_factory.mktemp("llama") / "m"))


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"temperature": 1.7e-39}, "temperature", "temperature must be a number >= 0 (0 = greedy; otherwise finite"),
        ({"temperature": float("nan")}, "temperature", "temperature must be a number >= 0"),
        ({"temperature": 11}, "temperature", "and <= 10"),
        ({"seed": 2**64}, "seed", "seed must be an integer in [0, 2**64), got 18446744073709551616"),
        ({"seed": -1}, "seed", "seed must be an integer in [0, 2**64), got -1"),
        ({"seed": None}, "seed", "seed must be an integer in [0, 2**64), got None"),
    ],
)
def test_wrong_sampling_options_name_their_field(llama: Pretrained, options: dict, field: str, message: str):
    explorer = load_explorer(llama)
    with pytest.raises(SamplingError) as err:
        explorer.view("The old owl", steps=3, **options)
    assert err.value.field == field and message in str(err.value)
    assert explorer.view("The old owl", steps=3, temperature=0.01, seed=2**64 - 1)["input"]["seed"] == 2**64 - 1


def test_the_app_answers_400_naming_the_field(llama: Pretrained):
    json_type = {"Content-Type": "application/json"}
    with running(create_explore_app(load_explorer(llama))) as url:
        for options, field in [({"temperature": 1.7e-39}, "temperature"), ({"seed": 2**64}, "seed")]:
            body = json.dumps({"text": "The old owl", "steps": 3, **options}).encode()
            status, answer = raw(url, "POST", "/api/view", body, json_type)
            assert status == 400, answer
            assert answer["detail"].startswith(f"{field} must be")
        body = json.dumps({"text": "The old owl", "steps": 3, "temperature": 0.5, "seed": 1}).encode()
        assert raw(url, "POST", "/api/view", body, json_type)[0] == 200


def test_bodies_no_parser_or_tokenizer_can_read_are_400_naming_what_is_wrong(llama: Pretrained):
    """JSON nested too deeply, an integer of more digits than Python converts, a lone surrogate in the text: each
    a 400 that says what is wrong (they were a 500 from the parser or the tokenizer), and the app answers after."""
    json_type = {"Content-Type": "application/json"}
    digits = sys.get_int_max_str_digits() + 1
    bodies = [
        (b"[" * 100_000 + b"]" * 100_000, "the request body's JSON is nested too deeply"),
        (b'{"text": "hi", "seed": 1' + b"0" * digits + b"}", f"holds an integer of more than {digits - 1} digits"),
        (b'{"text": "The \\ud800 owl", "steps": 1}', "the text: a lone surrogate ('\\ud800') is not a character"),
        (b'{"text": "hi"', "the request body is not valid JSON"),
    ]
    with running(create_explore_app(load_explorer(llama), max_body_bytes=1_000_000)) as url:
        for body, message in bodies:
            status, answer = raw(url, "POST", "/api/view", body, json_type)
            assert status == 400 and message in answer["detail"], answer
        good = json.dumps({"text": "The old owl", "steps": 1}).encode()
        assert raw(url, "POST", "/api/view", good, json_type)[0] == 200
