"""Benchmark: cached decoding of attnkit's ``LanguageModel`` against recomputing the prefix, and against
Hugging Face ``transformers``' ``GPT2LMHeadModel.generate()`` with the same weights.

Run::

    .venv/bin/python benchmarks/kv_cache.py                # full run, 1 thread (several minutes)
    .venv/bin/python benchmarks/kv_cache.py --quick        # tiny sizes, 1 round: a smoke test
    .venv/bin/python benchmarks/kv_cache.py --json out.json

The model (nanoGPT's "baby GPT" shape): 6 layers, width 384, 6 heads, feed-forward 1536, tanh-GELU
(GPT-2's ``gelu_new``), pre-norm, learned positions (context 512), tied output layer, vocabulary 65
(characters), dropout 0, float32. A Hugging Face ``GPT2LMHeadModel`` is built locally from a
``GPT2Config`` of the same shape (random init, nothing downloaded) and its weights are copied into
attnkit's model (:func:`gpt2_to_attnkit`), so both compute the same function: the script checks the
logits (max abs difference) and that greedy generation gives identical tokens before timing.

Decoders, each generating ``--new-tokens`` (256) tokens greedily after a random ``--prompt``
(16-token) prompt, without stopping at an end token, for batch 1 and 8:

* **A**  ``LanguageModel.generate(use_cache=True)``: one new position per step through the
  key/value cache.
* **R**  ``LanguageModel.generate(use_cache=False)``: the whole prefix is recomputed every step
  (only the last position goes through the output layer).
* **H**  ``GPT2LMHeadModel.generate(do_sample=False)``: Hugging Face's own cached decoding loop
  (its default ``sdpa`` attention and dynamic cache).

**Mixed-length batch** (``--mixed-batch``, 8 by default; 0 skips it): ``B`` prompts of lengths spread
evenly over ``--mixed-min``..``--mixed-max`` (4..64) tokens, generated together:

* **MA** ``LanguageModel.generate(list of prompts)``: left padding, per-row positions and masks, cache.
* **MH** ``GPT2LMHeadModel.generate(left-padded ids, attention_mask=...)``.

The new tokens of every row must be identical (the script exits with status 1 otherwise, before
timing), and each row's tokens must equal attnkit generating that prompt alone. Timed over at least 6
paired rounds; the goal is MA/MH >= 1.0x.

Timing as in ``benchmarks/encoder_block.py``: ``torch.set_num_threads(--threads)`` (1 by default),
one warm-up call of each (the parity check), then rounds in which A, R and H run once each, in an order rotated every
round; throughput is ``B * new_tokens / median(time of one call)``. Ratios are paired: the median
over rounds of ``time_X / time_A`` within the same round, so load that comes and goes between rounds
cancels out. R is slow (it processes ~``new_tokens * (prompt + new_tokens / 2)`` positions per row),
so the default is 3 rounds. The garbage collector is off while timing.

Before starting, the script checks that the machine is quiet (1-minute load average and the spread
of a short calibration loop) and prints a ``WARNING`` if it is not; the load is printed again at the
end. Timings on a shared machine are noisy: compare ratios, not absolute tokens/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

try:
    from attnkit.models import LanguageModel, LanguageModelConfig
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnkit.models import LanguageModel, LanguageModelConfig

IMPLS = ("A", "R", "H")
IMPL_NAMES = {"A": "A attnkit cached", "R": "R attnkit recompute", "H": "H HF GPT-2 generate"}


# --------------------------------------------------------------------------------------------
# GPT-2 (Hugging Face) -> attnkit
# --------------------------------------------------------------------------------------------


def gpt2_to_attnkit(hf_model: torch.nn.Module) -> LanguageModel:
    """An attnkit ``LanguageModel`` with the weights of a Hugging Face ``GPT2LMHeadModel``.

    GPT-2's ``Conv1D`` stores ``weight [in, out]`` (a transposed ``nn.Linear``); ``c_attn`` is the
    fused q/k/v projection with the heads contiguous inside each of q, k, v, exactly attnkit's
    ``in_proj`` layout; ``ln_1``/``ln_2`` are the pre-norms of attention/feed-forward (attnkit's
    ``norm1``/``norm3``; ``norm2`` belongs to the cross-attention, absent here), ``ln_f`` the final
    LayerNorm; ``wte``/``wpe`` the token/position embeddings; ``lm_head`` is tied to ``wte``.
    """
    c = hf_model.config
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}[
        c.activation_function
    ]
    cfg = LanguageModelConfig(
        vocab_size=c.vocab_size,
        d_model=c.n_embd,
        num_heads=c.n_head,
        num_layers=c.n_layer,
        dim_feedforward=c.n_inner or 4 * c.n_embd,
        dropout=0.0,
        activation=activation,
        norm_first=True,
        positional="learned",
        max_len=c.n_positions,
        tie_weights=True,
        bias=True,
        layer_norm_eps=c.layer_norm_epsilon,
    )
    model = LanguageModel(cfg)
    sd = hf_model.state_dict()
    out: dict[str, torch.Tensor] = {
        "token_embedding.weight": sd["transformer.wte.weight"],
        "positional.embedding.weight": sd["transformer.wpe.weight"],
        "decoder.norm.weight": sd["transformer.ln_f.weight"],
        "decoder.norm.bias": sd["transformer.ln_f.bias"],
    }
    conv1d = {"self_attn.in_proj": "attn.c_attn", "self_attn.out_proj": "attn.c_proj"}
    conv1d |= {"ff.linear1": "mlp.c_fc", "ff.linear2": "mlp.c_proj"}
    for i in range(cfg.num_layers):
        src, dst = f"transformer.h.{i}", f"decoder.layers.{i}"
        for ours, theirs in conv1d.items():
            out[f"{dst}.{ours}.weight"] = sd[f"{src}.{theirs}.weight"].t()
            out[f"{dst}.{ours}.bias"] = sd[f"{src}.{theirs}.bias"]
        for ours, theirs in {"norm1": "ln_1", "norm3": "ln_2"}.items():
            out[f"{dst}.{ours}.weight"] = sd[f"{src}.{theirs}.weight"]
            out[f"{dst}.{ours}.bias"] = sd[f"{src}.{theirs}.bias"]
    out["lm_head.weight"] = out["token_embedding.weight"]
    model.load_state_dict({k: v.contiguous() for k, v in out.items()}, strict=True)
    return model.eval()


def build_models(vocab: int, d_model: int, layers: int, heads: int, context: int, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=context,
        n_embd=d_model,
        n_layer=layers,
        n_head=heads,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    hf = GPT2LMHeadModel(config).eval()
    return gpt2_to_attnkit(hf), hf


def mixed_prompts(batch: int, low: int, high: int, vocab: int, seed: int) -> list[torch.Tensor]:
    """``batch`` random prompts whose lengths are spread evenly over ``low..high``."""
    g = torch.Generator().manual_seed(seed)
    lengths = [round(low + (high - low) * i / max(batch - 1, 1)) for i in range(batch)]
    return [torch.randint(vocab, (n,), generator=g) for n in lengths]


def call_mixed(impl: str, ours: LanguageModel, hf: torch.nn.Module, prompts: list[torch.Tensor], new_tokens: int):
    """The new tokens ``[B, new_tokens]`` of a mixed-length batch (MA: attnkit, MH: Hugging Face)."""
    width = max(len(p) for p in prompts)
    if impl == "MA":
        return ours.generate(prompts, new_tokens, temperature=0.0, stop_at_eos=False)[:, width:]
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = p
        mask[i, width - len(p) :] = 1
    out = hf.generate(
        ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return out[:, width:]


def check_parity(ours: LanguageModel, hf: torch.nn.Module, vocab: int, prompt: torch.Tensor, new_tokens: int):
    """Max |logit difference| on a random sequence, and whether greedy tokens are identical."""
    x = torch.randint(vocab, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        diff = (ours(x) - hf(x).logits).abs().max().item()
        a = call("A", ours, hf, prompt, new_tokens)
        h = call("H", ours, hf, prompt, new_tokens)
        r = call("R", ours, hf, prompt, new_tokens)
    return diff, torch.equal(a, h), torch.equal(a, r), tuple(a.shape), tuple(h.shape)


def call(impl: str, ours: LanguageModel, hf: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    if impl in ("A", "R"):
        return ours.generate(prompt, new_tokens, temperature=0.0, use_cache=impl == "A", stop_at_eos=False)
    return hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=new_tokens,
        min_new_tokens=None,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )


# --------------------------------------------------------------------------------------------
# Timing and machine state (as benchmarks/encoder_block.py)
# --------------------------------------------------------------------------------------------


def time_interleaved(steps: dict[str, Callable[[], object]], *, warmup: int, reps: int) -> dict[str, list[float]]:
    """Warm up, then ``reps`` round-robin rounds (order rotated every round); per-call seconds."""
    names = list(steps)
    for _ in range(warmup):
        for n in names:
            steps[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    gc.collect()
    gc.disable()
    try:
        for r in range(reps):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                t0 = time.perf_counter()
                steps[n]()
                times[n].append(time.perf_counter() - t0)
            print(f"...   round {r + 1}/{reps} done", file=sys.stderr, flush=True)
    finally:
        gc.enable()
    return times


def rel_iqr(xs: list[float]) -> float:
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / statistics.median(xs)


def calibrate() -> dict[str, float]:
    """Time a fixed matmul workload repeatedly; a busy machine shows as spread between runs."""
    a = torch.randn(192, 192)
    for _ in range(20):
        a @ a
    samples = []
    for _ in range(25):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a
        samples.append(time.perf_counter() - t0)
    return {
        "median_s": statistics.median(samples),
        "rel_iqr": rel_iqr(samples),
        "max_over_min": max(samples) / min(samples),
    }


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny model, few tokens, 1 round: a smoke test")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--reps", type=int, default=None, help="rounds per batch size (default 3; 1 with --quick)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8], help="batch sizes (default 1 8)")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt", type=int, default=16, help="prompt length in tokens (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mixed-batch", type=int, default=8, help="mixed-length batch size (default 8; 0 = skip)")
    p.add_argument("--mixed-min", type=int, default=4, help="shortest mixed prompt (default 4)")
    p.add_argument("--mixed-max", type=int, default=64, help="longest mixed prompt (default 64)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    ncpu = os.cpu_count() or 1
    load_start = loadavg()
    if args.quick:
        vocab, d, layers, heads, context, new_tokens, prompt_len = 65, 32, 2, 2, 64, 8, 4
        reps = args.reps or 1
    else:
        vocab, d, layers, heads, context = 65, 384, 6, 6, 512
        new_tokens, prompt_len, reps = args.new_tokens, args.prompt, args.reps or 3
    if prompt_len + new_tokens > context:
        raise SystemExit(f"prompt + new tokens ({prompt_len + new_tokens}) exceed the context ({context})")

    print("# attnkit KV-cache decoding benchmark")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, cpu_count={ncpu}, "
        f"threads={torch.get_num_threads()}, float32; model: {layers} layers, width {d}, {heads} heads, "
        f"feed-forward {4 * d}, vocab {vocab}, context {context}; greedy, {new_tokens} new tokens after a "
        f"{prompt_len}-token prompt" + (", QUICK (smoke test)" if args.quick else "")
    )
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    calib = calibrate()
    print(
        f"calibration (192x192 matmul x20, 25 samples): median {calib['median_s'] * 1e3:.2f} ms, "
        f"IQR {calib['rel_iqr'] * 100:.1f}%, max/min {calib['max_over_min']:.2f}"
    )
    notes = []
    if load_start[0] > 0.5:
        notes.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        notes.append("the calibration loop's timings spread widely: another process is using the CPU")
    if args.threads > 1:
        notes.append(f"{args.threads} threads on a shared {ncpu}-core machine: timings degrade badly under load")
    for w in notes:
        print(f"WARNING: {w}")
    print()

    ours, hf = build_models(vocab, d, layers, heads, context, args.seed)
    rows = []
    parity = {}
    for batch in args.batches:
        prompt = torch.randint(vocab, (batch, prompt_len), generator=torch.Generator().manual_seed(args.seed + batch))
        diff, same_hf, same_r, shape_a, shape_h = check_parity(ours, hf, vocab, prompt, new_tokens)
        parity[batch] = {
            "max_abs_logit_diff": diff,
            "tokens_identical_hf": same_hf,
            "tokens_identical_recompute": same_r,
        }
        if shape_a != (batch, prompt_len + new_tokens) or shape_h != shape_a:
            raise SystemExit(f"unexpected output shapes: attnkit {shape_a}, HF {shape_h}")
        print(f"... B={batch}: parity checked, timing {reps} round(s)", file=sys.stderr, flush=True)

        def step(impl: str, prompt: torch.Tensor = prompt) -> Callable[[], object]:
            def run() -> object:
                with torch.inference_mode():
                    return call(impl, ours, hf, prompt, new_tokens)

            return run

        # the parity check above already ran A, R and H once: it is the warm-up
        times = time_interleaved({impl: step(impl) for impl in IMPLS}, warmup=0, reps=reps)
        med = {impl: statistics.median(ts) for impl, ts in times.items()}
        tokens = batch * new_tokens
        rows.append(
            {
                "batch": batch,
                "rounds": reps,
                "median_s": med,
                "tokens_per_s": {impl: tokens / med[impl] for impl in IMPLS},
                "paired_ratios": {
                    f"A/{x}": statistics.median(tx / ta for ta, tx in zip(times["A"], times[x])) for x in ("R", "H")
                },
                "rel_iqr": {impl: rel_iqr(ts) for impl, ts in times.items()},
                "times_s": times,
            }
        )
    mixed = None
    if args.mixed_batch > 0:
        low, high = (2, 8) if args.quick else (args.mixed_min, args.mixed_max)
        if high + new_tokens > context:
            raise SystemExit(f"longest mixed prompt + new tokens ({high + new_tokens}) exceed the context ({context})")
        prompts = mixed_prompts(args.mixed_batch, low, high, vocab, args.seed + 1000)
        with torch.inference_mode():
            ma, mh = call_mixed("MA", ours, hf, prompts, new_tokens), call_mixed("MH", ours, hf, prompts, new_tokens)
            alone = [call_mixed("MA", ours, hf, [p], new_tokens)[0] for p in prompts]
        same_hf = torch.equal(ma, mh)
        same_alone = all(torch.equal(ma[i], alone[i]) for i in range(len(prompts)))
        if not (same_hf and same_alone):
            rows_hf = [i for i in range(len(prompts)) if not torch.equal(ma[i], mh[i])]
            rows_alone = [i for i in range(len(prompts)) if not torch.equal(ma[i], alone[i])]
            print(
                f"FAIL: mixed-length batch: rows {rows_hf} differ from HF, rows {rows_alone} from generating alone",
                file=sys.stderr,
            )
            return 1
        mixed_reps = max(reps, 1 if args.quick else 6)
        print(f"... mixed batch: tokens identical, timing {mixed_reps} round(s)", file=sys.stderr, flush=True)

        def mixed_step(impl: str) -> Callable[[], object]:
            def run() -> object:
                with torch.inference_mode():
                    return call_mixed(impl, ours, hf, prompts, new_tokens)

            return run

        mtimes = time_interleaved({i: mixed_step(i) for i in ("MA", "MH")}, warmup=0, reps=mixed_reps)
        mmed = {i: statistics.median(ts) for i, ts in mtimes.items()}
        mixed = {
            "batch": len(prompts),
            "lengths": [len(p) for p in prompts],
            "rounds": mixed_reps,
            "median_s": mmed,
            "tokens_per_s": {i: len(prompts) * new_tokens / mmed[i] for i in mmed},
            "paired_ratio_MA/MH": statistics.median(th / ta for ta, th in zip(mtimes["MA"], mtimes["MH"])),
            "tokens_identical_hf": same_hf,
            "tokens_identical_alone": same_alone,
            "times_s": mtimes,
        }
    load_end = loadavg()

    print(f"## Greedy decoding throughput: new tokens/s (B * {new_tokens} / median time of one call)")
    print()
    heads_row = ["batch", *(IMPL_NAMES[i] for i in IMPLS), "A/R", "A/H", "rounds", "tokens A = H", "max |logit diff|"]
    print("| " + " | ".join(heads_row) + " |")
    print("|" + "|".join(["---:"] * (len(heads_row) - 2) + ["---", "---:"]) + "|")
    for row in rows:
        p = parity[row["batch"]]
        cells = [str(row["batch"]), *(f"{row['tokens_per_s'][i]:,.1f}" for i in IMPLS)]
        cells += [f"{row['paired_ratios']['A/R']:.2f}x", f"{row['paired_ratios']['A/H']:.2f}x", str(row["rounds"])]
        cells += ["yes" if p["tokens_identical_hf"] else "NO", f"{p['max_abs_logit_diff']:.1e}"]
        print("| " + " | ".join(cells) + " |")
    print()
    print(
        "A = attnkit LanguageModel.generate with the KV cache, R = the same without (recomputes the prefix every "
        "step), H = Hugging Face GPT2LMHeadModel.generate (greedy) with the same weights. A/R and A/H: median over "
        "rounds of the paired per-round time ratio (throughput of A over R / over H)."
    )
    print()

    if mixed is not None:
        print(f"## Mixed-length batch: {mixed['batch']} prompts of {mixed['lengths']} tokens, {new_tokens} new each")
        print()
        print("| MA attnkit generate (list) | MH HF generate (left-padded) | MA/MH | rounds | tokens MA = MH = alone |")
        print("|---:|---:|---:|---:|---|")
        tps = mixed["tokens_per_s"]
        print(f"| {tps['MA']:,.1f} | {tps['MH']:,.1f} | {mixed['paired_ratio_MA/MH']:.2f}x | {mixed['rounds']} | yes |")
        print()

    goals = []
    if mixed is not None:
        goals.append(("mixed batch: attnkit / HF generate (MA/MH)", mixed["paired_ratio_MA/MH"], 1.0))
    for row in rows:
        b = row["batch"]
        goals.append((f"B={b}: cached / recompute (A/R)", row["paired_ratios"]["A/R"], 5.0))
        goals.append((f"B={b}: attnkit / HF generate (A/H)", row["paired_ratios"]["A/H"], 1.0))
        goals.append((f"B={b}: greedy tokens identical to HF", 1.0 if parity[b]["tokens_identical_hf"] else 0.0, 1.0))
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    for name, measured, target in goals:
        verdict = "PASS" if measured >= target else "FAIL"
        value = ("yes" if measured else "no") if "identical" in name else f"{measured:.2f}x"
        want = "yes" if "identical" in name else f">= {target:.2f}x"
        print(f"| {name} | {value} | {want} | {verdict} |")
    print()
    n_pass = sum(m >= t for _, m, t in goals)
    print(f"{n_pass}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in notes:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses a tiny model and few tokens; its numbers say nothing about the goals.")

    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "python": platform.python_version(),
                "cpu_count": ncpu,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "model": {"vocab": vocab, "d_model": d, "layers": layers, "heads": heads, "context": context},
                "new_tokens": new_tokens,
                "prompt": prompt_len,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": notes,
                "parity": parity,
            },
            "rows": rows,
            "mixed": mixed,
            "goals": [{"name": n, "measured": m, "target": t, "passed": m >= t} for n, m, t in goals],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    if not all(p["tokens_identical_hf"] for p in parity.values()):
        print("FAIL: greedy tokens differ from HF's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
