"""Every entry point that generates text takes the one SamplingParams and the one text path (issue 34):
the ``generate`` / ``chat`` flags are derived from its fields and checked by it before anything is written;
every option each entry point exposes reaches the sampler; the same seed and options give the same text
through the Python API, the command line and lmeval; stop strings cut the same way on every path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attnkit import api
from attnkit.cli import main
from attnkit.cli.common import SAMPLING_FLAGS
from attnkit.interop import Pretrained
from attnkit.models.generation import FIELDS, SamplingError, SamplingParams, field_doc
from attnkit.models.generation.processors import Sampler
from attnkit.text.generate import generate_texts, sampling_params

# A non-default value of every option the command line takes, as keywords and as flags.
OPTIONS: dict[str, Any] = dict(
    temperature=0.7,
    top_k=7,
    top_p=0.9,
    min_p=0.05,
    repetition_penalty=1.3,
    presence_penalty=0.5,
    frequency_penalty=0.25,
    seed=11,
    stop=("zqzq",),
)
FLAGS = [part for name, value in OPTIONS.items() for part in (f"--{name.replace('_', '-')}", str(value))]
FLAGS[FLAGS.index("('zqzq',)")] = "zqzq"


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chat_models import build_chat_model

    return build_chat_model(tmp_path_factory.mktemp("chat") / "tiny-chat")


@pytest.fixture(scope="module")
def model(chat_folder: Path) -> Pretrained:
    return api.load_model(chat_folder)


@pytest.fixture
def sampled(monkeypatch: pytest.MonkeyPatch) -> list[SamplingParams]:
    """The SamplingParams every Sampler receives (the one next-token choice), in order."""
    seen: list[SamplingParams] = []
    add = Sampler.add

    def spy(self: Sampler, params: SamplingParams, *args: Any, **kwargs: Any) -> None:
        seen.append(params)
        add(self, params, *args, **kwargs)

    monkeypatch.setattr(Sampler, "add", spy)
    return seen


def _carries(params: SamplingParams, options: dict[str, Any]) -> None:
    for name, value in options.items():
        got = getattr(params, name)
        if name == "stop":
            assert set(value) <= set(got), (name, got)
        else:
            assert got == value, (name, got, value)


# ---------------------------------------------------------------------------------------------- the flags
@pytest.mark.parametrize(("command", "max_tokens"), [("generate", 200), ("chat", 256)])
def test_the_sampling_flags_are_derived_from_the_fields(command: str, max_tokens: int):
    cmd = main.commands[command]
    params = {p.name: p for p in cmd.params}  # what the parser and the docs' sphinx-click read
    assert set(params) <= {p.name for p in cmd.get_params(click.Context(cmd))}
    assert set(SAMPLING_FLAGS) == set(OPTIONS)
    for name in ("max_tokens", *OPTIONS):
        option = params[name]
        assert isinstance(option, click.Option)
        flag = "--" + name.replace("_", "-")
        assert flag in option.opts, (name, option.opts)
        assert option.help is not None and option.help.lower().startswith(field_doc(name).lower()), option.help
        if name == "max_tokens":
            assert option.opts[0] == "--max-new-tokens" and option.default == max_tokens  # today's flag kept
        elif name == "stop":
            assert option.multiple
        else:
            assert option.default == FIELDS[name].default, name


BAD = [
    ("--temperature", "-1"),
    ("--top-k", "0"),
    ("--top-p", "0"),
    ("--min-p", "2"),
    ("--repetition-penalty", "0"),
    ("--presence-penalty", "3"),
    ("--frequency-penalty", "-2.5"),
    ("--seed", "-1"),
    ("--stop", ""),
    ("--max-new-tokens", str(2**40)),
]


@pytest.mark.parametrize("command", ["generate", "chat"])
@pytest.mark.parametrize(("flag", "value"), BAD)
def test_a_wrong_flag_value_is_the_sampling_error_before_anything(command: str, flag: str, value: str):
    """Checked by SamplingParams before the command runs: the run is not even looked at (it does not exist)."""
    name = flag.removeprefix("--").replace("-", "_")
    field = "max_tokens" if name == "max_new_tokens" else name
    typed: Any = (value,) if field == "stop" else int(value) if "int" in str(FIELDS[field].type) else float(value)
    with pytest.raises(SamplingError) as caught:
        SamplingParams(**{field: typed})
    assert caught.value.field == field
    expected = str(caught.value).replace("max_tokens", "max_new_tokens")  # named as its flag
    args = [command, "no/such/run", *(["--prompt", "hi"] if command == "generate" else []), flag, value]
    result = CliRunner().invoke(main, args, input="hi\n")
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr == f"error: {expected}\n"


def test_a_chat_reply_needs_a_token_before_the_model_is_loaded():
    result = CliRunner().invoke(main, ["chat", "no/such/run", "--max-new-tokens", "0"], input="hi\n")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == "error: max_new_tokens must be an int in [1, 1048576], got 0\n"


# ---------------------------------------------------------------------------------------------- the options
def test_every_option_reaches_the_sampler_from_every_entry_point(
    model: Pretrained, chat_folder: Path, sampled: list[SamplingParams]
):
    model.generate("The", 4, **OPTIONS)
    _carries(sampled[-1], OPTIONS)
    model.chat([{"role": "user", "content": "Hi"}], 4, **OPTIONS, logit_bias={5: 2.0})
    _carries(sampled[-1], {**OPTIONS, "logit_bias": ((5, 2.0),)})
    api.ChatSession(model, **OPTIONS, max_new_tokens=4).send("Hi")
    _carries(sampled[-1], OPTIONS)
    result = CliRunner().invoke(main, ["chat", str(chat_folder), "--max-new-tokens", "4", *FLAGS], input="Hi\n")
    assert result.exit_code == 0, (result.output, result.exception)
    _carries(sampled[-1], OPTIONS)

    from attnkit.viz.explorer.views import load_explorer

    load_explorer(model).view("The", steps=3, temperature=0.7, seed=11)
    _carries(sampled[-1], {"temperature": 0.7, "seed": 11})


def test_lmeval_gen_kwargs_become_one_sampling_params(model: Pretrained, sampled: list[SamplingParams]):
    from attnkit.lmeval import AttnkitLM

    lm = AttnkitLM(model, device="cpu")
    options = dict(
        do_sample=True, temperature=0.7, top_k=7, top_p=0.9, min_p=0.05, repetition_penalty=1.3, seed=11, until="zq"
    )
    lm.generate_until([_request("The", {**options, "max_gen_toks": 4})])
    _carries(sampled[-1], {k: v for k, v in options.items() if k not in ("do_sample", "until")} | {"stop": ("zq",)})
    assert sampled[-1].max_tokens == 4
    greedy = lm.generation_settings({"until": ["."], "top_k": 3, "repetition_penalty": 1.2})
    assert greedy.temperature == 0 and greedy.top_k is None and greedy.repetition_penalty == 1.2  # as transformers
    with pytest.raises(SamplingError, match="top_p must be None or a number in"):
        lm.generation_settings({"do_sample": True, "top_p": 0})


def test_the_same_seed_gives_the_same_text_through_the_api_and_lmeval(model: Pretrained):
    from attnkit.lmeval import AttnkitLM

    lm = AttnkitLM(model, device="cpu")
    prompt = "The old owl"
    assert lm.tok_encode(prompt) == model.encode_prompt(prompt)  # the same ids: comparable
    seeded = dict(temperature=1.5, top_k=50, top_p=0.95, repetition_penalty=1.2, seed=5)
    text = model.generate(prompt, 12, **seeded)
    assert text == model.generate(prompt, 12, params=SamplingParams(**seeded))
    assert text != model.generate(prompt, 12, **(seeded | {"seed": 6}))  # the seed counts
    (via_lmeval,) = lm.generate_until([_request(prompt, {"do_sample": True, "max_gen_toks": 12, **seeded})])
    assert via_lmeval == text


def test_the_same_options_give_the_same_text_through_the_api_and_the_cli(lm_run: Path, sampled: list[SamplingParams]):
    options = dict(OPTIONS, stop=())
    flags = FLAGS[: FLAGS.index("--stop")]
    (text,) = api.generate(lm_run, "The", max_new_tokens=12, **options)
    _carries(sampled[-1], options)
    result = CliRunner().invoke(main, ["generate", str(lm_run), "--prompt", "The", "--max-new-tokens", "12", *flags])
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout == text + "\n"
    _carries(sampled[-1], options)
    (with_params,) = api.generate(lm_run, "The", SamplingParams(max_tokens=12, **options))
    assert with_params == text


# ---------------------------------------------------------------------------------------------- stop strings
def _a_stop_in(text: str) -> str:
    """A two-character piece of ``text`` that first occurs past its start (so the cut is not empty)."""
    for i in range(3, len(text) - 2):
        stop = text[i : i + 2]
        if stop.strip() and text.index(stop) == i:
            return stop
    raise AssertionError(f"no stop string to pick in {text!r}")


def test_stop_strings_cut_the_same_way_on_every_path(model: Pretrained):
    from attnkit.lmeval import AttnkitLM

    prompt = "The old owl"
    whole = model.generate(prompt, 24)
    stop = _a_stop_in(whole)
    expected = whole.split(stop)[0]  # lm-eval's own cut
    assert model.generate(prompt, 24, stop=[stop]) == expected
    assert model.generate(prompt, 24, stop_strings=[stop]) == expected
    pieces: list[str] = []
    ids = model.encode_prompt(prompt)
    tok, lm_model = model.tokenizer, model.model
    (streamed,) = generate_texts(
        lm_model, tok, [ids], SamplingParams(max_tokens=24, temperature=0, stop=(stop,)),
        on_text=lambda _row, piece: pieces.append(piece),
    )  # fmt: skip
    assert streamed == expected == "".join(pieces)
    lm = AttnkitLM(model, device="cpu")
    assert lm.generate_until([_request(prompt, {"until": [stop], "max_gen_toks": 24})]) == [expected]
    # batched beside another prompt (left-padded), a row cuts as alone
    other = model.encode_prompt("A")
    batch = generate_texts(lm_model, tok, [other, ids], SamplingParams(max_tokens=24, temperature=0, stop=(stop,)))
    assert batch[1] == expected
    assert batch[0] == model.generate("A", 24, stop=[stop])


def test_stop_strings_cut_the_same_way_from_an_lm_run(lm_run: Path):
    (whole,) = api.generate(lm_run, "The", max_new_tokens=30, temperature=0)
    stop = _a_stop_in(whole.removeprefix("The"))
    expected = "The" + whole.removeprefix("The").split(stop)[0]
    assert api.generate(lm_run, "The", max_new_tokens=30, temperature=0, stop=[stop]) == [expected]
    assert api.generate(lm_run, ["The", "The"], max_new_tokens=30, temperature=0, stop=[stop]) == [expected] * 2
    result = CliRunner().invoke(
        main,
        ["generate", str(lm_run), "--prompt", "The", "--max-new-tokens", "30", "--temperature", "0", "--stop", stop],
    )
    assert result.exit_code == 0 and result.stdout == expected + "\n", result.output


def test_sampling_params_takes_a_params_and_keywords_over_it():
    base = SamplingParams(temperature=0.5, top_k=3)
    assert sampling_params(base, {"top_k": 4}) == SamplingParams(temperature=0.5, top_k=4)
    assert sampling_params(None, {"max_new_tokens": 9}, max_tokens=200).max_tokens == 9
    assert sampling_params(None, {}, max_tokens=200).max_tokens == 200
    with pytest.raises(TypeError, match="unknown sampling option 'top_q'"):
        sampling_params(None, {"top_q": 1})
    with pytest.raises(TypeError, match="given twice"):
        sampling_params(None, {"max_tokens": 1, "max_new_tokens": 2})
    with pytest.raises(SamplingError, match="presence_penalty must be a number in"):
        api.generate("no/such/run", "hi", presence_penalty=9)  # checked before the run is looked for


def test_language_model_generate_takes_params_or_the_keywords_not_both(model: Pretrained):
    lm = model.model
    ids = [model.encode_prompt("The")]
    with pytest.raises(ValueError, match="either as `params` or as keywords, not both"):
        lm.generate(ids, 2, params=SamplingParams(), top_k=3)
    with pytest.raises(ValueError, match="beam search takes no params"):
        lm.generate(ids, 2, params=SamplingParams(), num_beams=2)
    seeded = SamplingParams(temperature=1.0, seed=3, presence_penalty=1.0)
    assert lm.generate(ids, 6, params=seeded).tolist() == lm.generate(ids, 6, params=seeded).tolist()  # its seed


def _request(context: str, options: dict[str, Any]) -> Any:
    from lm_eval.api.instance import Instance

    return Instance(request_type="generate_until", doc={}, arguments=(context, options), idx=0)


TINY_LM = [
    "data.builtin_documents=60",
    "model.d_model=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.dim_feedforward=64",
    "model.max_len=48",
    "trainer.max_epochs=1",
    "trainer.batch_size=16",
    "trainer.threads=1",
    "trainer.progress_bar=false",
]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    result = CliRunner().invoke(main, ["train", "lm", "--output_dir", str(out), "name=tiny", *TINY_LM])
    assert result.exit_code == 0, result.output
    return out / "lm" / "tiny"
