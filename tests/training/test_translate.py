"""The translate task end to end: training, test metrics (BLEU, chrF, exact match) and `attnkit translate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import run_cli

import attnkit
import background_runs
from attnkit.api import build_config
from attnkit.config import ConfigError
from attnkit.data.generators.numbers import english_number, spanish_number
from attnkit.errors import CheckpointError
from attnkit.tasks import load_run
from attnkit.tasks.translate import corpus_scores, read_lines, translate_run, translate_texts
from attnkit.text.tokenizers import tokenizer_from_dict
from cli_inprocess import cli_in_process, cli_ok

TINY = [
    "data.num_pairs=5000",
    "trainer.max_epochs=4",
    "trainer.threads=1",
    "trainer.progress_bar=false",
    "decode.beam_size=2",
    "optim.warmup=30",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default model trained briefly on 4,500 built-in pairs, through the real CLI."""
    out = tmp_path_factory.mktemp("translate")
    run_cli("train", "translate", "--output_dir", str(out), "name=tiny", *TINY)
    return out / "translate" / "tiny"


def test_training_logs_bleu_chrf_and_exact_match(run: Path):
    saved = json.loads((run / "metrics.json").read_text())
    metrics = saved["metrics"]
    assert saved["task"] == "translate"
    assert {"val/acc", "val/loss", "test/acc", "test/loss", "test/bleu", "test/chrf", "test/exact"} <= set(metrics)
    assert metrics["val/acc"] > 0.85  # teacher-forced token accuracy, padding excluded
    assert metrics["test/exact"] > 0.4  # already learning after 284 steps (measured: 0.556)
    assert 50 < metrics["test/bleu"] <= 100 and 70 < metrics["test/chrf"] <= 100
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["decode"]["beam_size"] == 2 and cfg["label_smoothing"] == 0.1

    out = cli_ok("test", str(run)).stdout
    values = dict(line.split() for line in out.splitlines())
    assert float(values["test/exact"]) == pytest.approx(metrics["test/exact"], abs=1e-4)
    assert float(values["test/bleu"]) == pytest.approx(metrics["test/bleu"], abs=1e-3)


def test_checkpoint_alone_translates(run: Path):
    loaded = load_run(run / "checkpoints" / "best.ckpt")
    assert loaded.module.model.config.share_embeddings
    module = loaded.module
    numbers = range(3, 1000, 20)
    texts = [english_number(n) for n in numbers]
    greedy = translate_texts(module, texts, beam_size=1)
    beam = translate_texts(module, texts, beam_size=3)
    assert len(greedy) == len(beam) == 50 and all(isinstance(t, str) and t for t in greedy)
    # Learning after 4 short epochs: 38 of these 50 exactly right (measured; the test split: 0.556)
    assert sum(g == spanish_number(n) for g, n in zip(greedy, numbers)) >= 25
    assert loaded.task.predict(module, texts[:1]) == translate_texts(module, texts[:1])
    with pytest.raises(ValueError, match="beam size must be an int >= 1"):
        translate_texts(module, texts, beam_size=0)


def test_cli_translate_arguments_files_and_edge_cases(run: Path, tmp_path: Path):
    proc = run_cli("translate", str(run), "seven", "", "I have one book.", "--beam", "1")  # a real process
    lines = proc.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # one line per input, blank for blank
    module = load_run(run).module
    assert lines[:3] == translate_texts(module, ["seven", "", "I have one book."], beam_size=1)

    src = tmp_path / "in.txt"
    src.write_text("twelve\n\n¿Ñandú 😀 zzz?\n" + "nine " * 80 + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    proc = cli_ok("translate", str(run), "--file", str(src), "--out", str(out))
    written = out.read_text(encoding="utf-8").split("\n")
    assert len(written) == 5 and written[1] == "" and written[4] == ""
    assert written[2] != ""  # unknown characters and words are <unk>, not a crash
    assert "input 4 has" in proc.stderr and "data.max_len=64" in proc.stderr  # cut, with a warning
    assert proc.stdout == ""
    assert written[0] == translate_texts(module, ["twelve"])[0]  # the run's beam size by default


def test_translate_errors(run: Path, tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"seven\n" + "cañón\n".encode("latin-1"))
    proc = cli_in_process("translate", str(run), "--file", str(bad))
    assert proc.returncode == 2 and "bad.txt:2: not UTF-8" in proc.stderr
    with pytest.raises(ValueError, match="not UTF-8"):
        read_lines(bad)
    with pytest.raises(CheckpointError, match=r"no model at .*nothing: nothing is there"):
        translate_run(tmp_path / "nothing", ["seven"])
    with pytest.raises(TypeError, match="expects a list of texts"):
        translate_texts(load_run(run).module, "seven")  # type: ignore[arg-type]


def test_attention_examples_show_cross_attention(run: Path):
    loaded = load_run(run)
    [example, val_example] = loaded.task.attention_examples(loaded.module, ["forty-two"], [0])
    layers = loaded.module.model.config.decoder_layers
    heads = loaded.module.model.config.num_heads
    assert len(example.maps) == layers
    for m in example.maps:
        assert m.shape == (heads, len(example.query_labels), len(example.key_labels))
        torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:2]))
    assert example.key_labels[-1] == "<eos>" and "".join(example.key_labels[:-1]) == "forty-two"
    assert example.query_axis == "output token" and "forty-two" in example.title
    assert "validation example 0" in val_example.title


