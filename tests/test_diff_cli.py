"""``attnkit diff BASE TUNED --prompts FILE`` (in process) on two tiny model folders: a base and its copy with one
head's query/key weights moved; the JSON ranks that head first, ``--out`` writes a figure, the summary names it;
and each user error exits 2 with its message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.api import diff_models
from attnkit.api.diffing import read_prompts
from attnkit.cli import main
from attnkit.interop import save_model
from attnkit.models.bert import BertConfig, BertEncoder
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.text.tokenizers import build_tokenizer

TEXTS = ["the cat sat on the mat", "a dog ran to the sun"]


def _lm(vocab: int) -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(LanguageModelConfig(vocab_size=vocab, d_model=16, num_heads=2, num_layers=2,
                                             dim_feedforward=32, max_len=48))  # fmt: skip


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tok = build_tokenizer("char", TEXTS)
    root = tmp_path_factory.mktemp("diff")
    base = _lm(tok.vocab_size)
    tuned = _lm(tok.vocab_size)
    with torch.no_grad():  # layer 1, head 1: its query and key rows (in_proj is [q; k; v], each [H * hd, D])
        w = tuned.decoder.layers[1].self_attn.in_proj.weight
        w[8:16].mul_(4.0)
        w[24:32].mul_(4.0)
    other = build_tokenizer("char", ["xyz uvw"])
    bert = BertEncoder(BertConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2, num_layers=1,
                                  dim_feedforward=16, max_len=32))  # fmt: skip
    prompts = root / "prompts.txt"
    prompts.write_text("the cat sat\n\n  \na dog ran to the mat\n")
    return {
        "base": save_model(base, root / "base", tokenizer=tok),
        "tuned": save_model(tuned, root / "tuned", tokenizer=tok),
        "other_tok": save_model(_lm(other.vocab_size), root / "other", tokenizer=other),
        "bert": save_model(bert, root / "bert", tokenizer=tok),
        "prompts": prompts,
    }


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["diff", *args])
    return result.exit_code, result.stdout, result.stderr


def test_diff_prints_json_ranks_the_changed_head_first_and_draws(folders: dict[str, Path], tmp_path: Path) -> None:
    base, tuned, prompts = (str(folders[k]) for k in ("base", "tuned", "prompts"))
    code, out, err = _run(base, tuned, "--prompts", prompts, "--json", "--top", "2", "--out", str(tmp_path / "d.png"))
    assert code == 0, err
    result = json.loads(out)
    assert result["command"] == "diff" and result["prompts"] == 2
    assert len(result["layer_kl"]) == 3 and len(result["pattern_change"]) == 2 and len(result["top_pattern"]) == 2
    assert (result["top_pattern"][0]["layer"], result["top_pattern"][0]["head"]) == (1, 1)
    assert result["layer_kl"][0] == pytest.approx(0, abs=1e-6) and result["layer_kl"][-1] > 0
    assert [u["name"] for u in result["weight_updates"]] == ["decoder.layers.1.self_attn.in_proj.weight"]
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"

    code, out, err = _run(base, tuned, "--prompts", prompts)
    assert code == 0, err
    assert "2 prompt(s)" in out and "heads by pattern change: L1H1 " in out
    assert "1 weight(s) changed" in out and "decoder.layers.1.self_attn.in_proj.weight" in out


def test_the_python_api_takes_a_list_and_jsonl_prompts(folders: dict[str, Path], tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(json.dumps({"prompt": "the cat sat"}) + "\n" + json.dumps("a dog ran") + "\n")
    assert read_prompts(jsonl) == ["the cat sat", "a dog ran"]
    same = diff_models(folders["base"], folders["base"], ["the cat sat", "a dog ran"])
    assert same["weight_updates"] == [] and max(map(max, same["pattern_change"])) == 0.0


@pytest.mark.parametrize(
    ("which", "prompts", "message"),
    [
        ("bert", "the cat", "BertEncoder"),
        ("other_tok", "the cat", "tokenizers encode 'the cat' differently"),
        ("tuned", "", "has no prompts (every line is blank)"),
        ("tuned", "{bad json", "is not JSON"),
        ("tuned", '{"messages": []}', "has no prompt: give a string, or an object with a 'prompt'"),
        ("tuned", '""', "diff needs at least 2"),
    ],
)
def test_user_errors_exit_2_with_their_message(
    folders: dict[str, Path], tmp_path: Path, which: str, prompts: str, message: str
) -> None:
    path = tmp_path / ("p.jsonl" if prompts.startswith(("{", '"')) else "p.txt")
    path.write_text(prompts)
    code, _, err = _run(str(folders["base"]), str(folders[which]), "--prompts", str(path))
    assert code == 2 and message in err, err


def test_a_missing_prompts_file_and_a_bad_top_are_usage_errors(folders: dict[str, Path], tmp_path: Path) -> None:
    code, _, err = _run(str(folders["base"]), str(folders["tuned"]), "--prompts", str(tmp_path / "none.txt"))
    assert code == 2 and "does not exist" in err
    code, _, err = _run(str(folders["base"]), str(folders["tuned"]), "--prompts", str(folders["prompts"]), "--top", "0")
    assert code == 2 and "--top" in err
    with pytest.raises(FileNotFoundError, match="no prompts file at"):
        read_prompts(tmp_path / "none.txt")
