"""The GPU suite: ``attnkit train``'s MFU, packed instruction tuning, serving and CUDA parity, in one short run.

Run on one CUDA GPU (it refuses to run without one, except with ``--smoke``)::

    python benchmarks/gpu_suite.py                      # the suite, sized for <= 8 minutes on one H100 (untimed)
    python benchmarks/gpu_suite.py --sections parity    # some sections only (parity, serve, sft, training)
    python benchmarks/gpu_suite.py --smoke              # tiny shapes, a few steps, no speed goals (CPU: < 1 min)

It prints one table (and writes it, with every raw figure, to ``$OUT/gpu_suite.json`` when ``OUT`` is set, or
to ``--json PATH``) and exits 1 when a goal is missed (printed ``GOAL MISSED``) or a check fails (``CHECK
FAILED``: parity, tokens that must be equal, a section that crashed). The JSON is also written after each
section (``"complete": false``), so a run cut short keeps what it measured; the quick sections run first.
Nothing is downloaded: every model is random, every corpus generated.

* **training**: ``attnkit train lm`` through :func:`attnkit.api.train` (what the command line runs) on GPT-2
  small's shape (preset ``gpt2``: 12 layers, width 768, 12 heads, context 1,024, a 50,304-token BPE
  vocabulary learnt on a generated corpus: 124 M parameters), ``trainer.precision=bf16-mixed``,
  ``trainer.compile=true``, fused attention (the default SDPA path), batch 16 (``--batch``), timed over 40
  steps after 10 by a callback that synchronises the GPU at the window's ends only. Against it, in the same
  process: a plain loop of the same model and batch shape compiled with ``torch.compile``
  (``benchmarks/gpu_lm.py``'s step: autocast bf16, fused AdamW, ``clip_grad_norm_``; random ids), nanoGPT's
  ``train.py`` style. Tokens/s, MFU against the card's dense bf16 peak (H100 SXM and H200 989, A100 312
  TFLOP/s; another card: n/a; FLOPs per token as nanoGPT / PaLM, ``gpu_lm.flops_per_token``), peak memory.
  Goals: MFU >= 45 %; attnkit >= 0.95x the plain loop.
* **sft**: ``attnkit train sft`` (LoRA rank 8, bf16-mixed) on SmolLM2-135M's shape (``benchmarks/sft.py``'s
  random Llama folder and long-tailed conversations): real (not padding) tokens/s with ``data.packing=true``,
  length-grouped batches and plain shuffled batches. attnkit has no variable-length attention: packed rows
  run ``scaled_dot_product_attention`` with a block-diagonal mask (printed). Goal: packed >= 1.5x plain.
* **serve**: the engine (:class:`attnkit.serve.Engine`, as ``benchmarks/serve.py`` drives it, float32) on
  the 135M shape from 1, 8 and 32 closed-loop clients (tokens must equal one at a time), and transformers'
  ``generate`` at batch 1 on the same weights. Goals: >= 4x one at a time at 8 clients; engine at 1 client
  >= 1.0x transformers at batch 1.
* **parity**: an imported random ``LlamaForCausalLM`` (every tensor perturbed, ``save_pretrained`` then
  :func:`attnkit.interop.load_pretrained`) and a random attnkit lm (gpt2 preset), on the GPU in float32 and
  bfloat16 against the CPU in float32: ``max |diff| / max |logit|`` within 1e-4 (fp32) / 6e-2 (bf16); greedy
  tokens equal in float32. ``--perturb X`` adds noise to the GPU copies (this check must then fail).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

SECTIONS = ["parity", "serve", "sft", "training"]  # the quick ones first: a run cut short keeps their figures
SUITE_SECONDS = 480  # the suite's own goal: 8 minutes on one H100
FULL = {
    "training": dict(layers=12, width=768, heads=12, context=1024, vocab=50304, batch=16, warmup=10, steps=40),
    "sft": dict(layers=30, width=576, ffn=1536, heads=9, kv_heads=3, vocab=49152, context=1024, batch=16,
                conversations=2000, min_tokens=64, warmup=3, steps=10),
    "serve": dict(shape=None, requests=32, new_tokens=64, clients=[1, 8, 32], hf_requests=8),
}  # fmt: skip
SMOKE = {
    "training": dict(layers=2, width=64, heads=4, context=64, vocab=512, batch=4, warmup=1, steps=2),
    "sft": dict(layers=2, width=64, ffn=128, heads=4, kv_heads=2, vocab=512, context=128, batch=2,
                conversations=40, min_tokens=8, warmup=1, steps=2),
    "serve": dict(shape=None, requests=8, new_tokens=8, clients=[1, 8, 32], hf_requests=2),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# The table, the goals, the exit status
# ---------------------------------------------------------------------------------------------------------------


def verdict(r: dict[str, Any], smoke: bool) -> str:
    if r["kind"] == "info" or r["goal"] is None:
        return ""
    if r["kind"] == "goal" and smoke:
        return "not checked (smoke)"
    value = r["value"]
    ok = value is not None and (value <= r["goal"] if r["most"] else value >= r["goal"])
    return "PASS" if ok else "GOAL MISSED" if r["kind"] == "goal" else "CHECK FAILED"


def cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def print_table(rows: list[dict[str, Any]]) -> None:
    print("\n| section | measurement | value | goal | verdict |")
    print("|---|---|---:|---:|---|")
    for r in rows:
        goal = "" if r["goal"] is None else ("<= " if r["most"] else ">= ") + r["fmt"].format(r["goal"])
        print(f"| {r['section']} | {r['name']} | {cell(r['value'], r['fmt'])} | {goal} | {r['verdict']} |")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes, a few steps, no speed goals (runs on a CPU)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS, help="the sections to run")
    p.add_argument("--no-compile", action="store_true", help="training: trainer.compile=false and an eager loop")
    p.add_argument("--batch", type=int, help="training: sequences a step (default 16; --smoke 4)")
    p.add_argument("--perturb", type=float, default=0.0,
                   help="debug: noise of this relative size on the parity copies (the check must fail)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the JSON here (default $OUT/gpu_suite.json when OUT is set)")
    args = p.parse_args(argv)
    if args.perturb < 0:
        p.error(f"--perturb must be >= 0, got {args.perturb}")
    if args.batch is not None and args.batch < 1:
        p.error(f"--batch must be >= 1, got {args.batch}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("error: no CUDA GPU: this suite measures a GPU. Run it on one, or run the CPU smoke test with "
              "--smoke", file=sys.stderr)  # fmt: skip
        return 2
    import gpu_suite_parts as parts  # attnkit, Lightning, transformers: after the check, which needs only torch
    from generate_hf import SMOLLM2_135M, TINY

    device = torch.device("cuda" if cuda else "cpu")
    card = torch.cuda.get_device_name(device) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    peak = parts.card_peak(card) if cuda else None
    sizes = {k: argparse.Namespace(**v) for k, v in (SMOKE if args.smoke else FULL).items()}
    sizes["training"].compile = not (args.no_compile or args.smoke)  # compiling on a CPU takes minutes
    sizes["training"].peak_tflops = peak
    if args.batch:
        sizes["training"].batch = args.batch
    sizes["serve"].shape = TINY if args.smoke else SMOLLM2_135M
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python", *sys.argv]) if argv is None else " ".join(["gpu_suite.py", *argv])
    print(f"# GPU suite{' (smoke)' if args.smoke else ''}: {card}; torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}); attnkit {parts.ATTNKIT_VERSION}; {date}\n# {command}", flush=True)  # fmt: skip
    out: dict[str, Any] = {"card": card, "peak_tflops": peak, "device": device.type, "torch": torch.__version__,
                           "cuda": torch.version.cuda, "attnkit": parts.ATTNKIT_VERSION, "date": date,
                           "command": command, "smoke": args.smoke, "sections": {}, "seconds": {}}  # fmt: skip
    rows: list[dict[str, Any]] = []
    path = args.json or (Path(os.environ["OUT"]) / "gpu_suite.json" if os.environ.get("OUT") else None)
    suite_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as folder:
        tmp = Path(folder)
        runs = {
            "training": lambda o: parts.training_section(tmp, device, sizes["training"], o),
            "sft": lambda o: parts.sft_section(tmp, device, sizes["sft"], o),
            "serve": lambda o: parts.serving_section(device, sizes["serve"], o),
            "parity": lambda o: parts.parity_section(device, args.perturb, o),
        }
        for section in args.sections:
            start, figures = time.perf_counter(), out["sections"].setdefault(section, {})
            print(f"\n## {section}", flush=True)
            try:
                rows += runs[section](figures)
            except Exception as err:  # a crashed section fails the suite; the others still run
                traceback.print_exc()
                figures["error"] = f"{type(err).__name__}: {err}"
                rows.append(
                    parts.row(section, f"the section ran ({figures['error'][:200]})", None, goal=1, kind="check")
                )
            out["seconds"][section] = time.perf_counter() - start
            rows.append(parts.row(section, "section wall time s", out["seconds"][section], "{:.1f}"))
            gc.collect()  # the section's models leave the device
            if cuda:
                torch.cuda.empty_cache()
            if path is not None:  # after every section: a run killed later still leaves these figures
                done = [{**r, "verdict": verdict(r, args.smoke)} for r in rows]
                path.write_text(json.dumps({**out, "rows": done, "complete": False}, indent=2, default=str))
    total = time.perf_counter() - suite_start
    if set(args.sections) == set(SECTIONS):  # the suite's own goal: it fits one short device session
        rows.append(parts.row("suite", "wall time s", total, "{:.1f}", goal=SUITE_SECONDS, kind="goal", most=True))
    else:
        rows.append(parts.row("suite", "wall time s", total, "{:.1f}"))
    for r in rows:
        r["verdict"] = verdict(r, args.smoke)
    print_table(rows)
    failures = [f"{r['verdict']}: {r['section']}: {r['name']} = {cell(r['value'], r['fmt'])}" for r in rows
                if r["verdict"] in ("GOAL MISSED", "CHECK FAILED")]  # fmt: skip
    out.update(rows=rows, failures=failures, passed=not failures, total_seconds=total, complete=True)
    if path is not None:
        path.write_text(json.dumps(out, indent=2, default=str))
        print(f"\nwrote {path}")
    print()
    for failure in failures:
        print(failure)
    print(f"suite {'passed' if not failures else 'FAILED'}: {len(failures)} goal(s) missed or check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
