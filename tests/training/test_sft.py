"""``attnkit train sft``: a tiny random Llama with a ChatML template learns generated arithmetic conversations
(with a system prompt), then answers unseen questions through ``attnkit chat``, ``attnkit serve`` and, exported
with ``--merge --format hf``, through transformers; LoRA is the default; the report shows replies before and
after training."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from attnkit import api
from attnkit.errors import ConfigError
from attnkit.tasks.sft import SFTConfig
from chat_models import build_chat_model

sys.path.insert(0, str(Path(__file__).parents[1] / "serve"))  # the server helpers shared with tests/serve
from serve_helpers import API_KEY, start_server, stop_server

SYSTEM = "You add numbers."
# The question ends the same way in every phrasing: an unseen (sum, phrasing) pair is a question whose sum the
# model has learnt in the other phrasings (val and test acc 1.0 on 6 of 6 seeds, 0.98 at the least; with three
# unrelated phrasings and a random split, 0.83 to 1.0).
PHRASINGS = ["What is {a} plus {b}?", "Please, what is {a} plus {b}?", "Tell me: what is {a} plus {b}?"]


def _line(a: int, b: int, p: int) -> str:
    messages = [
        {"role": "user", "content": PHRASINGS[p].format(a=a, b=b)},
        {"role": "assistant", "content": str(a + b)},
    ]
    return json.dumps({"system": SYSTEM, "messages": messages})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every sum of two digits in three phrasings; for 40 pairs of digits one phrasing is held out (20 in val,
    20 in test: unseen questions), the pair's two other phrasings are trained on."""
    folder = tmp_path_factory.mktemp("sft_data")
    rng = random.Random(0)
    pairs = [(a, b) for a in range(10) for b in range(10)]
    rng.shuffle(pairs)
    held = [(a, b, rng.randrange(len(PHRASINGS))) for a, b in pairs[:40]]
    items = [(a, b, p) for a in range(10) for b in range(10) for p in range(len(PHRASINGS)) if (a, b, p) not in held]
    rng.shuffle(items)
    parts = {"train": items, "val": held[:20], "test": held[20:]}
    out = {}
    for name, rows in parts.items():
        out[name] = folder / f"{name}.jsonl"
        out[name].write_text("\n".join(_line(*x) for x in rows) + "\n")
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ChatML chat model of tests/chat_models.py (2 layers, GQA), widened to 64 (feed-forward 256): at width
    32 whether the held-out questions are learned depends on the seed."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = build_chat_model(tmp_path_factory.mktemp("sft_base"), context=128)
    config = AutoConfig.from_pretrained(folder)
    config.hidden_size, config.intermediate_size, config.initializer_range = 64, 256, 0.1
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


def _overrides(base: Path, data: dict[str, Path], out: Path, **extra: object) -> dict[str, object]:
    return {
        "model.init": str(base),
        "data.source": str(data["train"]),
        "data.val_source": str(data["val"]),
        "data.test_source": str(data["test"]),
        "trainer.batch_size": 16,
        "trainer.threads": 1,
        "trainer.progress_bar": False,
        "trainer.report": False,
        "optim.warmup": 10,
        "seed": 0,
        "output_dir": str(out),
        **extra,
    }


@pytest.fixture(scope="module")
def run(base: Path, data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Full fine-tuning (``model.lora=null``): the tiny random model learns the table in a few seconds."""
    out = tmp_path_factory.mktemp("sft_runs")
    result = api.train(
        "sft", **_overrides(base, data, out, **{"model.lora": None, "trainer.max_epochs": 50, "optim.lr": 3e-3})
    )
    return result.run_dir


def _questions(path: Path) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["messages"][0]["content"], r["messages"][1]["content"]) for r in rows]


def test_it_learns_and_chat_answers_unseen_questions(run: Path, data: dict[str, Path]) -> None:
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["val/acc"] >= 0.95 and metrics["test/acc"] >= 0.95
    questions = _questions(data["test"])[:6]  # in no training conversation
    script = "".join(f"{q}\n/reset\n" for q, _ in questions)
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit", "chat", str(run), "--system", SYSTEM, "--temperature", "0",
         "--max-new-tokens", "6"],
        input=script, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == [answer for _, answer in questions]


def test_test_data_scores_a_conversation_file(run: Path, data: dict[str, Path]) -> None:
    metrics = api.evaluate(run, data["val"], batch_size=8)
    stored = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["test/acc"] == pytest.approx(stored["val/acc"]) and metrics["test/loss"] == pytest.approx(
        stored["val/loss"], rel=1e-5
    )


def test_serve_answers_with_the_fine_tuned_model(run: Path, data: dict[str, Path], tmp_path: Path) -> None:
    question, answer = _questions(data["val"])[0]
    server = start_server(run, "--api-key", API_KEY, "--model-name", "sft", log=tmp_path / "serve.log")
    try:
        body = {
            "model": "sft",
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            "max_tokens": 6,
            "temperature": 0,
        }
        status, reply = server.request("POST", "/v1/chat/completions", body)
    finally:
        stop_server(server.process)
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"] == answer


def test_export_merge_hf_gives_transformers_the_same_greedy_reply(
    run: Path, data: dict[str, Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "hf"
    run_cli("export", str(run), "--out", str(out), "--merge", "--format", "hf")
    question, answer = _questions(data["test"])[1]
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    hf_tok = AutoTokenizer.from_pretrained(out)
    ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert ids == api.load_model(run).encode_chat(messages)  # the template came along
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        new = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids) :]
    reply = hf_tok.decode(new, skip_special_tokens=True)
    assert reply == api.load_model(run).chat(messages, 6) == answer


def test_the_report_shows_replies_before_and_after(run: Path) -> None:
    from attnkit.viz.report import render_report

    page = render_report(run)
    assert "not available" not in page  # every section drew, the attention maps of validation conversations too
    section = page[page.index('id="replies"') :]
    assert "before training" in section and "after" in section
    assert section.count("<tr>") == 4  # the header and three validation conversations


def test_lora_is_the_default_and_chat_loads_base_and_adapters(
    base: Path, data: dict[str, Path], tmp_path: Path
) -> None:
    cfg = SFTConfig.model_validate({"model": {"init": str(base)}})
    assert cfg.model.lora is not None and cfg.model.lora.rank == 8
    assert SFTConfig.model_validate({"model": {"init": str(base), "lora": None}}).model.lora is None
    result = api.train("sft", **_overrides(base, data, tmp_path, **{"trainer.max_epochs": 1}))
    checkpoint = torch.load(result.run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["state_dict"] and all("lora" in k for k in checkpoint["state_dict"])  # adapters only
    model = api.load_model(result.run_dir)  # base + adapters, merged; the run's ChatML template
    assert model.chat_template is not None and "<|im_start|>" in model.chat_template.source
    assert isinstance(model.chat([{"role": "user", "content": "1+1=?"}], 4), str)


def test_config_errors_say_what_to_set(base: Path, data: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"set model\.init=FOLDER"):
        api.train("sft", **{"data.source": str(data["train"]), "model.lora": None, "output_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="longer than the context"):
        api.train("sft", **_overrides(base, data, tmp_path, **{"model.max_len": 4096}))
