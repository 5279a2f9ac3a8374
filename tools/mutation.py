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

from mutation_equivalent import EQUIVALENT  # tools/, on sys.path when this script runs

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]  # test files, or pytest node ids (``file::test``) where only some tests of a file fit
    # mutmut's timeout_multiplier (default 15): a mutant is a timeout past (its tests' CPU seconds + 1) * 2 * this
    timeout_multiplier: float | None = None
    # Functions left unmutated ("Class.method" or "function"): in the copy, their ``def`` gets mutmut's
    # ``# pragma: no mutate block``, so mutmut neither mutates them nor replaces them with its trampoline (which
    # runs the body as a function of another name: a ``__init__`` that calls Lightning's save_hyperparameters(),
    # which reads the arguments from the frame of a function named ``__init__``, then saves none).
    keep: tuple[str, ...] = ()


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
    "losses": Module("src/attnkit/nn/losses.py", ("tests/nn/test_losses.py", "tests/nn/test_losses_mutants.py")),
    "lmeval_model": Module(
        "src/attnkit/lmeval/model.py",
        (
            "tests/lmeval/test_lmeval_cli.py",
            "tests/lmeval/test_lmeval_parity.py",
            "tests/lmeval/test_lmeval_gen_kwargs.py",
        ),
    ),
    # lmeval/model.py's generation options (generation_settings, _room, _positive_int; run with --only on them):
    # the direct calls of test_lmeval_model_mutants.py, then test_lmeval_gen_kwargs.py. lmeval_model's tests
    # (scoring and generating against lm_eval's HF backend) take about 90 s per mutant.
    "lmeval_generation": Module(
        "src/attnkit/lmeval/model.py",
        ("tests/lmeval/test_lmeval_model_mutants.py", "tests/lmeval/test_lmeval_gen_kwargs.py"),
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
    # Issue 34's one decoder: the logits processors and the batched Sampler, and the one parameters type.
    "processors": Module(
        "src/attnkit/models/generation/processors.py",
        ("tests/models/test_sampler.py", "tests/models/test_sampler_hf.py"),
    ),
    "params": Module(
        "src/attnkit/models/generation/params.py",
        ("tests/models/test_sampling_params.py", "tests/models/test_sampler.py"),
    ),
    # The engine in-process only: the tests of tests/serve that start an `attnkit serve` process take tens of
    # seconds each. A mutant that keeps a row decoding forever burns CPU until the timeout: 2 instead of 15
    # (CPU seconds, so other load on the machine does not make timeouts).
    "engine": Module(
        "src/attnkit/serve/engine.py",
        ("tests/serve/test_engine.py", "tests/serve/test_engine_mutants.py"),
        timeout_multiplier=2.0,
    ),
    # The continuous-batching decode loop the engine drives (models.generation.ContinuousBatch, moved out of the
    # engine): its own tests and the engine's in-process ones.
    "batch": Module(
        "src/attnkit/models/generation/batch.py",
        ("tests/models/test_generation_batch.py", "tests/serve/test_engine.py", "tests/serve/test_engine_mutants.py"),
        timeout_multiplier=2.0,
    ),
    # The HTTP app in-process only (create_app over a tiny model, FastAPI's TestClient): the tests of tests/serve
    # that start an `attnkit serve` process run it where mutmut does not see the functions called. Every test
    # builds its own app (mutmut gives a mutant of create_app only to the tests that called it).
    "app": Module("src/attnkit/serve/app.py", ("tests/serve/test_app_inprocess.py",)),
    "model_diff": Module("src/attnkit/models/diff.py", ("tests/models/test_diff.py",)),
    # The gradient accumulation of training/module.py (training_step's summed loss, on_before_optimizer_step's
    # scale): run it with --only on those functions. TaskModule.__init__ is kept unmutated (see Module.keep).
    "accumulation": Module(
        "src/attnkit/training/module.py",
        ("tests/training/test_accumulate.py", "tests/training/test_accumulation_mutants.py"),
        keep=("TaskModule.__init__",),
    ),
    # FSDP: test_fsdp.py's in-process tests only (a gloo group of one process; its end-to-end runs start two
    # processes each, tens of seconds, where mutmut does not see the functions called) and the mutants' own tests.
    "sharding": Module(
        "src/attnkit/training/sharding.py",
        (
            *(
                f"tests/training/test_fsdp.py::{test}"
                for test in (
                    "test_every_block_is_its_own_unit_and_bf16_mixed_computes_in_bfloat16",
                    "test_gathered_weights_hold_every_unit_whole_through_any_number_of_forward_passes",
                    "test_what_fsdp_cannot_run_with_is_refused_before_the_data_is_read",
                )
            ),
            "tests/training/test_sharding_mutants.py",
        ),
    ),
    # The SIGTERM watchdog of multi-process runs: test_watchdog.py's cases run in processes of their own (real
    # signals, a real exit; about a second each); test_watchdog_mutants.py's in this one (a real signal to the
    # test process, os._exit stood in for). Every wait in them is bounded: mutmut's timeout counts CPU seconds.
    "watchdog": Module(
        "src/attnkit/training/watchdog.py",
        ("tests/training/test_watchdog.py", "tests/training/test_watchdog_mutants.py"),
    ),
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
    if module.keep:
        _keep_unmutated(dest / module.path, module.keep)
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


def _keep_unmutated(path: Path, names: tuple[str, ...]) -> None:
    """Mark the functions ``names`` of ``path`` (a copy) ``# pragma: no mutate block`` (see :attr:`Module.keep`)."""
    import libcst as cst

    class Keep(cst.CSTTransformer):
        def __init__(self) -> None:
            self.scope: list[str] = []
            self.found: set[str] = set()

        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            self.scope.append(node.name.value)

        def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
            self.scope.pop()
            return updated

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.scope.append(node.name.value)

        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            name = ".".join(self.scope)
            self.scope.pop()
            if name not in names or not isinstance(updated.body, cst.IndentedBlock):
                return updated
            self.found.add(name)
            header = cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment("# pragma: no mutate block"))
            return updated.with_changes(body=updated.body.with_changes(header=header))

    keep = Keep()
    path.write_text(cst.parse_module(path.read_text()).visit(keep).code)
    if missing := sorted(set(names) - keep.found):
        raise SystemExit(f"{path}: no function {', '.join(missing)} to keep unmutated")


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
