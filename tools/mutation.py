"""Mutation testing of attnkit's core modules with mutmut: can the tests fail?

Each module is mutated on its own, against the tests that exercise it (a few files, seconds per mutant):

    .venv/bin/python tools/mutation.py                   # every module, then the table
    .venv/bin/python tools/mutation.py --module masks    # one module (repeat --module for more)
    .venv/bin/python tools/mutation.py --table           # the table of the last runs, nothing run
    .venv/bin/python tools/mutation.py --module masks --worktree   # the working tree, not a commit
    .venv/bin/python tools/mutation.py --module engine --only 'attnkit.serve.engine.xǁEngineǁ_step__*'
                                                         # only the mutants of these names (fnmatch globs)
    .venv/bin/python tools/mutation.py --module engine --worktree --collect --only ...   # count a stopped run

How: the module's commit (``--rev``, default ``HEAD``; ``--worktree`` copies the working tree instead)
is unpacked into ``mutants/<module>/`` (``src/``, ``tests/``, ``pyproject.toml``), a ``[tool.mutmut]``
table naming that one module and its tests is appended to the copy's ``pyproject.toml``, and
``mutmut run --max-children 1`` runs there (mutmut 3 copies that tree again into its own ``mutants/``
and switches mutants on at run time). Nothing under ``src/`` of the checkout is touched. The copy's
mutated ``src`` is put first on ``PYTHONPATH`` so that test subprocesses import it too. One worker,
``OMP_NUM_THREADS=1``: this is a shared two-core machine.

Counting: *killed* is mutmut's killed plus timeout (a mutant that makes the tests hang past mutmut's
CPU limit) plus a test process killed by a signal; *survived* is every other mutant, mutmut's
"no tests" ones (no focused test calls the mutated function) included. A survivor whose name is in
:data:`EQUIVALENT` is one that changes nothing observable; the reason is kept there and printed. The
score is killed / all mutants, equivalent survivors not taken out.

Not run by CI: a full run takes tens of minutes. The table is on docs/development.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]  # test files, or pytest node ids (``file::test``) where only some tests of a file fit
    # mutmut's timeout_multiplier (default 15): a mutant is a timeout past (its tests' CPU seconds + 1) * 2 * this
    timeout_multiplier: float | None = None


# The modules of issue 21 and the tests that exercise them, in the order they are run.
NN = ("tests/nn/test_attention.py", "tests/nn/test_errors.py", "tests/nn/test_properties.py")
MODULES: dict[str, Module] = {
    "masks": Module(
        "src/attnkit/nn/masks.py",
        ("tests/nn/test_masks.py", *NN, "tests/nn/test_modern_blocks.py", "tests/nn/test_masks_mutants.py"),
    ),
    "attention": Module(
        "src/attnkit/nn/attention.py",
        (*NN, "tests/nn/test_modern_blocks.py", "tests/nn/test_attention_mutants.py"),
    ),
    "positional": Module(
        "src/attnkit/nn/positional.py",
        ("tests/nn/test_positional.py", "tests/nn/test_modern_blocks.py", "tests/nn/test_positional_mutants.py"),
    ),
    "generation": Module(
        "src/attnkit/models/generation/sampling.py",
        (
            "tests/models/test_lm_batched_generation.py",
            "tests/models/test_lm_model.py",
            "tests/models/test_generation_mutants.py",
        ),
    ),
    "splits": Module(
        "src/attnkit/data/splits.py",
        ("tests/data/test_splits.py", "tests/data/test_splits_mutants.py"),
    ),
    "cache": Module(
        "src/attnkit/data/cache.py",
        ("tests/data/test_cache.py", "tests/data/test_cache_mutants.py"),
    ),
    "sft_encode": Module(
        "src/attnkit/data/sft/encode.py", ("tests/data/test_sft_data.py", "tests/data/test_sft_encode_mutants.py")
    ),
    "losses": Module("src/attnkit/nn/losses.py", ("tests/nn/test_losses.py",)),
    "lmeval_model": Module(
        "src/attnkit/lmeval/model.py",
        (
            "tests/lmeval/test_lmeval_cli.py",
            "tests/lmeval/test_lmeval_parity.py",
            "tests/lmeval/test_lmeval_gen_kwargs.py",
        ),
    ),
    # preemption.py's unit tests only (a stand-in trainer): test_preemption.py's end-to-end runs (SIGTERM, DDP in
    # two processes) take tens of seconds each.
    "preemption": Module("src/attnkit/training/preemption.py", ("tests/training/test_preemption_unit.py",)),
    # storage.py's unit tests only: test_storage.py's others start processes that race to create a storage
    # (SQLite and a PostgreSQL server) or run a whole study (slow), minutes per mutant.
    "storage": Module(
        "src/attnkit/tuning/storage.py",
        (
            *(
                f"tests/tuning/test_storage.py::{test}"
                for test in (
                    "test_only_errors_of_a_lost_creation_race_are_retried",
                    "test_open_retries_a_lost_race_with_backoff_and_reports_other_errors_at_once",
                    "test_postgresql_urls_use_the_installed_driver",
                )
            ),
            "tests/tuning/test_storage_mutants.py",
        ),
    ),
    "sampling_options": Module(
        "src/attnkit/models/generation/options.py",
        ("tests/models/test_generation_options.py", "tests/models/test_generation_mutants.py"),
    ),
    # The engine in-process only: the tests of tests/serve that start an `attnkit serve` process take tens of
    # seconds each. A mutant that keeps a row decoding forever burns CPU until the timeout: 2 instead of 15
    # (CPU seconds, so other load on the machine does not make timeouts).
    "engine": Module(
        "src/attnkit/serve/engine.py",
        ("tests/serve/test_engine.py", "tests/serve/test_engine_mutants.py"),
        timeout_multiplier=2.0,
    ),
}

# Surviving mutants that change nothing observable, with the reason (mutmut's names: module, function, number).
EQUIVALENT: dict[str, str] = {
    "attnkit.nn.masks.x__broadcastable__mutmut_2": "lengths always match: callers pass 4-D attention masks and key "
    "padding masks whose dim() == 2 was checked first",
    "attnkit.nn.masks.x_band_mask__mutmut_38": "|distance| instead of distance for causal masks: distance >= 0 is "
    "already required there",
    "attnkit.nn.masks.x_prepare_attention__mutmut_43": "distance left int64: multiplying by the float slopes "
    "promotes it to their dtype anyway",
    "attnkit.nn.masks.x_positions_from_padding_mask__mutmut_4": "cumsum over dim 1 is dim -1 of the documented "
    "2-D [B, T] padding mask",
}
_A = "attnkit.nn.attention."
_MHA, _KV = _A + "xǁMultiHeadAttentionǁ", _A + "xǁKVCacheǁ"
_FOUR_D = "index 2 is index -2 of the documented 4-D [B, H, T, d] key/value tensors"
_NO_BIAS = "the dtype only matters for an additive (ALiBi) mask, which this call never makes"
_CAPACITY = "the cache's buffer size only (first capacity, growth factor, growing one step early): same values"
EQUIVALENT |= {
    _A + "x_attend__mutmut_116": "dropout with p = 0 is the identity",
    _A + "x_attend__mutmut_121": "dropout with p = 0 is the identity",
    _A + "x_attend__mutmut_128": "probs have v's dtype outside autocast; under autocast matmul casts both operands",
    _A + "x_scaled_dot_product_attention__mutmut_49": "ok = None is as false as ok = False",
    _A + "x_scaled_dot_product_attention__mutmut_60": _NO_BIAS,
    _A + "x_scaled_dot_product_attention__mutmut_67": _NO_BIAS,
    _MHA + "forward__mutmut_241": _NO_BIAS,
    _MHA + "forward__mutmut_248": _NO_BIAS,
    _MHA + "forward__mutmut_52": "_sizes[1] == _sizes[2] (both the key/value width)",
    _MHA + "forward__mutmut_193": "rotary positions shifted by one without a cache: RoPE attention depends only on "
    "relative positions",
    _MHA + "forward__mutmut_217": _FOUR_D,
    _MHA + "__init____mutmut_20": "range one longer: embed_dim + 1 never divides embed_dim",
    _MHA + "__init____mutmut_49": "range one longer: num_heads + 1 never divides num_heads",
    _MHA + "reset_parameters__mutmut_4": "split's default dim is 0",
    _A + "x__grow__mutmut_7": _FOUR_D,
    _KV + "set__mutmut_2": _FOUR_D,
    _KV + "reorder__mutmut_1": "keys and values are always set together",
    _KV + "append__mutmut_28": "keys and values are always set together",
    **{_KV + f"append__mutmut_{i}": _FOUR_D for i in (2, 14, 24, 45, 55, 61, 70)},
    **{_KV + f"append__mutmut_{i}": _CAPACITY for i in (37, 38, 60, 69)},
}
_P = "attnkit.nn.positional."
_INT_RANGE = "an integer arange times a float gives the same float32 values"
EQUIVALENT |= {
    **{_P + f"x_sinusoidal_encoding__mutmut_{i}": _INT_RANGE for i in (5, 8, 17, 22)},
    **{_P + f"x_rope_inv_freq__mutmut_{i}": "an arange of ints is int64 already" for i in (11, 16)},
    _P + "xǁRotaryEmbeddingǁ__init____mutmut_47": "persistent=None is as false as persistent=False",
    _P + "xǁSinusoidalPositionalEncodingǁ__init____mutmut_7": "persistent=None is as false as persistent=False",
    _P + "xǁRotaryEmbeddingǁcos_sin__mutmut_2": "recomputing the frequencies without scaling gives the same ones",
    _P + "xǁRotaryEmbeddingǁcos_sin__mutmut_10": "at seq_len == original, rope_inv_freq leaves the frequencies as "
    "they are",
    _P + "xǁRotaryEmbeddingǁforward__mutmut_20": "apply_rotary casts cos and sin to x's dtype anyway",
    _P + "xǁRotaryEmbeddingǁforward__mutmut_22": "apply_rotary casts cos and sin to x's dtype anyway",
    _P + "xǁLearnedPositionalEncodingǁforward__mutmut_16": "no positions: end 1 instead of 0 is still within max_len",
    _P + "xǁSinusoidalPositionalEncodingǁforward__mutmut_16": "a table one row longer than needed: the same rows",
    _P + "xǁSinusoidalPositionalEncodingǁforward__mutmut_17": "no positions: a one-row table, indexed by none",
}
_GEN = "attnkit.models.generation.sampling.x_"
_INF = 'float("-INF") is float("-inf")'
EQUIVALENT |= {
    **{_GEN + f"{f}__mutmut_{i}": _INF for f, i in (("top_k_filter", 22), ("top_p_filter", 39), ("min_p_filter", 23))},
    **{_GEN + f"sample_next_token__mutmut_{i}": "dim 1 is dim -1 of its [B, V] logits" for i in (17, 41, 51)},
    _GEN + "top_k_filter__mutmut_10": "topk's default dim is -1",
    _GEN + "top_p_filter__mutmut_8": "sort's default dim is -1",
    _GEN + "top_k_filter__mutmut_1": "k equal to the vocabulary keeps every logit either way",
    _GEN + "min_p_filter__mutmut_1": "min_p = 0 drops no probability (none is below 0)",
    _GEN + "apply_repetition_penalty__mutmut_10": "a zero logit times or divided by the penalty is zero",
    **{_GEN + f"left_pad__mutmut_{i}": "token ids (ints) make int64 tensors by default" for i in (4, 6, 23, 26)},
}
_G = "attnkit.data.splits.x_group_split__mutmut_"
_SAME_GROUPS = "groups numbered otherwise (ranks of a list, float ranks, np.unique of strings): the same partition"
_SORT = "ties ordered by numpy's default sort instead of the stable one: still largest first, deterministic in seed"
EQUIVALENT |= {
    **{_G + str(i): _SAME_GROUPS for i in (3, 4, 12, 16)},
    **{_G + str(i): "a fraction of 1 or more is still refused, by the sum's check" for i in (30, 31)},
    **{_G + str(i): "labels of zeros as floats: np.unique numbers them the same" for i in (40, 42)},
    **{_G + str(i): _SORT for i in (114, 116, 121)},
    **{_G + str(i): "part numbers as floats compare equal to the ints" for i in (128, 130)},
    _G + "76": "an extra class column with no examples and a target of 0 changes no growth",
    _G + "85": "counts and targets all doubled: every growth is 4 times larger, the same argmin",
}

_S = "attnkit.tuning.storage.x_"
_UNREACHABLE = "attempt RACE_RETRIES returns or raises: a later attempt and the code after the loop are never reached"
EQUIVALENT |= {
    **{
        _S + f"_check_url__mutmut_{i}": "the folder of an empty or :memory: SQLite database is '.', which exists"
        for i in (13, 14, 15)
    },
    **{_S + f"_postgres_driver__mutmut_{i}": "hide_password=None is as false as hide_password=False" for i in (12, 21)},
    **{_S + f"open_storage__mutmut_{i}": _UNREACHABLE for i in (8, 89, 90, 91)},
    _S + "prepare_storage__mutmut_6": "check_version=None is as false as check_version=False",
    _S + "prepare_storage__mutmut_9": "open_storage's create defaults to True",
}

_C = "attnkit.data.cache.x"
_W, _ROWS, _TEXTS, _TC = _C + "ǁCacheWriterǁ", _C + "ǁCachedRowsǁ", _C + "ǁCachedTextsǁ", _C + "ǁTokenCacheǁ"
_INT64 = "Python ints (and the lengths given) make int64 arrays by default, and _offsets writes int64 anyway"
_READ_SIZE = "the bytes read in other chunks (or at once, or buffered): the same hash"
_UTF8 = "codec names are case-insensitive: UTF-8 is utf-8"
_IN_MEMORY = "offsets read into memory instead of memory-mapped: the same values (memory-mapping is promised for "
"tokens and arrays only)"
_CHECKED = "only another process's entry is opened with verify: it was checked whole by the open just before"
EQUIVALENT |= {
    **{_C + f"_content_digest__mutmut_{i}": _READ_SIZE for i in (21, 23, 24)},
    **{
        _C + f"_content_digest__mutmut_{i}": "another memo file name, still one per (path, size, mtime)" for i in (8, 9)
    },
    **{_C + f"_file_hash__mutmut_{i}": _READ_SIZE for i in (8, 11)},
    _C + "_open_or_build__mutmut_20": "ours = None is as false as ours = False",
    **{_C + f"_open_or_build__mutmut_{i}": _CHECKED for i in (21, 46)},
    **{
        _C + f"_reuse_entry__mutmut_{i}": "the manifest is written with sorted keys (write_json_atomic): its items "
        "dump the same sorted or not"
        for i in (18, 20, 22)
    },
    **{_W + f"add__mutmut_{i}": "astype's copy flag: the same bytes written" for i in (11, 13, 14)},
    **{_W + f"add__mutmut_{i}": _INT64 for i in (17, 19)},
    **{
        _W + f"add_rows__mutmut_{i}": "fromiter's default float64 lengths or ids are cast back (to int64, to the "
        "token dtype) by add: the same bytes"
        for i in (3, 14)
    },
    **{_W + f"add_rows__mutmut_{i}": "fromiter's count only preallocates: the same array" for i in (7, 18)},
    **{_W + f"finish__mutmut_{i}": _INT64 for i in (7, 9, 26, 28)},
    _W + "add_texts__mutmut_12": _UTF8,
    _TEXTS + "__iter____mutmut_16": _UTF8,
    _TEXTS + "_get__mutmut_14": _UTF8,
    **{
        f"{cls}{fn}__mutmut_{i}": _IN_MEMORY
        for cls, fn, i in (
            (_ROWS, "__init__", 5),
            (_ROWS, "__init__", 7),
            (_ROWS, "__setstate__", 4),
            (_ROWS, "__setstate__", 6),
            (_TEXTS, "__init__", 4),
            (_TEXTS, "__init__", 6),
            (_TEXTS, "__setstate__", 4),
            (_TEXTS, "__setstate__", 6),
            (_TC, "offsets", 2),
            (_TC, "offsets", 4),
        )
    },
    _C + "ǁLazySequenceǁ_check__mutmut_8": "with no items every index is refused before the modulo",
    _TC + "open__mutmut_27": 'problem = "" is as false as problem = None',
}
_E = "attnkit.serve.engine.xǁEngineǁ"
_EMPTIED = "an empty batch's mask and pending tokens are replaced whole by the next prefill's (the cache is None)"
EQUIVALENT |= {
    **{_E + f"_fail_all__mutmut_{i}": _EMPTIED + "; stats' width is 0 either way" for i in (6, 8, 9)},
    _E + "_step__mutmut_57": "the greedy argmax recomputed for each greedy request: the same tokens",
    _E + "_step__mutmut_59": "dim 1 is dim -1 of the step's [B, V] logits",
}
# check_sampling moved from sampling.py to options.py (its penalty default was sampling's check_sampling__mutmut_1).
EQUIVALENT["attnkit.models.generation.options.x_check_sampling__mutmut_2"] = (
    "the default repetition penalty, 1 or 2, is valid either way (a penalty has no upper bound)"
)
EQUIVALENT["attnkit.training.preemption.xǁPreemptionCheckpointǁ__init____mutmut_2"] = (
    "_sigusr1_received = None is as false as False (it is only tested for truth)"
)
_SFT = "attnkit.data.sft.encode."
_FALSE_PROMPT = "add_generation_prompt=None for False: templates test it for truth, and None is as false"
EQUIVALENT |= {
    _SFT + "x__common_start__mutmut_12": "another halving point: with same < most, (same + most + 2) // 2 <= most "
    "still, and the loop ends at the same longest common beginning",
    _SFT + "x_assistant_spans__mutmut_15": _FALSE_PROMPT,
    _SFT + "x_assistant_spans__mutmut_56": _FALSE_PROMPT,
    _SFT + "x_encode_conversation__mutmut_8": _FALSE_PROMPT,
    _SFT + "x_assistant_spans__mutmut_29": "add_generation_prompt=True is ChatTemplate.render's default",
    **{
        f"{_SFT}x_collate_examples__mutmut_{n}": "torch.full with an int fill value is int64 without a dtype"
        for n in (7, 10, 14, 17)
    },
}

_LCE = "attnkit.nn.losses.xǁ_LinearCrossEntropyǁ"
_LAST_DIM = "dim 1 for -1 (or unsqueeze(1) of a 1-D tensor): the chunk's logits are 2-D [rows, V]"
_AUTOGRAD_CAST = "autograd casts a returned gradient to its input's dtype (.to(None) keeps it float32)"
_UNUSED_GRAD = "a gradient made, saved or returned for an input that does not require one: autograd drops it"
_DEFAULT_F32 = "float32 is torch's default dtype; a float32 accumulator or count cast back to the input's dtype"
EQUIVALENT |= {
    **{_LCE + f"backward__mutmut_{n}": _AUTOGRAD_CAST for n in (7, 11, 16)},
    **{_LCE + f"backward__mutmut_{n}": _UNUSED_GRAD for n in (5, 10)},
    **{_LCE + f"forward__mutmut_{n}": _UNUSED_GRAD for n in (27, 32, 42, 187, 190, 193)},
    **{_LCE + f"forward__mutmut_{n}": _LAST_DIM for n in (58, 124, 132, 134, 138, 146, 148, 162, 170)},
    **{_LCE + f"forward__mutmut_{n}": _DEFAULT_F32 for n in (34, 37, 44, 47, 54, 55)},
    _LCE + "forward__mutmut_4": "needs_input_grad[:4] adds the targets' flag, always False (integer targets)",
    _LCE + "forward__mutmut_14": "the loss's 0-dim accumulator made on the CPU: a 0-dim CPU tensor combines with "
    "any device as a scalar (the meta-device test passes), the loss still comes out on the inputs' device",
    _LCE + "forward__mutmut_17": "the loss's 0-dim accumulator made on the CPU (see forward__mutmut_14)",
    _LCE + "forward__mutmut_89": "`or` for `and`: mixed float32/bfloat16 inputs fail in torch.mm as they fail in "
    "F.linear (inputs of one dtype take the same branch either way)",
    _LCE + "forward__mutmut_176": "grad_hidden in weight's dtype: hidden and weight must share a dtype (mm/linear)",
    _LCE + "forward__mutmut_214": 'float("NAN") is float("nan")',
}

# mutmut's statuses (mutmut.stats.status_by_exit_code) that count as a kill here.
KILLED_STATUSES = {"killed", "timeout", "segfault"}


def unpack(module: Module, rev: str | None, dest: Path) -> None:
    """``src/``, ``tests/`` and ``pyproject.toml`` of ``rev`` (or of the working tree) into ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if rev is None:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        for name in ("src", "tests"):
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)
        shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    else:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", rev, "src", "tests", "pyproject.toml"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    # mutmut copies src/ to mutants/src/ only after it started; made now, so that the PYTHONPATH entry that
    # points there is not cached as missing (the checkout's src/, on sys.path by the editable install, would win).
    (dest / "mutants" / "src").mkdir(parents=True)
    pyproject = dest / "pyproject.toml"
    text = pyproject.read_text()
    if "mutmut" in tomllib.loads(text).get("tool", {}):
        raise SystemExit("pyproject.toml already has a [tool.mutmut] table; this script writes its own")
    tests = [t for t in module.tests if (dest / t.split("::")[0]).exists()]  # a file, or one test of it
    missing = sorted(set(module.tests) - set(tests))
    if missing:
        print(f"  (not in this tree, skipped: {', '.join(missing)})")
    config: dict[str, list[str] | float] = {
        "source_paths": ["src"],
        "only_mutate": [module.path],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider"],
    }
    if module.timeout_multiplier is not None:
        config["timeout_multiplier"] = module.timeout_multiplier
    lines = ["", "[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    pyproject.write_text(text.rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def mutmut(args: list[str], cwd: Path, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    # Test subprocesses import the mutated copy (the mutant to switch on travels in MUTANT_UNDER_TEST).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(cwd / "mutants" / "src"), env.get("PYTHONPATH")) if p)
    exe = Path(sys.executable).with_name("mutmut")
    if log is None:
        return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True)
    with log.open("w") as out:
        return subprocess.run([str(exe), *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def run_module(name: str, rev: str | None, only: list[str] | None = None, collect: bool = False) -> dict:
    """Mutate module ``name``; ``only``: mutmut's mutant-name globs, the mutants run and counted (None: all).
    ``collect``: run nothing, count the mutants that the last run of ``name`` (stopped before its end) finished."""
    from mutmut.stats import status_by_exit_code

    module = MODULES[name]
    dest = WORK / name
    meta = dest / "mutants" / (module.path + ".meta")
    if collect:
        if not meta.exists():
            raise SystemExit(f"no run of {name} to collect: {meta} is missing")
    else:
        print(f"== {name}: {module.path} at {rev or 'the working tree'}", flush=True)
        unpack(module, rev, dest)
        log = dest / "mutmut.log"
        proc = mutmut(["run", "--max-children", "1", *(only or [])], dest, log)
        if proc.returncode != 0 or not meta.exists():
            tail = log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"mutmut failed on {name} (exit {proc.returncode}); the end of {log}:\n{tail}")
    exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
    if only:
        exit_codes = {k: c for k, c in exit_codes.items() if any(fnmatch.fnmatch(k, glob) for glob in only)}
    not_run = sorted(k for k, c in exit_codes.items() if c is None) if collect else []
    exit_codes = {k: c for k, c in exit_codes.items() if k not in set(not_run)}
    statuses = {key: status_by_exit_code[code] for key, code in exit_codes.items()}
    survivors = {}
    for key in sorted(k for k, s in statuses.items() if s not in KILLED_STATUSES):
        diff = mutmut(["show", key], dest).stdout
        survivors[key] = {"status": statuses[key], "diff": diff.split("\n", 1)[-1].strip()}
    commit = None
    if rev is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True)
        commit = commit.stdout.strip()
    result = {
        "module": module.path,
        "tests": list(module.tests),
        "commit": commit,
        "only": only or [],
        "not_run": not_run,
        "mutants": len(statuses),
        "killed": sum(s == "killed" for s in statuses.values()),
        "timeout": sum(s in ("timeout", "segfault") for s in statuses.values()),
        "survived": survivors,
    }
    (dest / "result.json").write_text(json.dumps(result, indent=1))
    return result


