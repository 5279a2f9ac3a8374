"""attnkit's lm-evaluation-harness model scores and generates as lm_eval's own Hugging Face backend
(``hf``, ``HFLM``) on the same weights: request by request (edge cases of the tokenisation, truncation,
batching), and on whole local tasks through ``lm_eval.simple_evaluate`` / :func:`attnkit.api.evaluate_harness`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lm_eval.api.instance import Instance
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from attnkit.lmeval import AttnkitLM

TOL = 1e-4


@pytest.fixture(scope="module")
def hf_lm(llama_dir: Path) -> Any:
    from lm_eval.models.huggingface import HFLM

    # One request per forward pass: HFLM's batches share the logits of rolling windows whose tokens
    # coincide (a repetitive text) and then score the shorter window on the wrong positions; alone, it
    # scores each window on its own, as attnkit always does (test_repetitive_text_windows_...).
    return HFLM(pretrained=str(llama_dir), device="cpu", dtype="float32", batch_size=1)


@pytest.fixture(scope="module")
def ak_lm(llama_dir: Path) -> AttnkitLM:
    return AttnkitLM(str(llama_dir), batch_size=4, device="cpu")


def requests(kind: str, args: list[tuple[Any, ...]]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


LONG = " ".join(["the small cat sat on the old red mat and then it ran under the big green tree"] * 6)
PAIRS = [
    ("Question: where is the cat?\nAnswer:", " on the mat"),
    ("Question: where is the cat?\nAnswer:", " under"),  # the same context, a one-token continuation
    ("Question: where is the cat?\nAnswer:", " tree"),
    ("The dog ran ", "over the roof."),  # the context's trailing space goes to the continuation
    ("", "The bird flew."),  # empty context: the prefix token (BOS) stands for it
    ("<s> The bird", " flew"),  # already starts with the BOS text: no second BOS
    (LONG, " and the dog saw it."),  # longer than the context of 64 tokens: cut on the left
    ("a", "b"),
    ("One two three four", " five"),
]


def test_loglikelihood_equals_the_hf_backend(hf_lm: Any, ak_lm: AttnkitLM) -> None:
    expected = hf_lm.loglikelihood(requests("loglikelihood", PAIRS), disable_tqdm=True)
    got = ak_lm.loglikelihood(requests("loglikelihood", PAIRS), disable_tqdm=True)
    assert len(got) == len(PAIRS)
    for pair, (lp, greedy), (hf_lp, hf_greedy) in zip(PAIRS, got, expected, strict=True):
        assert lp == pytest.approx(hf_lp, abs=TOL), pair
        assert greedy == hf_greedy, pair
    assert len({round(lp, 3) for lp, _ in got}) == len(PAIRS)  # the requests really differ


def test_the_tokenisation_is_the_hf_backends(hf_lm: Any, ak_lm: AttnkitLM) -> None:
    for text in ["Question: where", "<s> The bird", "", " two  spaces\n"]:
        assert ak_lm.tok_encode(text) == hf_lm.tok_encode(text), text
        assert ak_lm.tok_encode(text, add_special_tokens=False) == hf_lm.tok_encode(text, add_special_tokens=False)
    assert ak_lm.tok_encode("The cat")[0] == ak_lm.prefix_token_id == hf_lm.prefix_token_id
    assert ak_lm.eot_token_id == hf_lm.eot_token_id
    assert ak_lm.max_length == hf_lm.max_length == 64


def test_padding_and_batching_change_no_result(llama_dir: Path, ak_lm: AttnkitLM) -> None:
    """The same requests one at a time and in batches of mixed lengths (right-padded rows)."""
    alone = AttnkitLM(str(llama_dir), batch_size=1, device="cpu")
    batched = AttnkitLM(alone.pretrained, batch_size=len(PAIRS), device="cpu")
    one = alone.loglikelihood(requests("loglikelihood", PAIRS), disable_tqdm=True)
    many = batched.loglikelihood(requests("loglikelihood", PAIRS), disable_tqdm=True)
    for (a, ga), (b, gb) in zip(one, many, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
        assert ga == gb
    texts = [LONG, "The cat.", LONG[:100]]
    rolled = [alone.loglikelihood_rolling(requests("loglikelihood_rolling", [(t,) for t in texts]))]
    rolled.append(batched.loglikelihood_rolling(requests("loglikelihood_rolling", [(t,) for t in texts])))
    assert rolled[0] == pytest.approx(rolled[1], abs=1e-5)
    prompts = [("The cat", {"until": ["\n"], "max_gen_toks": 6}), (LONG, {"until": ["\n"], "max_gen_toks": 6})]
    prompts += [("A", {"until": ["\n"], "max_gen_toks": 6})]
    assert alone.generate_until(requests("generate_until", prompts)) == batched.generate_until(
        requests("generate_until", prompts)
    )


def test_rolling_loglikelihood_equals_the_hf_backend(hf_lm: Any, ak_lm: AttnkitLM) -> None:
    texts = [(LONG,), ("The cat sat.",), (LONG + " " + LONG,), ("x",)]
    expected = hf_lm.loglikelihood_rolling(requests("loglikelihood_rolling", texts), disable_tqdm=True)
    got = ak_lm.loglikelihood_rolling(requests("loglikelihood_rolling", texts), disable_tqdm=True)
    assert got == pytest.approx(expected, abs=TOL)
    assert len(ak_lm.tok_encode(LONG + " " + LONG)) > 3 * ak_lm.max_length  # several windows


def test_repetitive_text_windows_are_scored_each_on_its_own(llama_dir: Path, ak_lm: AttnkitLM) -> None:
    """Rolling windows of a repetitive text can hold the same tokens split at another place; lm_eval's
    Collator then computes them once: each must still be read at its own continuation's positions."""
    text = LONG + " " + LONG
    windows = [
        (None, *make_disjoint_window(w))
        for w in get_rolling_token_windows(ak_lm.tok_encode(text), ak_lm.prefix_token_id, ak_lm.max_length, 1)
    ]
    one_by_one = sum(ak_lm._loglikelihood_tokens([w])[0][0] for w in windows)
    assert ak_lm.loglikelihood_rolling(requests("loglikelihood_rolling", [(text,)]))[0] == pytest.approx(
        one_by_one, abs=TOL
    )


