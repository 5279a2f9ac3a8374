"""``attnkit inspect lens|attribution|patch|heads`` on a tiny model folder (in process): the JSON's keys and
shapes, ``--out`` writes a png, and each user error exits 2 with its message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import main
from attnkit.interop import save_model
from attnkit.models.bert import BertConfig, BertEncoder
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.text.tokenizers import build_tokenizer

TEXTS = ["the cat sat on the mat", "a dog ran to the sun"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tok = build_tokenizer("char", TEXTS)
    root = tmp_path_factory.mktemp("inspect")
    torch.manual_seed(0)
    lm = LanguageModel(LanguageModelConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2, num_layers=2,
                                           dim_feedforward=32, max_len=48))  # fmt: skip
    bert = BertEncoder(BertConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2, num_layers=1,
                                  dim_feedforward=16, max_len=32))  # fmt: skip
    return save_model(lm, root / "lm", tokenizer=tok), save_model(bert, root / "bert", tokenizer=tok)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["inspect", *args])
    return result.exit_code, result.stdout, result.stderr


def test_each_command_prints_json_and_writes_a_figure(folders: tuple[Path, Path], tmp_path: Path) -> None:
    lm = str(folders[0])
    code, out, err = _run(
        "lens", lm, "the cat", "--top", "2", "--target", "t", "--json", "--out", str(tmp_path / "l.png")
    )
    assert code == 0, err
    lens = json.loads(out)
    assert {"tokens", "layers", "top", "next_prob", "target", "target_prob"} <= set(lens)
    length = len(lens["tokens"])  # BOS + 7 characters
    assert length == 8 and len(lens["top"]) == 3 and len(lens["top"][0][0]) == 2 and len(lens["next_prob"][0]) == 7
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
    code, out, err = _run("attribution", lm, "the cat", "--target", "a", "--against", "o", "--json")
    att = json.loads(out)
    assert code == 0 and {"heads", "mlps", "embed", "rest", "total", "target", "against"} <= set(att)
    assert sum(map(sum, att["heads"])) + sum(att["mlps"]) + att["embed"] + att["rest"] == pytest.approx(
        att["total"], abs=1e-4
    )
    code, out, err = _run(
        "patch", lm, "the cat", "the mat", "--target", "s", "--json", "--out", str(tmp_path / "p.png")
    )
    patch = json.loads(out)
    assert code == 0, err
    assert {"scores", "raw", "clean_metric", "corrupted_metric", "clean_tokens", "corrupted_tokens", "by"} <= set(patch)
    assert patch["metric"] == "logprob" and len(patch["scores"]) == 2 and len(patch["scores"][0]) == length
    assert (tmp_path / "p.png").stat().st_size > 1000
    code, out, err = _run(
        "patch", lm, "the cat", "the mat", "--target", "s", "--against", "t", "--by", "head", "--json"
    )
    assert code == 0 and json.loads(out)["metric"] == "logit_diff" and len(json.loads(out)["scores"][0]) == 2
    code, out, err = _run("patch", lm, "the cat", "--ablate", "mean", "--json")
    assert code == 0 and json.loads(out)["by"] == "ablate-mean"
    code, out, err = _run("heads", lm, "--length", "6", "--json", "--out", str(tmp_path / "h.png"))
    heads = json.loads(out)
    assert code == 0 and {"previous_token", "duplicate_token", "induction", "top"} <= set(heads)
    assert len(heads["induction"]) == 2 and len(heads["induction"][0]) == 2 and (tmp_path / "h.png").is_file()
    code, out, err = _run("heads", lm, "--length", "6")  # the summary, not JSON
    assert code == 0 and out.startswith("previous_token: L")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("patch", "LM", "the cat", "the cats"), "CLEAN is 8 tokens, CORRUPTED 9"),
        (("attribution", "LM", "the cat", "--target", "ca"), "unknown target token 'ca'"),
        (("lens", "LM", "the cat", "--target", "q"), "unknown target token 'q'"),
        (("lens", "BERT", "the cat"), "BertEncoder ('bert'), which attnkit inspect lens does not support"),
        (("heads", "BERT"), "attnkit inspect heads does not support"),
        (("patch", "LM", "the cat"), "give a CORRUPTED text"),
        (("lens", "LM", "the cat", "--out", "x.jpg"), "write a .png or .svg file"),
        (("heads", "LM", "--length", "40"), "exceed the model's context of 48"),
    ],
)
def test_errors_exit_2_with_their_message(folders: tuple[Path, Path], args: tuple[str, ...], message: str) -> None:
    paths = {"LM": str(folders[0]), "BERT": str(folders[1])}
    code, out, err = _run(*(paths.get(a, a) for a in args))
    assert code == 2, (out, err)
    assert message in err
