"""``attnkit eval`` end to end (a real subprocess), and the errors of the command, the API and the adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit import api
from attnkit.cli import main
from attnkit.interop import Pretrained
from attnkit.lmeval import AttnkitLM
from attnkit.models import BertConfig, BertEncoder


def test_attnkit_eval_prints_the_table_and_writes_json(llama_dir: Path, tasks_module: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "results.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}  # offline: set by tasks_module
    args = ["eval", str(llama_dir), "--tasks", "mini_mc,mini_gen", "--include-path", str(tasks_module)]
    args += ["--only-included", "--limit", "4", "--batch-size", "2", "--output", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "|mini_mc |" in proc.stdout and "|acc" in proc.stdout and "exact_match" in proc.stdout
    results = json.loads(out.read_text())
    expected = api.evaluate_harness(
        llama_dir, ["mini_mc"], include_path=tasks_module, include_defaults=False, limit=4, bootstrap_iters=0
    )
    assert results["results"]["mini_mc"]["acc,none"] == expected["results"]["mini_mc"]["acc,none"]
    assert results["n-samples"]["mini_mc"]["effective"] == 4
    assert "samples" not in results  # only with --log-samples


def test_unknown_task_names_close_matches(llama_dir: Path, tasks_module: Path) -> None:
    unknown = r"task 'mini_mcc' \(did you mean mini_mc, .*\): no such task, group or tag in /"
    with pytest.raises(ValueError, match=unknown):
        api.evaluate_harness(llama_dir, "mini_gen,mini_mcc", include_path=tasks_module, include_defaults=False)
    result = CliRunner().invoke(
        main, ["eval", str(llama_dir), "--tasks", "mini_pl", "--include-path", str(tasks_module), "--only-included"]
    )
    assert result.exit_code == 2
    assert "unknown lm-evaluation-harness task 'mini_pl' (did you mean mini_ppl" in result.output


def test_arguments_that_cannot_work_are_refused(llama_dir: Path, tasks_module: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no task given"):
        api.evaluate_harness(llama_dir, " , ", include_path=tasks_module, include_defaults=False)
    with pytest.raises(ValueError, match="needs an include_path"):
        api.evaluate_harness(llama_dir, "mini_mc", include_defaults=False)
    with pytest.raises(FileNotFoundError, match="is not a folder of lm-evaluation-harness task"):
        api.evaluate_harness(llama_dir, "mini_mc", include_path=tmp_path / "nowhere", include_defaults=False)
    with pytest.raises(FileNotFoundError, match="no model at"):
        api.evaluate_harness(tmp_path / "missing", "mini_mc", include_path=tasks_module, include_defaults=False)
    lm = AttnkitLM(str(llama_dir), device="cpu")
    with pytest.raises(ValueError, match="batch_size='auto' is not supported"):
        AttnkitLM(lm.pretrained, batch_size="auto")
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        AttnkitLM(lm.pretrained, batch_size=0)
    with pytest.raises(ValueError, match="longer than the model's context of 64 tokens"):
        AttnkitLM(lm.pretrained, max_length=65)
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        AttnkitLM(lm.pretrained, dtype="float8")
    with pytest.raises(ValueError, match=r"generation options \['num_beams'\] are not supported"):
        lm.generation_settings({"until": ["."], "num_beams": 2})
    with pytest.raises(ValueError, match="leaves no room for the prompt"):
        lm.generate_until([_request(("The cat", {"max_gen_toks": 64}))])


def _request(args: tuple[object, ...]) -> object:
    from lm_eval.api.instance import Instance

    return Instance(request_type="generate_until", doc={}, arguments=args, idx=0)


def test_a_model_that_is_not_a_language_model_is_refused(tmp_path: Path) -> None:
    config = BertConfig(vocab_size=30, d_model=16, num_heads=2, num_layers=1, dim_feedforward=32, max_len=16)
    encoder = Pretrained(BertEncoder(config), "bert", None, tmp_path)
    with pytest.raises(TypeError, match=r"holds a BertEncoder \('bert'\), not a language model"):
        AttnkitLM(encoder)


def test_sampling_follows_the_seed(llama_dir: Path) -> None:
    """do_sample=True samples (temperature, top_k...); greedy otherwise, whatever the temperature."""
    lm = AttnkitLM(str(llama_dir), batch_size=2, device="cpu")
    hot = ("The cat", {"until": ["\n\n\n"], "max_gen_toks": 12, "do_sample": True, "temperature": 5.0})
    texts = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        texts.append(lm.generate_until([_request(hot), _request(("A", hot[1]))]))
    assert texts[0] == texts[1] != texts[2]
    greedy = lm.generate_until([_request(("The cat", {"max_gen_toks": 12, "temperature": 5.0}))])
    torch.manual_seed(3)
    assert lm.generate_until([_request(("The cat", {"max_gen_toks": 12, "do_sample": False}))]) == greedy


def test_without_lm_eval_the_api_says_what_to_install(monkeypatch: pytest.MonkeyPatch, llama_dir: Path) -> None:
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'attnkit\[eval\]'"):
        api.evaluate_harness(llama_dir, "mini_mc")


def test_cuda_asked_for_without_cuda_runs_on_the_cpu(llama_dir: Path) -> None:
    """lm_eval's command line passes device="cuda" unless told otherwise (its HF backend falls back too)."""
    lm = AttnkitLM(str(llama_dir), device="cuda")
    assert lm.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert next(lm.model.parameters()).device.type == lm.device.type