def test_generate_until_equals_the_hf_backend(hf_lm: Any, ak_lm: AttnkitLM) -> None:
    contexts = ["The cat", "Question: who ran?\nAnswer:", LONG, "Five"]
    plain = {"until": ["\n\n\n"], "max_gen_toks": 10, "do_sample": False}
    free = ak_lm.generate_until(requests("generate_until", [(c, plain) for c in contexts]))
    assert all(len(text) > 4 for text in free)
    # Stop strings that do occur in the greedy texts, so that cutting is exercised:
    stops = [free[0][2:4], free[1][3:5]]
    cut = {"until": stops, "max_gen_toks": 10, "do_sample": False}
    short = {"until": "\n", "max_gen_toks": 3, "temperature": 0.0}
    args = [(c, options) for c in contexts for options in (plain, cut, short)]
    expected = hf_lm.generate_until(requests("generate_until", args), disable_tqdm=True)
    got = ak_lm.generate_until(requests("generate_until", args), disable_tqdm=True)
    assert got == expected
    assert got[1] == free[0][: free[0].index(stops[0])]  # cut before the stop string


def _samples(results: dict[str, Any], task: str) -> list[Any]:
    return [s["resps"] for s in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def _compare(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Per-sample loglikelihoods within TOL, identical accuracy and generated texts."""
    for a, b in zip(_samples(got, "mini_mc"), _samples(expected, "mini_mc"), strict=True):
        assert [r[0][0] for r in a] == pytest.approx([r[0][0] for r in b], abs=TOL)
    for metric in ("acc,none", "acc_norm,none"):
        assert got["results"]["mini_mc"][metric] == expected["results"]["mini_mc"][metric]
    rolled = [r[0][0] for r in _samples(got, "mini_ppl")]
    assert rolled == pytest.approx([r[0][0] for r in _samples(expected, "mini_ppl")], abs=TOL)
    assert _samples(got, "mini_gen") == _samples(expected, "mini_gen")
    for metric in ("word_perplexity,none", "bits_per_byte,none"):
        assert got["results"]["mini_ppl"][metric] == pytest.approx(expected["results"]["mini_ppl"][metric], rel=1e-4)


@pytest.fixture(scope="module")
def hf_results(llama_dir: Path, tasks_module: Path) -> dict[str, Any]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    return lm_eval.simple_evaluate(
        model="hf",
        model_args={"pretrained": str(llama_dir), "device": "cpu", "dtype": "float32"},
        tasks=["mini_mc", "mini_gen", "mini_ppl"],
        task_manager=TaskManager(include_path=str(tasks_module), include_defaults=False),
        batch_size=4,
        log_samples=True,
        bootstrap_iters=0,
    )


def test_tasks_score_as_with_the_hf_backend(llama_dir: Path, tasks_module: Path, hf_results: dict[str, Any]) -> None:
    from attnkit import api

    got = api.evaluate_harness(
        llama_dir,
        ["mini_mc", "mini_gen", "mini_ppl"],
        include_path=tasks_module,
        include_defaults=False,
        batch_size=3,
        log_samples=True,
        bootstrap_iters=0,
    )
    _compare(got, hf_results)
    assert len(got["samples"]["mini_mc"]) == 12
    assert 0 < got["results"]["mini_mc"]["acc,none"] < 1  # random weights, yet not all right or all wrong
    table = api.harness_table(got)
    assert "mini_mc" in table and "acc" in table and "bits_per_byte" in table


def test_an_attnkit_model_folder_scores_the_same(
    llama_dir: Path, tasks_module: Path, hf_results: dict[str, Any], tmp_path: Path
) -> None:
    from attnkit import api

    folder = tmp_path / "imported"
    api.import_model(llama_dir, folder)
    got = api.evaluate_harness(
        api.load_model(folder),
        "mini_mc,mini_gen,mini_ppl",
        include_path=[tasks_module],
        include_defaults=False,
        log_samples=True,
        bootstrap_iters=0,
    )
    _compare(got, hf_results)


def test_lm_eval_knows_the_model_by_name(llama_dir: Path, tasks_module: Path) -> None:
    """After ``import attnkit.lmeval`` lm_eval's registry has "attnkit" and still all of its own models."""
    import lm_eval
    from lm_eval.api.registry import get_model
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    assert get_model("attnkit") is AttnkitLM
    assert get_model("hf") is HFLM
    results = lm_eval.simple_evaluate(
        model="attnkit",
        model_args=f"pretrained={llama_dir},max_length=48",
        tasks=["mini_mc"],
        task_manager=TaskManager(include_path=str(tasks_module), include_defaults=False),
        batch_size=2,
        limit=3,
        bootstrap_iters=0,
    )
    assert results is not None and len(results["samples"]["mini_mc"]) == 3