def test_config_defaults_and_errors():
    cfg = build_config("translate", None, {"trainer.threads": 1, "optim.lr": 1e-3})
    assert cfg.decode.model_dump() == {"beam_size": 4, "length_penalty": 1.0, "max_len": None}
    assert cfg.data.source == "numbers" and cfg.model.share_embeddings and cfg.label_smoothing == 0.1
    # overriding one key of a section keeps the task's other defaults
    assert (cfg.trainer.max_epochs, cfg.trainer.batch_size, cfg.optim.warmup, cfg.optim.lr) == (5, 64, 200, 1e-3)
    with pytest.raises(ConfigError, match=r"data\.shared_vocab=true, or model\.share_embeddings=false"):
        build_config("translate", None, {"data.shared_vocab": False})
    with pytest.raises(ConfigError, match=r"decode\.beam: unknown key"):
        build_config("translate", None, {"decode.beam": 3})


def test_trains_on_a_pairs_file_with_separate_character_vocabularies(tmp_path: Path):
    rows = [f"{english_number(n)}\t{spanish_number(n)}\tCC-BY 2.0 (France)\n" for n in range(0, 1000, 3)]
    path = tmp_path / "spa.txt"
    path.write_text("".join(rows) + "broken line\n", encoding="utf-8")
    overrides = {
        "data.source": str(path),
        "data.reverse": True,
        "data.tokenizer": "char",
        "data.shared_vocab": False,
        "data.skip_bad_lines": True,
        "model.share_embeddings": False,
        "model.d_model": 32,
        "model.dim_feedforward": 64,
        "model.num_layers": 1,
        "trainer.max_epochs": 1,
        "trainer.threads": 1,
        "trainer.progress_bar": False,
        "decode.beam_size": 1,
        "decode.max_len": 30,
    }
    with pytest.warns(UserWarning, match="skipped 1 line"):
        result = attnkit.train("translate", output_dir=str(tmp_path), name="file", **overrides)
    assert set(result.metrics) >= {"test/bleu", "test/chrf", "test/exact"}
    art = result.module.hparams["artifacts"]
    assert art["src_tokenizer"]["kind"] == "char" and art["tgt_tokenizer"] is not None
    src_vocab = tokenizer_from_dict(art["src_tokenizer"]).vocab
    assert "ñ" not in src_vocab and "é" in src_vocab  # reversed: Spanish is the source ("dieciséis")
    assert result.model.src_embedding is not result.model.tgt_embedding
    [spanish] = translate_texts(result.module, ["dieciséis"])
    assert isinstance(spanish, str)


def test_corpus_scores():
    scores = corpus_scores(["Veo un perro.", "Hola."], ["Veo un perro.", "Adiós."])
    assert scores["exact"] == 0.5
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    perfect = corpus_scores(["a b c d"], ["a b c d"])
    assert perfect["bleu"] == pytest.approx(100) and perfect["exact"] == 1.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_scores(["a", "b"], ["a"])


DEFAULT_RUN = background_runs.declare(
    "translate-default",
    ["train", "translate", "--output_dir", "{out}", "name=default", "trainer.threads=1", "trainer.progress_bar=false"],
)


@pytest.mark.slow
@pytest.mark.background("translate-default")
@pytest.mark.timeout(3000)
def test_translate_default_config_reaches_99_percent_exact_match():
    """The README's figure: the default config (one thread) on the built-in data; about 2.5 min, in the background."""
    out, _ = DEFAULT_RUN.result()
    metrics = json.loads((out / "translate" / "default" / "metrics.json").read_text())
    assert metrics["epochs"] == 5
    assert metrics["metrics"]["test/exact"] >= 0.99
    assert metrics["metrics"]["test/bleu"] >= 99.0
