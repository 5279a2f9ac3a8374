"""lm-evaluation-harness's ``local-completions`` model (OpenAI's completions API: token-id prompts, ``echo``,
``logprobs``) pointed at a real ``attnkit serve`` scores local tasks as attnkit's in-process lm-eval model does
on the same weights: per-sample loglikelihoods within 1e-4, the same accuracy, the same generated texts.

The model and the tasks are ``tests/lmeval``'s (a random 2-layer Llama with a BOS-adding tokenizer, context 64;
a multiple-choice, a generation and a perplexity task read from local files): nothing is downloaded."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import Server, start_server, stop_server

TOL = 1e-4
LENGTH = 48  # the in-process model's max_length: its rolling windows; local-completions gets LENGTH + 2 (below)
TASKS = ["mini_mc", "mini_gen", "mini_ppl"]


def _lmeval_models() -> Any:
    """tests/lmeval/conftest.py as a module (its builders of the model and the tasks)."""
    path = Path(__file__).parents[1] / "lmeval" / "conftest.py"
    spec = importlib.util.spec_from_file_location("lmeval_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Server]]:
    """The Llama folder, the tasks folder (nothing from the Hub meanwhile) and the server serving the Llama."""
    models = _lmeval_models()
    root = tmp_path_factory.mktemp("lmeval-serve")
    llama = models.build_llama(root / "llama")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(root / "hf-datasets"))
        tasks = models.write_tasks(root / "tasks", root / "hf-datasets")
        server = start_server(llama, "--model-name", "tiny-llama", log=root / "stderr.txt")
        try:
            yield llama, tasks, server
        finally:
            stop_server(server.process)


def _evaluate(model: Any, model_args: dict[str, Any], tasks: Path) -> dict[str, Any]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args or None,
        tasks=TASKS,
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        log_samples=True,
        bootstrap_iters=0,
    )
    assert results is not None
    return dict(results)


def _samples(results: dict[str, Any], task: str) -> list[Any]:
    return [s["resps"] for s in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def test_local_completions_against_the_server_scores_as_in_process(setup: tuple[Path, Path, Server]) -> None:
    llama, tasks, server = setup
    from attnkit.lmeval import AttnkitLM

    expected = _evaluate(AttnkitLM(str(llama), max_length=LENGTH, batch_size=4, device="cpu"), {}, tasks)
    got = _evaluate(
        "local-completions",
        {
            "base_url": server.base_url + "/completions",
            "model": "tiny-llama",
            "tokenizer": str(llama),  # the served model's tokenizer: the same ids as the in-process model
            "tokenizer_backend": "huggingface",
            "tokenized_requests": True,  # prompts sent as token ids
            "add_bos_token": True,  # as the in-process model (and HF's backend) encode
            "max_length": LENGTH + 2,  # local-completions' rolling windows are max_length - 2 tokens
            "num_concurrent": 1,
            "max_retries": 1,
        },
        tasks,
    )
    mc = _samples(got, "mini_mc")
    assert len(mc) == 12
    for a, b in zip(mc, _samples(expected, "mini_mc"), strict=True):
        assert [r[0][0] for r in a] == pytest.approx([r[0][0] for r in b], abs=TOL)
        assert [r[0][1] for r in a] == [r[0][1] for r in b]  # is_greedy
    for metric in ("acc,none", "acc_norm,none"):
        assert got["results"]["mini_mc"][metric] == expected["results"]["mini_mc"][metric]
    assert 0 < got["results"]["mini_mc"]["acc,none"] < 1
    rolled = [r[0][0] for r in _samples(got, "mini_ppl")]
    assert rolled == pytest.approx([r[0][0] for r in _samples(expected, "mini_ppl")], abs=TOL)
    assert _samples(got, "mini_gen") == _samples(expected, "mini_gen")
