"""The command line is a thin layer over :mod:`attnkit.api`: every command calls an API function, and
the CLI modules import nothing of attnkit but the API and the base modules (config, errors, io)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import attnkit.api
import attnkit.cli
from attnkit.cli import main

# What the CLI may import of attnkit: the API, the base modules and its own modules.
ALLOWED = ("attnkit.api", "attnkit.config", "attnkit.errors", "attnkit.io", "attnkit.cli")


def _cli_files() -> list[Path]:
    path = Path(attnkit.cli.__file__)
    return sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]


def _imported(tree: ast.AST) -> list[str]:
    """Every attnkit module an AST imports (``from attnkit import api`` counts as ``attnkit.api``)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "attnkit":
                out += [f"attnkit.{alias.name}" for alias in node.names]
            else:
                out.append(node.module)
    return [name for name in out if name == "attnkit" or name.startswith("attnkit.")]


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(_commands(command, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = command
    return out


def test_the_cli_imports_attnkit_only_through_the_api_and_the_base_modules():
    wrong = [
        f"{path.name} imports {name}"
        for path in _cli_files()
        for name in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED)
    ]
    assert not wrong, wrong


def test_every_command_calls_a_function_of_the_api():
    commands = _commands(main)
    assert len(commands) >= 15  # tasks train prepare test predict generate translate plot x4 report tune import export
    missing = []
    for name, command in sorted(commands.items()):
        assert command.callback is not None
        tree = ast.parse(textwrap.dedent(inspect.getsource(command.callback)))
        called = {  # api.NAME, or NAME imported with `from attnkit.api import NAME`
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api"
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "attnkit.api"
            for alias in node.names
        }
        if not called & set(attnkit.api.__all__):
            missing.append(name)
    assert not missing, f"commands that call no attnkit.api function: {missing}"


def test_every_api_name_has_one_home_and_is_documented():
    assert sorted(attnkit.api.HOMES) == sorted(attnkit.api.__all__)
    assert set(attnkit.api.__all__) <= set(dir(attnkit.api))
    for name in attnkit.api.__all__:
        obj = getattr(attnkit.api, name)
        assert inspect.getdoc(obj), f"attnkit.api.{name} has no docstring"


def test_importing_the_api_imports_neither_torch_nor_lightning():
    code = "import sys, attnkit.api; print('torch' in sys.modules, 'lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


TINY_LM = [
    "data.builtin_documents=60",
    "model.d_model=32",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.dim_feedforward=64",
    "model.max_len=32",
    "trainer.max_epochs=1",
    "trainer.batch_size=16",
    "trainer.threads=1",
    "trainer.progress_bar=false",
]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    result = CliRunner().invoke(main, ["train", "lm", "--output_dir", str(out), "name=tiny", *TINY_LM])
    assert result.exit_code == 0, result.output
    return out / "lm" / "tiny"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--temperature", "-1"], "temperature must be a number >= 0"),
        (["--temperature", "1e-300"], "temperature must be a number >= 0 (0 = greedy; otherwise finite, >= 0.01"),
        (["--temperature", "nan"], "temperature must be a number >= 0"),
        (["--seed", str(2**64)], "seed must be an integer in [0, 2**64) (or None: unseeded), got 18446744073709551616"),
        (["--seed", "-1"], "seed must be an integer in [0, 2**64)"),
        (["--max-new-tokens", str(2**40)], "max_new_tokens must be an int in [0, 1048576]"),
    ],
)
def test_generate_checks_its_options_before_it_writes_anything(lm_run: Path, options: list[str], message: str):
    """A wrong sampling option is `error: ...` (exit code 2), and nothing else: the prompt is not written
    first (it used to be: `hierror: ...`), and a temperature too small for float32 is no traceback."""
    result = CliRunner().invoke(main, ["generate", str(lm_run), "--prompt", "hi", *options])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr == f"error: {result.stderr.removeprefix('error: ')}" and message in result.stderr


def test_chat_refuses_wrong_sampling_options_naming_them(tmp_path: Path):
    from chat_models import build_chat_model

    folder = build_chat_model(tmp_path / "tiny-chat")
    for options, message in [
        (["--temperature", "1e-300"], "temperature must be a number >= 0 (0 = greedy; otherwise finite, >= 0.01"),
        (["--seed", str(2**64)], "seed must be an integer in [0, 2**64)"),
    ]:
        result = CliRunner().invoke(main, ["chat", str(folder), *options], input="hi\n")
        assert result.exit_code == 2, (result.output, result.exception)
        assert result.stdout == "" and message in result.stderr
