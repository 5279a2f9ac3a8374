"""Fuzzing `key=value` overrides, YAML config files and `attnkit train ... --print-config` (derandomized:
the same examples on every run; tools/fuzz.py runs the targets longer), and the inputs it found."""

from __future__ import annotations

import time
from pathlib import Path

import fuzz_config_targets  # noqa: F401  (registers the targets)
import pytest
from click.testing import CliRunner
from fuzz_config_targets import cli_exits_cleanly
from fuzz_core import Assets, Target, run_target, targets

from attnkit.api import build_config
from attnkit.cli import main
from attnkit.config import load_yaml, parse_overrides
from attnkit.errors import ConfigError


@pytest.mark.parametrize("target", targets("config.") + targets("cli.train"), ids=lambda t: t.name)
def test_fuzz(target: Target, fuzz_assets: Assets):
    assert run_target(target, fuzz_assets) > 0


# --------------------------------------------------------------------- inputs the fuzzing found
def test_an_override_whose_tag_does_not_fit_is_kept_as_text():
    # yaml.safe_load("!!int x") raises ValueError, "!!bool x" KeyError: the value stays the text written
    assert parse_overrides(["data=!!int x", "--seed", "!!bool x"]) == {"data": "!!int x", "seed": "!!bool x"}
    with pytest.raises(ConfigError, match="seed"):
        build_config("reverse", None, parse_overrides(["seed=!!int x"]))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"\x80", r"config.yaml:1: not UTF-8 \(byte 0x80 at column 1\); save the config file as UTF-8"),
        (b"seed: 1\nmodel:\n  activation: caf\xe9\n", r"config.yaml:3: not UTF-8"),
        (b"seed: !!bool x\n", "config.yaml is not valid YAML"),
        (b"seed: !!int x\n", "config.yaml is not valid YAML"),
        (b"trainer:\n  threads: !!timestamp 2020-99-99\n", "config.yaml is not valid YAML"),
        (b"[" * 600, "config.yaml is not valid YAML"),
    ],
)
def test_a_config_file_that_cannot_be_read_is_a_config_error_naming_it(tmp_path: Path, text: bytes, match: str):
    path = tmp_path / "config.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match=match):
        load_yaml(path)
    result = CliRunner().invoke(main, ["train", "reverse", "--config", str(path), "--print-config"])
    assert result.exit_code == 2 and "error:" in result.output and str(path) in result.output
    cli_exits_cleanly(["train", "reverse", "--config", str(path), "--print-config"])


def test_a_preset_of_the_wrong_type_is_a_config_error(tmp_path: Path):
    # LanguageModelConfig's preset validator looked a list up in PRESETS: TypeError: unhashable type
    path = tmp_path / "config.yaml"
    path.write_bytes(b"model:\n  preset: []\n")
    with pytest.raises(ConfigError, match=r"model.preset"):
        build_config("lm", path)


@pytest.mark.parametrize(
    ("task", "items"),
    [("classify", ["model.d_model=6469693230"]), ("lm", ["model.num_heads=6469693230", "model.num_kv_heads=7"])],
)
def test_a_huge_size_that_does_not_divide_is_refused_at_once(task: str, items: list[str]):
    # the message listed every divisor by trying 1 .. d_model: 6469693230 (= 2*3*5*...*29) took hours
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"must divide .* choose num_heads in \[1, 2, "):
        build_config(task, None, parse_overrides(items))
    assert time.perf_counter() - start < 1.0
