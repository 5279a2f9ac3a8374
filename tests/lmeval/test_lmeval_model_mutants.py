""":meth:`AttnkitLM.generation_settings` (a request's lm-eval generation options -> one ``SamplingParams``)
and the checks of its numbers, called directly (no generation: milliseconds a test), for
``tools/mutation.py --module lmeval_generation``. The random Llama of ``conftest.py``: a context of 64."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from attnkit.lmeval import AttnkitLM
from attnkit.models.generation import SamplingParams


@pytest.fixture(scope="module")
def lm(llama_dir: Path) -> AttnkitLM:
    return AttnkitLM(str(llama_dir), device="cpu")


@pytest.fixture
def eos(lm: AttnkitLM) -> str:
    text = lm.tok.decode([lm.eot_token_id], skip_special=False)
    assert text
    return text


def test_greedy_by_default_with_the_until_strings_and_the_eos(lm: AttnkitLM, eos: str) -> None:
    params = lm.generation_settings({"until": ["\n", "Q:"], "max_gen_toks": 5, "temperature": 0.7, "top_k": 3})
    assert params == SamplingParams(max_tokens=5, stop=("\n", "Q:", eos), temperature=0.0)
    assert lm.generation_settings({"until": "Q:"}).stop == ("Q:", eos)  # one string, not its characters
    assert lm.generation_settings({"until": [eos, "", "x", "x"]}).stop == (eos, "x")  # once each, no empty one
    assert lm.generation_settings({}).stop == (eos,)
    assert lm.generation_settings({"until": None}).stop == (eos,)


def test_sampling_only_when_asked_as_transformers(lm: AttnkitLM, eos: str) -> None:
    sampled = lm.generation_settings(
        {"do_sample": True, "temperature": 0.5, "top_k": 3, "top_p": 0.9, "min_p": 0.1, "seed": 4, "max_gen_toks": 2}
    )
    assert sampled == SamplingParams(max_tokens=2, stop=(eos,), temperature=0.5, top_k=3, top_p=0.9, min_p=0.1, seed=4)
    assert lm.generation_settings({"do_sample": True}).temperature == 1.0  # transformers' default
    unset = lm.generation_settings({"do_sample": True, "top_k": None, "seed": None})
    assert (unset.top_k, unset.seed) == (SamplingParams().top_k, SamplingParams().seed)
    assert lm.generation_settings({"do_sample": False, "temperature": 0.5}).temperature == 0.0


def test_the_repetition_penalty_applies_to_greedy_decoding_too(lm: AttnkitLM) -> None:
    assert lm.generation_settings({"repetition_penalty": 1.3}).repetition_penalty == 1.3
    assert (
        lm.generation_settings({"repetition_penalty": None}).repetition_penalty == SamplingParams().repetition_penalty
    )


def test_max_gen_toks_and_its_aliases_in_lm_evals_order(lm: AttnkitLM) -> None:
    assert lm.generation_settings({}).max_tokens == 32  # the default of 256 made to fit 64
    assert lm.generation_settings({"max_new_tokens": 7}).max_tokens == 7
    assert lm.generation_settings({"max_gen_toks": 3, "max_new_tokens": 7}).max_tokens == 3
    assert lm.generation_settings({"max_gen_toks": None, "max_tokens": 6, "max_completion_tokens": 9}).max_tokens == 6
    assert lm.generation_settings({"max_completion_tokens": 9}).max_tokens == 9
    assert lm.generation_settings({"max_gen_toks": "63"}).max_tokens == 63  # the largest that leaves room
    with pytest.raises(ValueError) as err:
        lm.generation_settings({"max_tokens": 64})
    assert str(err.value) == (
        "max_tokens=64 leaves no room for the prompt in the context of 64 tokens (a prompt is cut on the left to "
        "the context less max_tokens): ask for fewer new tokens: `attnkit eval --gen-kwargs max_gen_toks=N` "
        "(evaluate_harness(gen_kwargs={'max_gen_toks': N}), lm_eval's --gen_kwargs or the task's "
        "generation_kwargs), N < 64"
    )


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3 tokens", "", [3], " 4x", "0"])
def test_a_number_of_new_tokens_must_be_a_positive_integer(lm: AttnkitLM, value: object) -> None:
    with pytest.raises(ValueError) as err:
        lm.generation_settings({"max_new_tokens": 1, "max_gen_toks": value})
    assert str(err.value) == f"max_gen_toks must be a positive integer, got {value!r}"


def test_a_context_of_one_token_has_no_room_for_the_default(lm: AttnkitLM) -> None:
    with pytest.raises(ValueError, match=r"^max_gen_toks=1 leaves no room for the prompt in the context of 1 tokens"):
        AttnkitLM(lm.pretrained, max_length=1).generation_settings({})


def test_numbers_written_as_text_are_read(lm: AttnkitLM) -> None:
    assert lm.generation_settings({"max_gen_toks": " 12 "}).max_tokens == 12
    assert lm.generation_settings({"max_gen_toks": 1}).max_tokens == 1


def test_the_clamped_default_is_said_once(lm: AttnkitLM, llama_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    fresh = AttnkitLM(lm.pretrained)
    with caplog.at_level(logging.WARNING, logger="attnkit.lmeval.model"):
        fresh.generation_settings({"max_gen_toks": 4})  # asked for: nothing to say
        assert caplog.messages == []
        fresh.generation_settings({})
        fresh.generation_settings({})
    assert caplog.messages == [
        "the default max_gen_toks=256 leaves no room for a prompt in the context of 64 tokens: requests that do not "
        "set it generate at most 32 tokens; to choose, ask for fewer new tokens: `attnkit eval --gen-kwargs "
        "max_gen_toks=N` (evaluate_harness(gen_kwargs={'max_gen_toks': N}), lm_eval's --gen_kwargs or the task's "
        "generation_kwargs)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnkit.lmeval.model"):
        AttnkitLM(lm.pretrained, max_gen_toks=8).generation_settings({})  # chosen: nothing to say
    assert caplog.messages == []


def test_options_the_model_does_not_take_are_refused(lm: AttnkitLM) -> None:
    with pytest.raises(ValueError) as err:
        lm.generation_settings({"num_beams": 2, "until": ["."], "a": 1})
    assert str(err.value) == (
        "generation options ['a', 'num_beams'] are not supported by the attnkit model; it takes ['until', "
        "'max_gen_toks', 'do_sample', 'temperature', 'top_k', 'top_p', 'min_p', 'repetition_penalty', 'seed'] "
        "(max_gen_toks also as max_new_tokens, max_tokens, max_completion_tokens)"
    )
    with pytest.raises(ValueError) as err:
        lm.generation_settings({"until": [".", 3]})
    assert str(err.value) == "until must be a string or a list of strings, got ['.', 3]"
    with pytest.raises(TypeError) as type_err:
        lm.generation_settings([("until", ".")])  # type: ignore[arg-type]
    assert str(type_err.value) == "generation options must be a dict, got list"
