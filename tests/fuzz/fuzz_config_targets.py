"""Fuzz targets of the config: ``key=value`` overrides, YAML config files, and the real ``attnkit``
command (in-process, click's CliRunner) given both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from fuzz_core import Assets, Leak, check_user_error, target
from hypothesis import strategies as st

from attnkit.api import build_config
from attnkit.cli import main
from attnkit.config import parse_overrides
from attnkit.errors import ConfigError
from attnkit.tasks import TASKS

TASK_NAMES = sorted(TASKS)


def _dotted(data: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        keys.append(prefix + key)
        if isinstance(value, dict):
            keys += _dotted(value, f"{prefix}{key}.")
    return keys


# Every key of every task's config (sections and leaves), e.g. "model.d_model", "trainer".
CONFIG_KEYS = sorted({k for task in TASKS.values() for k in _dotted(task.config_cls().model_dump())})

# Values as a user types them: YAML scalars and flow collections, numbers at the edges, tags, junk.
_TYPED_VALUES = [
    "0", "-1", "1", "2", "1e-3", "1e999", "-1e999", "nan", ".nan", ".inf", "-.inf", "null", "~", "", "true", "no",
    "yes", "on", "[]", "{}", "[1, 2]", "{a: 1}", "'quoted'", '"x', "- a", "!!python/object:os.system", "!!binary aGk=",
    "2020-01-01", "2020-01-01 10:00:00", "0x10", "0o17", "1_000", "12:30:00", "&a 1", "*a", "|\n x", "%", "@", "`",
    "[", "{", "? a", "a: b: c", "=", "--", "!!set {a}", "!!float 1", "!!int x", "9" * 40, "[" * 600, "!!bool x",
    "!!timestamp 2020-99-99", "!!int 0b2", "1.5", "0.0", "-0.5", "auto", "cpu", "cuda", "bf16-mixed", "digits",
    "synthetic", "bpe",
]  # fmt: skip
RAW_VALUES = st.one_of(
    st.sampled_from(_TYPED_VALUES),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)
KEYS = st.one_of(
    st.sampled_from(CONFIG_KEYS),
    st.sampled_from(CONFIG_KEYS).map(lambda k: k.replace("_", "-")),
    st.sampled_from(CONFIG_KEYS).map(lambda k: k.upper()),
    st.text(alphabet="._-=aZ1 ", max_size=8),
    st.text(max_size=8),
)
ITEM = st.one_of(
    st.tuples(KEYS, RAW_VALUES).map(lambda kv: [f"{kv[0]}={kv[1]}"]),
    st.tuples(KEYS, RAW_VALUES).map(lambda kv: [f"--{kv[0]}", kv[1]]),
    st.tuples(KEYS, RAW_VALUES).map(lambda kv: [f"--{kv[0]}={kv[1]}"]),
    st.text(max_size=10).map(lambda s: [s]),
)
OVERRIDES = st.lists(ITEM, max_size=4).map(lambda items: [s for item in items for s in item])
TASK = st.sampled_from(TASK_NAMES)

# YAML documents: mappings of real keys to junk (nested), or text that is not a mapping of keys.
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**66), 2**66),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["auto", "cpu", "1e-3", "bpe", "digits"]),
)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_SECTIONS = st.dictionaries(
    st.sampled_from(CONFIG_KEYS) | st.text(max_size=6),
    _VALUE,
    max_size=5,
).map(lambda flat: _nest(flat))
_YAML_SAMPLES = [
    b"", b"- a\n- b\n", b"a: &x [*x]\n", b"model: {d_model: !!python/name:os.system }\n", b"\xff\xfe\x00",
    b"model:\n  d_model: 64\n\tnum_heads: 2\n", b"trainer: [1, 2]\n", b"? [a, b]\n: c\n", b"1: 2\n",
    b"model: {d_model: 1e999}\n", b"optim: {lr: .nan}\n", b"data: null\n", b"%YAML 9.9\n---\na: 1\n",
    b"model:\n  d_model: 0\n  num_heads: 0\n", b"\xef\xbb\xbfseed: 1\n", b"seed: 2020-01-01\n",
    b"trainer: {max_epochs: 99999999999999999999999}\n", b"---\na: 1\n---\nb: 2\n", b"seed: !!bool x\n",
    b"seed: !!int x\n", b"[" * 600, b"a: " + b"[" * 600, b"trainer:\n  threads: !!timestamp 2020-99-99\n",
]  # fmt: skip
YAML_TEXT = st.one_of(
    _SECTIONS.map(lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True).encode()),
    st.text(max_size=80).map(str.encode),
    st.binary(max_size=80),
    st.sampled_from(_YAML_SAMPLES),
)


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"model.d_model": 1}`` -> ``{"model": {"d_model": 1}}`` (a later key wins over an earlier leaf)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return out


def _names(items: list[str]) -> tuple[str, ...]:
    """What an error about ``items`` may name: an item, its key, or a part of the key."""
    names = []
    for item in items:
        key = item.removeprefix("--").split("=", 1)[0]
        names += [item, repr(item), key, key.replace("-", "_"), *key.replace("-", "_").split(".")]
    return tuple(n for n in names if n.strip())


def _print_config(task: str, config: Any, overrides: dict[str, Any]) -> str:
    """What ``attnkit train TASK --print-config`` does."""
    cfg = build_config(task, config, overrides)
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


@target("config.overrides", st.tuples(TASK, OVERRIDES), examples=300)
def check_overrides(assets: Assets, example: tuple[str, list[str]]) -> None:
    task, items = example
    try:
        _print_config(task, None, parse_overrides(items))
    except ConfigError as err:  # a config error names the bad key (or "config" for the whole of it)
        check_user_error(err, (*_names(items), "config"))


@target("config.yaml", st.tuples(TASK, YAML_TEXT), examples=300)
def check_yaml(assets: Assets, example: tuple[str, bytes]) -> None:
    task, text = example
    with assets.scratch() as folder:
        path = folder / "config.yaml"
        path.write_bytes(text)
        try:
            _print_config(task, path, None)
        except ConfigError as err:
            check_user_error(err, (str(path),))


def cli_exits_cleanly(args: list[str]) -> int:
    """Run ``attnkit ARGS`` in-process: exit 0, or exit 2 with ``error: ...`` (never a traceback); the
    exit code."""
    result = CliRunner().invoke(main, args, catch_exceptions=True)
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise Leak(f"attnkit {args!r} raised {type(result.exception).__name__}: {result.exception}\n{output}") from (
            result.exception
        )
    if "Traceback" in output or result.exit_code not in (0, 2):
        raise Leak(f"attnkit {args!r} exited {result.exit_code}:\n{output}")
    if result.exit_code == 2 and "error" not in output.lower():
        raise Leak(f"attnkit {args!r} exited 2 without an error message:\n{output}")
    return int(result.exit_code)


@target("cli.train_overrides", st.tuples(TASK, OVERRIDES), examples=200)
def check_cli_overrides(assets: Assets, example: tuple[str, list[str]]) -> None:
    task, items = example
    cli_exits_cleanly(["train", task, "--print-config", *items])


@target("cli.train_config", st.tuples(TASK, YAML_TEXT, OVERRIDES), examples=200)
def check_cli_config(assets: Assets, example: tuple[str, bytes, list[str]]) -> None:
    task, text, items = example
    with assets.scratch() as folder:
        path = Path(folder) / "config.yaml"
        path.write_bytes(text)
        cli_exits_cleanly(["train", task, "--config", str(path), "--print-config", *items])


__all__ = ["CONFIG_KEYS", "OVERRIDES", "YAML_TEXT", "cli_exits_cleanly"]
