"""Issue 33, point 9: ``attnkit eval --gen-kwargs`` (lm_eval's ``--gen_kwargs`` syntax) reaches the
generate_until tasks, and generation fits a model whose context is 256 tokens or less (the random
Llama's: 64): the prompt is cut on the left to the context less ``max_gen_toks``; a ``max_gen_toks``
asked for that leaves no room is a clear error; lm_eval's default of 256 becomes half the context."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lm_eval.api.instance import Instance

from attnkit import api
from attnkit.api.evaluation import parse_gen_kwargs
from attnkit.cli import main
from attnkit.lmeval import AttnkitLM
from attnkit.models import LanguageModel

LONG = " ".join(["the small cat sat on the old red mat and then it ran under the big green tree"] * 6)


def _requests(*args: tuple[str, dict[str, Any]]) -> list[Instance]:
    return [Instance(request_type="generate_until", doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


@pytest.fixture(scope="module")
def lm(llama_dir: Path) -> AttnkitLM:
    return AttnkitLM(str(llama_dir), batch_size=2, device="cpu")


def test_attnkit_eval_gen_kwargs_reach_the_generate_until_tasks(
    llama_dir: Path, tasks_module: Path, tmp_path: Path, lm: AttnkitLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_tokens: list[int] = []
    generate = LanguageModel.generate
    monkeypatch.setattr(
        LanguageModel,
        "generate",
        lambda self, prompts, n, **kw: new_tokens.append(n) or generate(self, prompts, n, **kw),
    )
    out = tmp_path / "results.json"
    args = ["eval", str(llama_dir), "--tasks", "mini_gen_default", "--include-path", str(tasks_module)]
    args += ["--only-included", "--limit", "3", "--batch-size", "2", "--log-samples", "--output", str(out)]
    result = CliRunner().invoke(main, [*args, "--gen-kwargs", "max_gen_toks=3,temperature=0,until=."])
    assert result.exit_code == 0, result.output
    assert new_tokens == [3, 3]  # 3 documents in batches of 2
    results = json.loads(out.read_text())
    config = results["configs"]["mini_gen_default"]["generation_kwargs"]
    assert config["max_gen_toks"] == 3 and config["temperature"] == 0 and config["until"] == "."
    samples = results["samples"]["mini_gen_default"]
    assert len(samples) == 3
    for sample in samples:
        (context, options), response = sample["arguments"][0], sample["resps"][0][0]
        assert options["max_gen_toks"] == 3 and options["until"] == "."
        assert [response] == lm.generate_until(_requests((context, {"until": ["."], "max_gen_toks": 3})))
    assert any(s["resps"][0][0] for s in samples)  # something was generated


def test_a_task_without_max_gen_toks_runs_on_a_context_of_64(
    llama_dir: Path, tasks_module: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """lm_eval's default of 256 new tokens leaves no room in 64: half the context, with a warning
    that says how to choose (lm_eval's HF backend stops at an assertion)."""
    with caplog.at_level(logging.WARNING, logger="attnkit.lmeval.model"):
        results = api.evaluate_harness(
            llama_dir, "mini_gen_default", include_path=tasks_module, include_defaults=False, limit=2,
            log_samples=True, bootstrap_iters=0,
        )  # fmt: skip
    assert "generate at most 32 tokens" in caplog.text and "--gen-kwargs max_gen_toks=N" in caplog.text
    assert results["n-samples"]["mini_gen_default"]["effective"] == 2
    assert "exact_match,none" in results["results"]["mini_gen_default"]


def test_prompt_and_new_tokens_fit_the_context(lm: AttnkitLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt is cut on the left to the context less max_gen_toks: a long prompt with 40 new tokens
    is its last 24 tokens; max_gen_toks (or an alias) of the context or more is refused, naming the fix."""
    assert lm.max_length == 64 and lm.max_gen_toks == 32  # the default of 256 made to fit
    calls: list[tuple[list[list[int]], int]] = []
    generate = lm.model.generate

    def spy(prompts: list[Any], n: int, **kwargs: Any) -> Any:
        calls.append(([p.tolist() for p in prompts], n))
        return generate(prompts, n, **kwargs)

    monkeypatch.setattr(lm.model, "generate", spy)
    ids = lm.tok_encode(LONG)
    assert len(ids) > 64
    for options, new in (({"max_gen_toks": 40}, 40), ({}, 32), ({"max_new_tokens": 63}, 63), ({"max_tokens": 1}, 1)):
        calls.clear()
        lm.generate_until(_requests((LONG, {"until": ["\n\n\n"], **options})))
        assert calls == [([ids[-(64 - new) :]], new)], options  # prompt + new tokens = the context
    for name in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens"):
        with pytest.raises(ValueError, match=rf"{name}=64 leaves no room for the prompt in the context of 64 "
                           r"tokens .*attnkit eval --gen-kwargs max_gen_toks=N"):  # fmt: skip
            lm.generate_until(_requests(("The cat", {name: 64})))
    with pytest.raises(ValueError, match="max_gen_toks=64 leaves no room"):
        AttnkitLM(lm.pretrained, max_gen_toks=64)
    assert AttnkitLM(lm.pretrained, max_gen_toks=63).max_gen_toks == 63
    assert AttnkitLM(lm.pretrained, max_length=16).max_gen_toks == 8


def test_gen_kwargs_are_read_as_lm_eval_reads_them() -> None:
    assert parse_gen_kwargs("max_gen_toks=32,temperature=0") == {"max_gen_toks": 32, "temperature": 0}
    assert parse_gen_kwargs(" do_sample=true, top_p=0.9,until='3' ") == {"do_sample": True, "top_p": 0.9, "until": "3"}
    assert parse_gen_kwargs({"max_gen_toks": 4}) == {"max_gen_toks": 4}
    assert parse_gen_kwargs("") is None and parse_gen_kwargs(None) is None and parse_gen_kwargs({}) is None
    for bad in ("max_gen_toks", "max_gen_toks=3,temperature", "=3", " =3"):
        with pytest.raises(ValueError, match=r"is not key=value; write comma-separated key=value pairs"):
            parse_gen_kwargs(bad)
    with pytest.raises(TypeError, match="gen_kwargs must be a dict"):
        parse_gen_kwargs(["max_gen_toks=3"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gen_kwargs", "match"),
    [
        ("num_beams=2", r"generation options \['num_beams'\] are not supported by the attnkit model"),
        ("max_gen_toks=64", r"max_gen_toks=64 leaves no room for the prompt in the context of 64 tokens"),
        ("max_new_tokens=0", r"max_new_tokens must be a positive integer, got 0"),
        ("max_gen_toks", r"'max_gen_toks' is not key=value"),
    ],
)
def test_gen_kwargs_that_cannot_work_are_refused_before_evaluating(
    llama_dir: Path, tasks_module: Path, monkeypatch: pytest.MonkeyPatch, gen_kwargs: str, match: str
) -> None:
    import lm_eval

    monkeypatch.setattr(lm_eval, "simple_evaluate", lambda **_: pytest.fail("evaluated"))
    args = ["eval", str(llama_dir), "--tasks", "mini_mc,mini_gen", "--include-path", str(tasks_module)]
    result = CliRunner().invoke(main, [*args, "--only-included", "--gen-kwargs", gen_kwargs])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    with pytest.raises(ValueError, match=match):
        api.evaluate_harness(llama_dir, "mini_gen", include_path=tasks_module, include_defaults=False,
                             gen_kwargs=gen_kwargs)  # fmt: skip
