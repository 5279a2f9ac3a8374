"""Benchmark: what hook points cost when no hook is registered (issue 37: "zero cost when no hook is registered").

Run::

    .venv/bin/python benchmarks/hooks_overhead.py                 # a small Llama shape, 1 thread, 8 rounds
    .venv/bin/python benchmarks/hooks_overhead.py --shape 135m    # SmolLM2-135M's shape (30 layers, width 576)
    .venv/bin/python benchmarks/hooks_overhead.py --quick         # a tiny shape, 2 rounds: a smoke test
    .venv/bin/python benchmarks/hooks_overhead.py --json out.json

Every attnkit block, stack and model holds :class:`attnkit.nn.HookPoint` modules on its activations; with no hook
added a hook point returns its input at once. This script measures what they still cost, against the **same
model with the hook points taken out of the path**: the reference ``R`` is the very same instance (the same
weights, buffers and code) whose methods that touch a hook point (``LanguageModel._hidden``, the stack's
``_run``, the blocks', attention's and feed-forward's ``forward``) are, for the duration of ``R``'s timings,
replaced on the instance by copies of their source with every hook point removed (:func:`strip_hooks`, with
Python's ``ast``): ``self.hook_x(a)`` -> ``a``, ``through_heads(point, a)`` -> ``a``, ``embed_positions(h, add,
point)`` -> ``add(h)``, ``point.fns`` -> ``False``, the scores'/pattern's hook points given to ``attend`` ->
``None``. That is attnkit without hook points, the fairest reference the code allows: transformers'
``LlamaForCausalLM`` would compare two implementations (``benchmarks/generate_hf.py`` does that), not the hooks.
Before timing, both must give the same logits and the same greedy tokens, bit for bit (exit status 1 otherwise).

The model (``--shape small``, the default): a random Llama-family model (built locally from a Llama
``config.json``'s fields, as a Llama checkpoint is loaded; nothing downloaded): 4 layers, width 256, 4 query / 2
key-value heads, SwiGLU 512, RMSNorm, rotary, vocabulary 4,096. Small on purpose: hook points cost Python calls, a
fixed amount per layer, so the smaller the model the larger their share; ``--shape 135m`` is SmolLM2-135M's shape
(where that share is smaller still). Float32, ``torch.inference_mode()``, ``--threads`` (1).

Two workloads, each timed as ``A`` (attnkit as it is, hook points in the path, none registered) and ``R``:

* **forward**: ``model(ids)`` on ``--batch`` (1) rows of ``--length`` (128) tokens, repeated ``--reps`` (10; 2 with
  ``--shape 135m``) times a timing;
* **generate**: ``model.generate(prompt, --new-tokens (32), temperature=0)`` (greedy, the key/value cache, never
  stopping early) from a ``--prompt`` (16) token prompt: a step is one token, where the per-call overhead of hook
  points weighs most.

``--rounds`` (8, at least 6) paired rounds, the order alternating (A R, R A, ...), garbage collector off; a round
times ``--inner`` (3) such pairs and keeps each one's fastest (load on a shared machine only adds time). The clock
is the thread's CPU time (``time.thread_time``; with one thread all of the work is in it): on a shared machine the
wall clock also counts the time the process waits for a core, several percent at random, which says nothing about
hook points; the wall-clock ratio is printed beside it. Each round's ratio is ``time_A / time_R`` (above 1: the
hook points cost time), the result the median over rounds, with per-round wins / ties / losses for the reference
(a tie within ``--tie-band``, 1 %). A direct estimate that the machine's load barely moves is printed beside it:
the hook points a pass reaches at most (all of the model's) times the measured cost of one call of an empty hook
point, over the pass's time.

The goal: ``A / R <= 1.03`` (``--goal``) in the median of paired rounds, for both workloads: "within noise". Why
3 %: two timings of the same code taken back to back differ by a few percent on a shared machine, even in CPU time
(caches and memory bandwidth are shared with the other processes); the median of >= 6 paired rounds brings that to
about 1 %, so a median above 1.03 is a cost, not noise (the direct estimate says what hook points can cost at
most). The script exits with status 1 when the goal is missed (with ``--quick`` only when ``--goal`` is given: a
tiny model's numbers say nothing about the goal). Before starting, the script checks that the machine is quiet
(1-minute load average and the spread of a short calibration loop, ``encoder_block.calibrate``) and prints a
``WARNING`` if it is not; the load is printed again at the end.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import inspect
import json
import os
import platform
import statistics
import sys
import textwrap
import time
import timeit
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from attnkit.nn.hooks import HookPoint, hook_points
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.nn.hooks import HookPoint, hook_points
from attnkit.interop.families.llama import llama_config
from attnkit.models import LanguageModel
from encoder_block import loadavg, quiet_check, rel_iqr

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rope_theta=100000.0,
                    rms_norm_eps=1e-5, tie_word_embeddings=True)  # fmt: skip
SMALL = dict(SMOLLM2_135M, vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
TINY = dict(
    SMALL, vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, max_position_embeddings=64
)
SHAPES = {"small": SMALL, "135m": SMOLLM2_135M}
GOAL = 1.03
HOOK_FUNCTIONS = ("through_heads", "embed_positions")


def build_model(shape: dict[str, Any], seed: int) -> LanguageModel:
    """A seeded random attnkit model of a Llama ``config.json``'s ``shape`` (the config Llama checkpoints load
    with, :func:`attnkit.interop.families.llama.llama_config`; nothing downloaded)."""
    torch.manual_seed(seed)
    config = llama_config({**shape, "model_type": "llama"}, bos_id=1, eos_id=2, source="the benchmark's shape")
    return LanguageModel(config).eval()


# ------------------------------------------------------------------------------------------- the reference


class _StripHooks(ast.NodeTransformer):
    """Takes every hook point out of a function's syntax tree (see the module's docstring)."""

    @staticmethod
    def _is_point(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr.startswith("hook_")

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if self._is_point(node.func) and len(node.args) == 1 and not node.keywords:
            return node.args[0]  # self.hook_x(a) -> a
        if isinstance(node.func, ast.Name) and node.func.id == "through_heads" and len(node.args) == 2:
            return node.args[1]  # through_heads(point, a) -> a
        if isinstance(node.func, ast.Name) and node.func.id == "embed_positions" and len(node.args) == 3:
            return ast.Call(func=node.args[1], args=[node.args[0]], keywords=[])  # add(h)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr == "fns" and self._is_point(node.value):
            return ast.Constant(False)  # point.fns: no hook
        return node

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        self.generic_visit(node)
        if node.elts and all(self._is_point(e) for e in node.elts) and isinstance(node.ctx, ast.Load):
            return ast.Constant(None)  # (self.hook_attn_scores, self.hook_pattern) given to attend -> None
        return node


def _touches_hooks(fn: Callable[..., Any]) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("hook_"):
            return True
        if isinstance(node, ast.Name) and node.id in HOOK_FUNCTIONS:
            return True
    return False


def strip_hooks(fn: types.FunctionType, owner: type) -> types.FunctionType:
    """``fn`` (a method of ``owner``) compiled again from its source with every hook point taken out; its
    globals, defaults and decorators are the original's (``super()`` still finds ``owner``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise TypeError(f"{fn.__qualname__} is not a plain function")
    func = _StripHooks().visit(func)
    for node in ast.walk(func):  # docstrings may name hook points; the code must not
        if isinstance(node, ast.Attribute) and node.attr.startswith("hook_"):
            raise RuntimeError(f"{fn.__qualname__}: a hook point is left after stripping: {ast.unparse(node)}")
        if isinstance(node, ast.Name) and node.id in HOOK_FUNCTIONS:
            raise RuntimeError(f"{fn.__qualname__}: {node.id} is left after stripping")
    factory = ast.FunctionDef(
        name="_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="__class__")], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[func, ast.Return(value=ast.Name(id=func.name, ctx=ast.Load()))],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    namespace: dict[str, Any] = {}
    exec(compile(module, f"<{fn.__qualname__} without hook points>", "exec"), fn.__globals__, namespace)
    stripped: types.FunctionType = namespace["_factory"](owner)
    return stripped


def stripped_methods(model: nn.Module) -> list[tuple[nn.Module, str, types.FunctionType]]:
    """Every (module, method name, method without hook points) of ``model``'s modules whose class's method (from
    attnkit) touches a hook point."""
    cache: dict[tuple[type, str], types.FunctionType | None] = {}
    out = []
    for module in model.modules():
        cls = type(module)
        if isinstance(module, HookPoint) or not cls.__module__.startswith("attnkit."):
            continue
        for name in dir(cls):
            if name.startswith("__"):  # __init__ creates hook points; the passes run in other methods
                continue
            key = (cls, name)
            if key not in cache:
                attr = inspect.getattr_static(cls, name)
                owner = next((c for c in cls.__mro__ if name in vars(c)), cls)
                plain = isinstance(attr, types.FunctionType) and owner.__module__.startswith("attnkit.")
                cache[key] = strip_hooks(attr, owner) if plain and _touches_hooks(attr) else None
            stripped = cache[key]
            if stripped is not None:
                out.append((module, name, stripped))
    return out


@contextlib.contextmanager
def hooks_taken_out(methods: list[tuple[nn.Module, str, types.FunctionType]]) -> Iterator[None]:
    """For the duration of the block, each module's method is its copy without hook points (set on the
    instance, which Python reads before the class); removed on exit."""
    for module, name, fn in methods:
        object.__setattr__(module, name, types.MethodType(fn, module))
    try:
        yield
    finally:
        for module, name, _ in methods:
            object.__delattr__(module, name)


# ------------------------------------------------------------------------------------------- timing


def time_paired(
    steps: dict[str, Callable[[], object]], rounds: int, inner: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``rounds`` rounds of A and R, the order alternating (A R, R A, ...); within a round ``inner`` such pairs,
    each implementation's time being its fastest of them. Returns seconds per call: the thread's CPU time
    (``time.thread_time``) and the wall-clock time (``time.perf_counter``)."""
    cpu: dict[str, list[float]] = {"A": [], "R": []}
    wall: dict[str, list[float]] = {"A": [], "R": []}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            best_cpu, best_wall = {"A": float("inf"), "R": float("inf")}, {"A": float("inf"), "R": float("inf")}
            for i in range(inner):
                for impl in ("A", "R") if (r + i) % 2 == 0 else ("R", "A"):
                    c0, t0 = time.thread_time(), time.perf_counter()
                    steps[impl]()
                    best_wall[impl] = min(best_wall[impl], time.perf_counter() - t0)
                    best_cpu[impl] = min(best_cpu[impl], time.thread_time() - c0)
            for impl in ("A", "R"):
                cpu[impl].append(best_cpu[impl])
                wall[impl].append(best_wall[impl])
    finally:
        gc.enable()
    return cpu, wall


def verdict(ratio: float, band: float) -> str:
    """``win`` (the reference faster by more than ``band``: the hook points cost), ``loss`` or ``tie``."""
    return "win" if ratio > 1 + band else "loss" if ratio < 1 - band else "tie"


def empty_hook_call_s() -> float:
    """Seconds of one call of a hook point with no hook (the best of 7 timings of 20,000 calls)."""
    point, x = HookPoint(), torch.zeros(1)
    return min(timeit.repeat(lambda: point(x), number=20000, repeat=7)) / 20000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="small", help="the model's shape (default small)")
    p.add_argument("--quick", action="store_true", help="a tiny shape, 2 rounds: a smoke test")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds (default 8, at least 6; 2 with --quick)")
    p.add_argument("--inner", type=int, default=None, help="A/R pairs per round, each its fastest (default 3; 1 quick)")
    p.add_argument("--reps", type=int, default=None, help="passes per timing (default 10; 2 --quick, --shape 135m)")
    p.add_argument("--batch", type=int, default=1, help="rows of the forward pass (default 1)")
    p.add_argument("--length", type=int, default=None, help="tokens per row of the forward pass (default 128)")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens of generation (default 16)")
    p.add_argument("--new-tokens", type=int, default=None, help="greedy new tokens (default 32; 8 with --quick)")
    p.add_argument("--tie-band", type=float, default=0.01, help="a round within 1 +- this is a tie (default 0.01)")
    p.add_argument("--goal", type=float, default=None, help=f"the largest median A/R that passes (default {GOAL})")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.inner = args.rounds or 2, args.inner or 1
        args.reps, args.length, args.new_tokens = args.reps or 2, args.length or 16, args.new_tokens or 8
    args.rounds, args.inner = args.rounds or 8, args.inner or 3
    args.reps = args.reps or (2 if args.shape == "135m" else 10)
    args.length, args.new_tokens = args.length or 128, args.new_tokens or 32
    if args.rounds < (2 if args.quick else 6):
        p.error("--rounds must be at least 6 (2 with --quick): paired rounds alternate the order")
    for name in ("inner", "reps", "batch", "length", "prompt", "new_tokens", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.goal is not None and args.goal <= 0:
        p.error("--goal must be a positive ratio")
    args.check_goal = not args.quick or args.goal is not None  # a tiny model's numbers say nothing about the goal
    args.goal = GOAL if args.goal is None else args.goal
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    shape = TINY if args.quick else SHAPES[args.shape]
    goal, check_goal = args.goal, args.check_goal
    if max(args.length, args.prompt + args.new_tokens) > shape["max_position_embeddings"]:
        raise SystemExit(
            f"--length and --prompt + --new-tokens must fit the context {shape['max_position_embeddings']}"
        )
    ncpu = os.cpu_count() or 1
    print("# Hook points with no hook registered: attnkit (A) vs the same model with them taken out (R)")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, cpu_count={ncpu}, "
        f"threads={torch.get_num_threads()}, float32; model ({'tiny' if args.quick else args.shape}): "
        f"{shape['num_hidden_layers']} layers, width {shape['hidden_size']}, {shape['num_attention_heads']} heads / "
        f"{shape['num_key_value_heads']} KV heads, feed-forward {shape['intermediate_size']}, vocab "
        f"{shape['vocab_size']:,}" + (", QUICK (smoke test)" if args.quick else "")
    )
    load_start, calib, notes = quiet_check(args.threads)

    model = build_model(shape, args.seed)
    methods = stripped_methods(model)
    points = len(hook_points(model))
    print(
        f"R: {len(methods)} methods of {len({id(m) for m, _, _ in methods})} modules replaced by copies without hook "
        f"points ({', '.join(sorted({f'{type(m).__name__}.{n}' for m, n, _ in methods}))}); the model has {points} "
        "hook points, none with a hook"
    )
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(3, shape["vocab_size"], (args.batch, args.length), generator=g)
    prompt = torch.randint(3, shape["vocab_size"], (1, args.prompt), generator=g)

    def forward() -> torch.Tensor:
        with torch.inference_mode():
            for _ in range(args.reps):
                out = model(ids)
        return out

    def generate() -> torch.Tensor:
        with torch.inference_mode():
            return model.generate(prompt, args.new_tokens, temperature=0.0, use_cache=True, stop_at_eos=False)

    def as_reference(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            with hooks_taken_out(methods):
                return fn()

        return run

    rows = []
    for name, fn in (("forward", forward), ("generate", generate)):
        a = fn()  # the parity check is also the warm-up
        r = as_reference(fn)()
        if not torch.equal(a, r):
            print(f"FAIL: {name}: attnkit's output differs from the reference's without hook points "
                  f"(max |A - R| = {float((a.float() - r.float()).abs().max()):.3g})", file=sys.stderr)  # fmt: skip
            return 1
        print(f"... {name}: A = R bit for bit; timing {args.rounds} paired rounds", file=sys.stderr, flush=True)
        times, wall = time_paired({"A": fn, "R": as_reference(fn)}, args.rounds, args.inner)
        ratios = [ta / tr for ta, tr in zip(times["A"], times["R"])]
        wall_ratios = [ta / tr for ta, tr in zip(wall["A"], wall["R"])]
        verdicts = [verdict(x, args.tie_band) for x in ratios]
        per_call = args.reps if name == "forward" else args.new_tokens
        rows.append(
            {
                "workload": name,
                "what": f"{args.reps} x model(ids [{args.batch}, {args.length}])"
                if name == "forward"
                else f"generate {args.new_tokens} tokens after {args.prompt}",
                "median_s": {k: statistics.median(v) for k, v in times.items()},
                "ms_per_pass_or_token": {k: statistics.median(v) * 1e3 / per_call for k, v in times.items()},
                "ratios": ratios,
                "median_ratio": statistics.median(ratios),
                "wins": verdicts.count("win"),
                "ties": verdicts.count("tie"),
                "losses": verdicts.count("loss"),
                "rel_iqr": {k: rel_iqr(v) for k, v in times.items()},
                "times_s": times,
                "wall_ratios": wall_ratios,
                "median_wall_ratio": statistics.median(wall_ratios),
                "wall_times_s": wall,
                "identical": True,
            }
        )
    call_s = empty_hook_call_s()
    for row in rows:  # the most the hook points can cost: every one reached once per pass (a step: a pass)
        row["estimate"] = points * call_s / (row["ms_per_pass_or_token"]["R"] / 1e3)
    load_end = loadavg()

    print("## No hook registered: A (hook points in the path) / R (taken out)")
    print()
    print("| workload | A ms per pass or token | R ms per pass or token | A/R (median of paired rounds) "
          "| A/R wall clock | rounds | R wins / ties / A wins | direct estimate | A = R |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---|---:|---|")
    for row in rows:
        ms = row["ms_per_pass_or_token"]
        print(
            f"| {row['workload']}: {row['what']} | {ms['A']:.3f} | {ms['R']:.3f} | {row['median_ratio']:.3f}x | "
            f"{row['median_wall_ratio']:.3f}x | {args.rounds} | {row['wins']} / {row['ties']} / {row['losses']} | "
            f"+{row['estimate'] * 100:.2f} % | yes |"
        )
    print()
    print(
        "Times: the thread's CPU time (medians over rounds). A/R: per round, the CPU time of A over that of R (above "
        "1: the hook points cost time); the median over rounds; the same with wall-clock times beside it. A round "
        f"within +-{args.tie_band * 100:.0f} % is a tie. Direct estimate: {points} hook points x {call_s * 1e9:.0f} "
        "ns (one call of an empty hook point) over R's time per pass or token. Per-round ratios (CPU): "
        + "; ".join(f"{r['workload']}: " + ", ".join(f"{x:.3f}" for x in r["ratios"]) for r in rows)
    )
    print()
    goals = [(f"{r['workload']}: A / R (no hook registered)", r["median_ratio"], goal) for r in rows]
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    for gname, measured, target in goals:
        result = ("PASS" if measured <= target else "FAIL") if check_goal else "not checked (--quick)"
        print(f"| {gname} | {measured:.3f}x | <= {target:.2f}x | {result} |")
    print()
    passed = [m <= t for _, m, t in goals]
    print(f"{sum(passed)}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in notes:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses a tiny model and few rounds; its numbers say nothing about the goal.")
    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpu_count": ncpu,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "shape": "tiny" if args.quick else args.shape,
                "model": shape,
                "reference": "the same model with its hook points taken out (strip_hooks)",
                "stripped_methods": sorted({f"{type(m).__name__}.{n}" for m, n, _ in methods}),
                "hook_points": points,
                "empty_hook_call_s": call_s,
                "rounds": args.rounds,
                "inner": args.inner,
                "tie_band": args.tie_band,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": notes,
            },
            "rows": rows,
            "goals": [
                {"name": n, "measured": m, "target": t, "passed": m <= t, "checked": check_goal} for n, m, t in goals
            ],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    if check_goal and not all(passed):
        missed = ", ".join(f"{n} {m:.3f}x > {t:.2f}x" for (n, m, t), ok in zip(goals, passed) if not ok)
        print(f"FAIL: goal missed: {missed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
