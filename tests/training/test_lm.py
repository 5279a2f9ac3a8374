"""The `lm` task end to end: training through the CLI, metrics, checkpoints, `attnkit generate`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli
from click.testing import CliRunner

import attnkit
from attnkit.cli import main
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.errors import CheckpointError
from attnkit.tasks import load_run
from attnkit.tasks.lm import LMConfig, generate_from_run, generate_text
from attnkit.training.checkpoint import load_checkpoint_file

TINY_LM = [
    "data.builtin_documents=300",
    "model.d_model=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.dim_feedforward=128",
    "model.max_len=32",
    "trainer.max_epochs=3",
    "trainer.batch_size=16",
    "trainer.threads=1",
    "trainer.progress_bar=false",
    "optim.lr=5e-3",
    "optim.warmup=10",
]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    run_cli("train", "lm", "--output_dir", str(out), "name=tiny", *TINY_LM)
    return out / "lm" / "tiny"


def test_training_logs_text_metrics_and_learns(lm_run: Path):
    metrics = json.loads((lm_run / "metrics.json").read_text())["metrics"]
    for split in ("val", "test"):
        assert {f"{split}/{m}" for m in ("loss", "acc", "ppl", "bpc")} <= set(metrics)
        # char level: one token per character, so bpc is the per-token loss in bits = log2(ppl)
        assert metrics[f"{split}/bpc"] == pytest.approx(math.log2(metrics[f"{split}/ppl"]), rel=1e-4)
        # the logged loss is a mean over batches, ppl over tokens: close, not equal
        assert math.log(metrics[f"{split}/ppl"]) == pytest.approx(metrics[f"{split}/loss"], rel=0.05)
    cfg = LMConfig.model_validate({"data": {"builtin_documents": 300}})
    dm = LanguageModelDataModule(cfg.data, block=32)
    dm.setup()
    unigram = dm.stats()["unigram_bits_per_char"]
    assert metrics["val/bpc"] < 0.8 * unigram  # learned more than character frequencies (~4.4 bits)
    header = (lm_run / "logs" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "val/bpc" in header and "val/ppl" in header


def test_best_checkpoint_monitors_val_loss(lm_run: Path):
    ckpt = load_checkpoint_file(lm_run / "checkpoints" / "best.ckpt")
    state = next(v for k, v in ckpt["callbacks"].items() if k.startswith("ModelCheckpoint"))
    assert "'monitor': 'val/loss'" in next(k for k in ckpt["callbacks"] if k.startswith("ModelCheckpoint"))
    assert state["best_model_score"] is not None


def test_checkpoint_alone_generates_with_its_tokenizer(lm_run: Path):
    run = load_run(lm_run / "checkpoints" / "best.ckpt")
    assert run.hparams["artifacts"]["tokenizer"]["kind"] == "char"
    from attnkit.data.lm.blocks import tokenizer_of

    tokenizer = tokenizer_of(run.hparams["artifacts"])
    pieces: list[str] = []
    (text,) = generate_text(run.module.model, tokenizer, "The", max_new_tokens=40, seed=0, write=pieces.append)
    assert text.startswith("The") and len(pieces) > 3  # streamed piece by piece
    assert "".join(pieces) == text + "\n"
    again = generate_text(run.module.model, tokenizer, "The", max_new_tokens=40, seed=0)
    assert again == [text]
    greedy = generate_text(run.module.model, tokenizer, "", max_new_tokens=30, temperature=0.0, num_samples=2)
    assert greedy[0] == greedy[1]


def cli(*args: str):
    """The CLI in this process (no start-up cost); `run_cli` runs the real entry point in a subprocess."""
    return CliRunner().invoke(main, list(args))


def test_cli_generate(lm_run: Path):
    args = ["--prompt", "The old", "--max-new-tokens", "30", "--seed", "4", "--num-samples", "2", "--top-k", "5"]
    out = run_cli("generate", str(lm_run), *args, "--top-p", "0.9").stdout  # a real process
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("The old") for line in lines) and out.endswith("\n")
    # --seed makes sampling reproducible: the same texts again, in this process
    kw = dict(max_new_tokens=30, seed=4, num_samples=2, top_k=5, top_p=0.9)
    assert generate_from_run(lm_run, "The old", **kw) == lines
    # a checkpoint file works as well as a run folder; characters the tokenizer never saw become
    # <unk> instead of failing; an empty prompt starts a new document
    ckpt = str(lm_run / "checkpoints" / "best.ckpt")
    odd = cli("generate", ckpt, "--prompt", "Ωmega ☃", "--max-new-tokens", "5", "--temperature", "0")
    assert odd.exit_code == 0 and odd.stdout.startswith("Ωmega ☃")
    empty = cli("generate", ckpt, "--temperature", "0", "--max-new-tokens", "20")
    assert empty.exit_code == 0 and empty.stdout.strip()
    bad = cli("generate", ckpt, "--temperature", "-1")
    assert bad.exit_code == 2 and "temperature must be a number >= 0" in bad.stderr
    bad = cli("generate", ckpt, "--top-p", "1.5")
    assert bad.exit_code == 2 and "top_p must be None or a number in (0, 1]" in bad.stderr


def test_cli_generate_file_batched_with_stop_strings(lm_run: Path, tmp_path: Path):
    prompts = ["The old", "", "A", "Did the cat say that the dog"]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    args = ["--file", str(tmp_path / "prompts.txt"), "--temperature", "0", "--max-new-tokens", "25"]
    out_file = tmp_path / "texts.txt"
    result = cli("generate", str(lm_run), *args, "--batch-size", "3", "--out", str(out_file))
    assert result.exit_code == 0, result.stderr
    lines = out_file.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(prompts) and all(line.startswith(p) for line, p in zip(lines, prompts))
    # each line equals generating its prompt alone (greedy), whatever the batch
    alone = [generate_from_run(lm_run, p, max_new_tokens=25, temperature=0.0)[0] for p in prompts]
    assert lines == [text.replace("\\", "\\\\").replace("\n", "\\n") for text in alone]
    # stop strings cut each text before the first stop string of its continuation, streamed or batched
    stop = alone[0][len("The old") :][3:5]
    stopped = generate_from_run(lm_run, prompts, max_new_tokens=25, temperature=0.0, stop=[stop], batch_size=2)
    for p, text, full in zip(prompts, stopped, alone):
        rest = full[len(p) :]
        assert text == p + (rest[: rest.index(stop)] if stop in rest else rest)
    pieces: list[str] = []
    streamed = generate_from_run(
        lm_run, prompts[0], max_new_tokens=25, temperature=0.0, stop=[stop], write=pieces.append
    )
    assert streamed == stopped[:1] and "".join(pieces) == stopped[0] + "\n"
    bad = cli("generate", str(lm_run), "--out", str(out_file))
    assert bad.exit_code == 2 and "--out goes with --file" in bad.stderr
    bad = cli("generate", str(lm_run), "--repetition-penalty", "0")
    assert bad.exit_code == 2 and "repetition_penalty must be a number > 0" in bad.stderr


def test_cli_predict_and_test(lm_run: Path):
    result = cli("predict", str(lm_run), "The cat", "Did")
    out = result.stdout.splitlines()
    assert result.exit_code == 0 and len(out) == 2 and out[0].startswith("The cat") and out[1].startswith("Did")
    tested = cli("test", str(lm_run))  # re-evaluates the best checkpoint, bits per character included
    metrics = json.loads((lm_run / "metrics.json").read_text())["metrics"]
    line = next(ln for ln in tested.stdout.splitlines() if ln.startswith("test/bpc"))
    assert float(line.split()[1]) == pytest.approx(metrics["test/bpc"], abs=1e-4)


def test_generate_refuses_runs_of_other_tasks(lm_run: Path, tmp_path: Path):
    checkpoint = torch.load(lm_run / "checkpoints" / "best.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["task"] = "reverse"  # what a reverse run's checkpoint says
    other = tmp_path / "other.ckpt"
    torch.save(checkpoint, other)
    with pytest.raises(CheckpointError, match="is a run of task 'reverse'; this needs a run of task 'lm'"):
        generate_from_run(other)


def test_data_option_and_file_errors(tmp_path: Path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"one\n\ntwo\n\ncaf\xe9\n")
    result = cli("train", "lm", "--data", str(latin1), "--output_dir", str(tmp_path))
    assert result.exit_code == 2 and "latin1.txt:5: not valid UTF-8 at byte offset 13" in result.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = cli("train", "lm", "--data", str(empty), "--output_dir", str(tmp_path))
    assert result.exit_code == 2 and "the corpus is empty" in result.stderr
    printed = cli("train", "lm", "--data", "corpus.txt", "data.split_on=line", "--print-config").stdout
    assert "source: corpus.txt" in printed and "split_on: line" in printed


def test_training_on_a_text_file_with_bpe(tmp_path: Path):
    corpus = tmp_path / "corpus.txt"
    lines = [f"Line {i}: the {'quick' if i % 3 else 'lazy'} fox jumps over {i % 7} dogs." for i in range(200)]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    overrides = dict(o.split("=", 1) for o in TINY_LM if not o.startswith(("data.", "trainer.max_epochs")))
    data = {"source": str(corpus), "split_on": "line", "tokenizer": "bpe", "vocab_size": 300}
    result = attnkit.train(
        "lm", output_dir=str(tmp_path), name="bpe", data=data, **{"trainer.max_epochs": 1}, **overrides
    )
    assert result.metrics["val/bpc"] > 0 and result.metrics["val/ppl"] > 1
    loaded = load_run(result.run_dir)
    assert loaded.hparams["artifacts"]["tokenizer"]["kind"] == "bpe"
    assert loaded.module.model.config.vocab_size <= 300
    assert isinstance(loaded.config.data, LMDataConfig) and loaded.config.data.split_on == "line"
    (text,) = generate_from_run(result.run_dir, "Line 3", max_new_tokens=10, seed=0)
    assert text.startswith("Line 3")


def test_attention_examples_are_the_models_causal_weights_and_refuse_overlong_inputs(lm_run: Path):
    import torch

    loaded = load_run(lm_run)
    model = loaded.module.model
    [example, val_example] = loaded.task.attention_examples(loaded.module, ["The owl"], [0])
    tokenizer = loaded.task.build_datamodule(loaded.config, loaded.hparams["artifacts"]).tokenizer
    ids = tokenizer.encode("The owl", add_bos=True)
    expected = model.get_attention_maps(torch.tensor([ids]))
    assert len(example.maps) == len(expected) == model.config.num_layers
    for got, want in zip(example.maps, expected):
        assert torch.equal(got, want[0])
        assert torch.allclose(got.sum(-1), torch.ones(got.shape[:-1]), atol=1e-5)
        assert torch.all(got.triu(diagonal=1) == 0)  # causal: nothing above the diagonal
    assert len(example.query_labels) == len(ids)
    assert val_example.maps[0].shape[-1] <= model.config.max_len
    too_long = "a" * (model.config.max_len + 5)
    with pytest.raises(ValueError, match="longer than the model's context"):
        loaded.task.attention_examples(loaded.module, [too_long])