def table(names: list[str]) -> str:
    rows = [
        "| module | mutants | killed | survived | equivalent | % killed |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    notes = []
    for name in names:
        path = WORK / name / "result.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        killed = r["killed"] + r["timeout"]
        survived = r["survived"]
        equivalent = [k for k in survived if k in EQUIVALENT]
        pct = 100.0 * killed / r["mutants"] if r["mutants"] else 100.0
        timeouts = f" ({r['timeout']} by timeout)" if r["timeout"] else ""
        if r.get("only"):
            notes.append(f"{name}: only the mutants {', '.join(r['only'])}")
        if r.get("not_run"):
            notes.append(f"{name}: {len(r['not_run'])} more not run (the run was stopped): {', '.join(r['not_run'])}")
        rows.append(
            f"| `{r['module'].removeprefix('src/')}` | {r['mutants']} | {killed}{timeouts} | {len(survived)} "
            f"| {len(equivalent)} | {pct:.1f} |"
        )
        for key, info in survived.items():
            reason = EQUIVALENT.get(key, f"NOT EXPLAINED ({info['status']})")
            notes.append(f"{key}: {reason}")
    return "\n".join([*rows, "", *notes])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--module", action="append", choices=list(MODULES), help="run only this module (repeatable)")
    parser.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    parser.add_argument("--worktree", action="store_true", help="mutate the working tree instead of a commit")
    parser.add_argument("--table", action="store_true", help="print the table of the last runs; run nothing")
    parser.add_argument("--diffs", action="store_true", help="print each survivor's diff")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="run nothing: count the mutants the last run of each module finished (a run stopped before its end)",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="GLOB",
        help="run and count only the mutants whose mutmut name matches (repeatable; e.g. "
        "'attnkit.serve.engine.xǁEngineǁ_step__*')",
    )
    args = parser.parse_args(argv)
    names = args.module or list(MODULES)
    if not args.table:
        for name in names:
            run_module(name, None if args.worktree else args.rev, args.only, args.collect)
    print(table(names))
    if args.diffs:
        for name in names:
            path = WORK / name / "result.json"
            if path.exists():
                for key, info in json.loads(path.read_text())["survived"].items():
                    print(f"\n# {key} ({info['status']})\n{info['diff']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
