"""The sections of ``benchmarks/gpu_suite.py`` (training, packed instruction tuning, serving, CUDA parity) and
what they share (the card's peak, a step-timing callback, a result row). Each section returns rows (:func:`row`)
and puts its raw figures in a dict for the JSON; nothing here decides the exit status."""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))
try:
    import attnkit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from interop_parity import perturb  # the parity tests' helper: no norm weight left at 1, no bias at 0

import generate_hf  # the 135M shape, HF/attnkit model pairs with the same weights, transformers' batch-1 call
import gpu_lm  # the plain loop's step and the FLOPs per token
import serve as serve_bench  # the engine's closed-loop clients
from attnkit import __version__, api
from attnkit.interop import load_pretrained
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.serve import Engine
from attnkit.text.tokenizers import Tokenizer, build_tokenizer

ATTNKIT_VERSION = __version__
# Dense bf16 peak TFLOP/s by card (datasheets); a name containing a marker of NOT_PEAK is another variant.
PEAKS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}
NOT_PEAK = ("PCIe", "NVL")  # H100 PCIe (756) and the NVL cards have other peaks: MFU n/a rather than wrong
# Parity: max |device logits - CPU float32 logits| / max |CPU logits| allowed per dtype.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 6e-2}


def row(section: str, name: str, value: float | None, fmt: str = "{:,.1f}", *, goal: float | None = None,
        kind: str = "info", most: bool = False) -> dict[str, Any]:  # fmt: skip
    """A table row. ``kind``: ``info``; ``goal`` (a speed goal: not checked by ``--smoke``) or ``check`` (checked
    always: parity, tokens that must be equal). A checked row passes when ``value >= goal`` (``most``: ``value <=
    goal``); a ``None`` value fails it."""
    return {"section": section, "name": name, "value": value, "fmt": fmt, "goal": goal, "kind": kind, "most": most}


def card_peak(name: str) -> float | None:
    """The card's dense bf16 peak in TFLOP/s, or ``None`` (unknown card: no MFU)."""
    if any(marker in name for marker in NOT_PEAK):
        return None
    return next((peak for marker, peak in PEAKS.items() if marker in name), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """The most memory torch allocated on ``device`` since :func:`reset_peak` (``None`` on the CPU)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


class StepWindow(Callback):
    """Times training steps ``warmup .. warmup + steps - 1`` of a Lightning run (the device synchronised at the
    window's two ends only, so the steps in between queue as they do in any run) and sums ``count(batch)`` over
    them (a tensor on the device is summed without a synchronisation); reads the peak device memory at the
    window's end."""

    def __init__(self, warmup: int, steps: int, count: Callable[[Any], Any]) -> None:
        self.warmup, self.steps, self.count = warmup, steps, count
        self.tokens: Any = 0
        self.start = self.seconds = 0.0
        self.peak: float | None = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.warmup:
            sync(pl_module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.warmup <= batch_idx < self.warmup + self.steps:
            self.tokens = self.tokens + self.count(batch)
        if batch_idx == self.warmup + self.steps - 1:
            sync(pl_module.device)
            self.seconds = time.perf_counter() - self.start
            self.peak = peak_gib(pl_module.device)

    def tokens_per_s(self) -> float:
        if not self.seconds:
            raise RuntimeError(
                f"the run ended before its timed window (steps {self.warmup}..{self.warmup + self.steps - 1}): "
                "give it more data or fewer --warmup/--steps"
            )
        return float(self.tokens) / self.seconds


def made_up_words(n: int) -> list[str]:
    """``n`` distinct made-up lowercase words of four letters (``aaaa``, ``aaab``, ...)."""
    letters = string.ascii_lowercase
    return ["".join(letters[i // 26**k % 26] for k in range(3, -1, -1)) for i in range(n)]


def exact_tokenizer(vocab: int) -> Tokenizer:
    """A byte-level BPE tokenizer of exactly ``vocab`` (>= 260) ids, learnt on ``vocab`` made-up words: every id
    decodes (the engine decodes each token it generates). Not ``word``: its trainer stops at 30,000 words."""
    words = made_up_words(vocab)
    texts = [" ".join(words[i : i + 200]) for i in range(0, vocab, 200)]
    tokenizer = build_tokenizer("bpe", texts, vocab_size=vocab)
    if tokenizer.vocab_size != vocab:
        raise RuntimeError(f"the BPE tokenizer has {tokenizer.vocab_size} ids, not {vocab}")
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------
# Training: `attnkit train lm` against a plain compiled loop
# ---------------------------------------------------------------------------------------------------------------


def lm_corpus(path: Path, vocab: int, words: int, seed: int = 0) -> None:
    """A text file of at least ``words`` words in paragraphs of 200 (a document each): every one of ``vocab``
    made-up words once, then words drawn uniformly (a ``bpe`` tokenizer of ``vocab`` ids learns them)."""
    rng = random.Random(seed)
    vocabulary = made_up_words(vocab)
    stream = vocabulary + rng.choices(vocabulary, k=max(0, words - vocab))
    path.write_text("\n\n".join(" ".join(stream[i : i + 200]) for i in range(0, len(stream), 200)) + "\n")


def plain_loop(config: LanguageModelConfig, device: torch.device, s: argparse.Namespace) -> dict[str, Any]:
    """``benchmarks/gpu_lm.py``'s training step on a fresh model of ``config`` (compiled unless ``--no-compile``),
    fused AdamW on CUDA, random ids ``[batch, context + 1]``: tokens/s over ``s.steps`` steps after ``s.warmup``."""
    torch.manual_seed(0)
    model = LanguageModel(config).to(device)
    params, flops = sum(p.numel() for p in model.parameters()), gpu_lm.flops_per_token(model)
    step_model = torch.compile(model) if s.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=device.type == "cuda")
    generator = torch.Generator().manual_seed(1)
    shape = (s.batch, config.max_len + 1)
    batches = [torch.randint(0, config.vocab_size, shape, generator=generator).to(device) for _ in range(s.steps)]
    reset_peak(device)
    for start in range(0, s.warmup, s.steps):  # the warm-up (compilation included) on the same batches
        gpu_lm.train_steps(step_model, optimizer, batches[: s.warmup - start], device)
    sync(device)
    start_time = time.perf_counter()
    gpu_lm.train_steps(step_model, optimizer, batches, device)
    sync(device)
    seconds = time.perf_counter() - start_time
    return {"tokens_per_s": s.batch * config.max_len * s.steps / seconds, "seconds": seconds,
            "peak_gib": peak_gib(device), "params": params, "flops_per_token": flops}  # fmt: skip


def training_section(tmp: Path, device: torch.device, s: argparse.Namespace, out: dict[str, Any]) -> list[dict]:
    """``attnkit train lm`` (:func:`attnkit.api.train`) on ``s``'s GPT-2 shape and a generated corpus, timed by
    :class:`StepWindow`, then :func:`plain_loop` on the same model config once the run's memory is freed."""
    blocks = (s.warmup + s.steps) * s.batch
    corpus = tmp / "corpus.txt"
    lm_corpus(corpus, s.vocab, int(1.2 * blocks * s.context) + 2000)
    model = {"preset": "gpt2", "d_model": s.width, "num_heads": s.heads, "num_layers": s.layers,
             "dim_feedforward": 4 * s.width, "max_len": s.context, "dropout": 0.0}  # fmt: skip
    data = {"source": str(corpus), "tokenizer": "bpe", "vocab_size": s.vocab, "val_fraction": 0.01,
            "test_fraction": 0.01, "cache_dir": str(tmp / "cache")}  # fmt: skip
    optim = {"optimizer": "adamw", "lr": 6e-4, "weight_decay": 0.1, "warmup": 10, "gradient_clip_val": 1.0}
    trainer = trainer_section(device, s.batch, s.warmup + s.steps, compile=s.compile)
    window = StepWindow(s.warmup, s.steps, lambda batch: batch[0].numel())
    reset_peak(device)
    start = time.perf_counter()
    result = api.train("lm", {"output_dir": str(tmp / "runs"), "seed": 0, "model": model, "data": data,
                              "optim": optim, "trainer": trainer}, callbacks=[window])  # fmt: skip
    wall = time.perf_counter() - start
    config = result.module.model.config
    del result  # its model and optimiser state leave the device before the plain loop's peak is measured
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    ours = {"tokens_per_s": window.tokens_per_s(), "seconds": window.seconds, "peak_gib": window.peak, "wall": wall}
    if device.type == "cuda":  # what the attnkit run left allocated counts in the plain loop's peak
        out["allocated_before_plain_gib"] = torch.cuda.memory_allocated(device) / 2**30
    plain = plain_loop(config, device, s)
    out.update(attnkit=ours, plain=plain, ratio=ours["tokens_per_s"] / plain["tokens_per_s"])
    peak = s.peak_tflops
    precision = "bf16-mixed" if device.type == "cuda" else "fp32"
    label = (f"{plain['params'] / 1e6:.1f}M, {s.layers} layers, context {s.context}, batch {s.batch}, "
             f"{precision}, {'compiled' if s.compile else 'eager'}")  # fmt: skip
    loop = f"plain {'compiled' if s.compile else 'eager'} loop (gpu_lm step): tokens/s"
    rows = [row("training", f"attnkit train lm: tokens/s ({label})", ours["tokens_per_s"], "{:,.0f}"),
            row("training", loop, plain["tokens_per_s"], "{:,.0f}")]  # fmt: skip
    for key, name in (("attnkit", "attnkit train lm"), ("plain", "plain loop")):
        figures = ours if key == "attnkit" else plain
        mfu = None if peak is None else 100 * figures["tokens_per_s"] * plain["flops_per_token"] / (peak * 1e12)
        out[key]["mfu_percent"] = mfu
        checked = key == "attnkit" and peak is not None
        peak_name = f"of {peak:g} TFLOP/s bf16" if peak is not None else "n/a: no known bf16 peak for this card"
        what = f"{name}: MFU % ({peak_name})"
        rows.append(
            row("training", what, mfu, "{:.1f}", goal=45.0 if checked else None, kind="goal" if checked else "info")
        )
    rows += [row("training", "attnkit / plain loop", out["ratio"], "{:.2f}x", goal=0.95, kind="goal"),
             row("training", "attnkit train lm: peak memory GiB", ours["peak_gib"], "{:.2f}"),
             row("training", "plain loop: peak memory GiB", plain["peak_gib"], "{:.2f}"),
             row("training", "attnkit train lm: wall time s (data, compile, checkpoints)", wall, "{:.1f}")]  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Packed instruction tuning: `train sft` packed, length-grouped and in plain batches
# ---------------------------------------------------------------------------------------------------------------

SFT_KINDS = {  # the data overrides of each run
    "plain": {"packing": False, "group_by_length": False},
    "grouped": {"packing": False, "group_by_length": True},
    "packed": {"packing": True},
}


def varlen_attention() -> str:
    """What the packed rows' attention runs: attnkit has no variable-length path (it builds a block-diagonal
    mask for ``scaled_dot_product_attention``), whatever torch offers."""
    try:
        import torch.nn.attention.varlen  # noqa: F401

        offered = "torch offers torch.nn.attention.varlen"
    except ImportError:
        offered = "this torch has no torch.nn.attention.varlen"
    return f"variable-length attention is not implemented in attnkit: packed rows run masked SDPA ({offered})"


def sft_section(tmp: Path, device: torch.device, s: argparse.Namespace, out: dict[str, Any]) -> list[dict[str, Any]]:
    """``attnkit train sft`` (LoRA rank 8, the task's default) on a random Llama of ``s``'s shape: real (not
    padding) tokens/s over a window of steps, with packing, length-grouped and in plain shuffled batches."""
    import sft as sft_bench  # its random Llama folder and conversations; here, as it needs `datasets` (and TRL's)

    shape = argparse.Namespace(vocab=s.vocab, width=s.width, ffn=s.ffn, layers=s.layers, heads=s.heads,
                               kv_heads=s.kv_heads, context=s.context, seed=0)  # fmt: skip
    folder = sft_bench.build_folder(tmp / "sft-model", shape)
    pad = json.loads((folder / "config.json").read_text())["pad_token_id"]
    chats = sft_bench.conversations(s.conversations, s.min_tokens, 0, "log-uniform")
    source = tmp / "chats.jsonl"
    source.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    print(varlen_attention(), flush=True)
    speeds = {}
    for kind, data in SFT_KINDS.items():
        window = StepWindow(s.warmup, s.steps, lambda batch: (batch[0] != pad).sum())
        config = {
            "output_dir": str(tmp / "runs"), "seed": 0, "model": {"init": str(folder), "max_len": s.context},
            "data": {"source": str(source), "val_fraction": 0.01, "test_fraction": 0.01, **data},
            "trainer": trainer_section(device, s.batch, s.warmup + s.steps, compile=False),
        }  # fmt: skip
        api.train("sft", config, callbacks=[window])
        speeds[kind] = window.tokens_per_s()
        out[kind] = {"real_tokens_per_s": speeds[kind], "peak_gib": window.peak, "seconds": window.seconds}
        print(f"sft {kind}: {speeds[kind]:,.0f} real tokens/s", flush=True)
    out["packed_over_plain"] = speeds["packed"] / speeds["plain"]
    out["varlen"] = False
    label = f"{s.layers} layers, batch {s.batch}, context {s.context}, LoRA r8"
    return [
        row("sft", f"plain shuffled batches: real tokens/s ({label})", speeds["plain"]),
        row("sft", "length-grouped batches (default): real tokens/s", speeds["grouped"]),
        row("sft", "packed, masked SDPA (no varlen in attnkit): real tokens/s", speeds["packed"]),
        row("sft", "packed / plain batches", out["packed_over_plain"], "{:.2f}x", goal=1.5, kind="goal"),
    ]


def trainer_section(device: torch.device, batch: int, batches: int, *, compile: bool) -> dict[str, Any]:
    """The ``trainer`` section of a timed run: one epoch cut to ``batches`` steps, no mid-epoch checkpoints, no
    progress bar or report; bf16-mixed on CUDA (float32 on the CPU, one thread)."""
    cuda = device.type == "cuda"
    return {
        "max_epochs": 1, "batch_size": batch, "limit_train_batches": batches, "compile": compile,
        "precision": "bf16-mixed" if cuda else "32-true", "accelerator": "gpu" if cuda else "cpu", "devices": 1,
        "checkpoint_every_n_steps": None, "progress_bar": False, "report": False, "threads": None if cuda else 1,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Serving: the engine at 1, 8 and 32 clients, and transformers' generate at batch 1
# ---------------------------------------------------------------------------------------------------------------


def serving_section(device: torch.device, s: argparse.Namespace, out: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine (float32) at each client count on the same greedy requests (tokens must equal one at a time),
    and ``s.hf_requests`` of them served one at a time by the engine and by transformers' ``generate``."""
    ours, hf = generate_hf.build_models(s.shape, seed=0)
    ours, hf = ours.to(device), hf.to(device)
    tokenizer = exact_tokenizer(s.shape["vocab_size"])
    reqs = serve_bench.prompts(argparse.Namespace(requests=s.requests), s.shape["vocab_size"])
    runs: dict[int, dict[str, Any]] = {}
    with Engine(ours, tokenizer, stop_ids=[], max_batch=max(s.clients)) as engine:
        serve_bench.serve(engine, reqs[:2], 1, 4)  # warm-up
        for clients in s.clients:
            runs[clients] = serve_bench.serve(engine, reqs, clients, s.new_tokens)
            print(f"serve {clients} clients: {runs[clients]['wall']:.2f} s", flush=True)
        alone = serve_bench.serve(engine, reqs[: s.hf_requests], 1, s.new_tokens)
    hf_ids, hf_seconds = hf_batch1(hf, reqs[: s.hf_requests], s.new_tokens, device)
    step_ms = decode_step_ms(ours, hf, reqs[0], s.new_tokens, device)
    hf_tps = s.hf_requests * s.new_tokens / hf_seconds
    same_hf = sum(ids == list(mine) for ids, mine in zip(hf_ids, alone["ids"], strict=True))
    reference, tokens = runs[1]["ids"], len(reqs) * s.new_tokens
    rows = []
    for clients, run in runs.items():
        speed, ratio = tokens / run["wall"], runs[1]["wall"] / run["wall"]
        identical = run["ids"] == reference
        differing = sum(a != b for a, b in zip(run["ids"], reference, strict=True))
        out[f"clients_{clients}"] = {"tokens_per_s": speed, "x_sequential": ratio, "identical": identical,
                                     "requests_differing": differing, "peak_rows": run["peak_rows"]}  # fmt: skip
        goal, kind = (4.0, "goal") if clients == 8 else (None, "info")
        rows.append(row("serve", f"{clients} client(s): tokens/s ({len(reqs)} requests x {s.new_tokens})", speed))
        rows.append(row("serve", f"{clients} client(s): x one at a time", ratio, "{:.2f}x", goal=goal, kind=kind))
        if clients != 1:
            rows.append(row("serve", f"{clients} clients: tokens = one at a time (1 yes)", float(identical), "{:.0f}",
                            goal=1.0, kind="check"))  # fmt: skip
    engine_tps = s.hf_requests * s.new_tokens / alone["wall"]
    out["transformers_batch1"] = {"tokens_per_s": hf_tps, "engine_tokens_per_s": engine_tps,
                                  "identical_requests": same_hf, "requests": s.hf_requests}  # fmt: skip
    versus = engine_tps / hf_tps
    out["decode_step_ms"] = step_ms
    return [
        *rows,
        row("serve", f"transformers generate, batch 1: tokens/s ({s.hf_requests} requests)", hf_tps),
        row("serve", "engine 1 client / transformers batch 1", versus, "{:.2f}x", goal=1.0, kind="goal"),
        row("serve", "requests whose tokens equal transformers'", float(same_hf), "{:.0f}"),
        row("serve", "engine at 1 client: ms per token", 1e3 / engine_tps, "{:.2f}"),
        row("serve", "transformers generate at batch 1: ms per token", 1e3 / hf_tps, "{:.2f}"),
        row("serve", "attnkit model alone, one cached decoding step: ms", step_ms["attnkit"], "{:.2f}"),
        row("serve", "transformers model alone, one cached decoding step: ms", step_ms["transformers"], "{:.2f}"),
    ]


@torch.inference_mode()
def decode_step_ms(ours: LanguageModel, hf: torch.nn.Module, prompt: list[int], steps: int,
                   device: torch.device) -> dict[str, float]:  # fmt: skip
    """The models alone, without a decoding loop: ms per cached one-token forward pass of each after the
    prompt's prefill (the same token fed ``steps`` times; what separates the engine's time per token from
    the model's is the engine's own work)."""
    ids, token = torch.tensor([prompt], device=device), torch.tensor([[5]], device=device)

    def per_step(step: Callable[[], Any]) -> float:
        step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        return 1e3 * (time.perf_counter() - start) / steps

    cache = ours.new_cache()
    ours(ids, cache=cache)
    past = hf(ids, use_cache=True).past_key_values
    return {"attnkit": per_step(lambda: ours(token, cache=cache)),
            "transformers": per_step(lambda: hf(token, past_key_values=past, use_cache=True))}  # fmt: skip


@torch.inference_mode()
def hf_batch1(hf: torch.nn.Module, prompts: list[list[int]], new_tokens: int, device: torch.device):
    """transformers' greedy ``generate`` on each prompt alone (``benchmarks/generate_hf.py``'s call, inputs on
    ``device``) after one untimed call: the new ids of each, and the seconds all took."""

    def generate(prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt], device=device)
        options = dict(max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=generate_hf.PAD)
        return hf.generate(ids, attention_mask=torch.ones_like(ids), use_cache=True, **options)[0, len(prompt) :]

    generate(prompts[0], 4)  # warm-up
    sync(device)
    start, out = time.perf_counter(), []
    for prompt in prompts:
        out.append(generate(prompt, new_tokens).tolist())
    sync(device)
    return out, time.perf_counter() - start


# ---------------------------------------------------------------------------------------------------------------
# Parity: the device against the CPU
# ---------------------------------------------------------------------------------------------------------------


def parity_models(vocab: int = 1000) -> dict[str, LanguageModel]:
    """A random ``LlamaForCausalLM`` (every tensor perturbed) imported with :func:`attnkit.interop.load_pretrained`
    from its ``save_pretrained`` folder, and a random attnkit GPT-2-preset language model."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=344, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    hf = LlamaForCausalLM(config).eval()
    perturb(hf, seed=1)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        imported = load_pretrained(folder).model
    assert isinstance(imported, LanguageModel)
    lm = LanguageModel(LanguageModelConfig.model_validate(dict(
        preset="gpt2", vocab_size=vocab, d_model=128, num_heads=4, num_layers=4, dim_feedforward=512,
        max_len=256, dropout=0.0)))  # fmt: skip
    return {"imported Llama": imported.eval(), "attnkit lm (gpt2 preset)": lm.eval()}


@torch.no_grad()
def parity(model: LanguageModel, device: torch.device, dtype: torch.dtype, *, noise: float = 0.0,
           new_tokens: int = 16) -> dict[str, Any]:  # fmt: skip
    """``model`` (float32, on the CPU) copied to ``device`` in ``dtype``: its logits on two rows of 64 random ids
    against the CPU's, as ``max |diff| / max |CPU logits|`` over :data:`TOLERANCE` (``ratio``: at most 1 passes),
    and in float32 whether ``new_tokens`` greedy tokens are the same. ``noise`` (a check of this check) adds
    Gaussian noise of that relative size to every weight of the copy."""
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(3, model.config.vocab_size, (2, 64), generator=generator)
    expected = model(ids)
    other = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    if noise:
        for p in other.parameters():
            p.add_(noise * p.float().std().clamp_min(1e-3).item() * torch.randn(p.shape, generator=generator).to(p))
    got = other(ids.to(device)).float().cpu()
    relative = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()
    result: dict[str, Any] = {"relative_diff": relative, "tolerance": TOLERANCE[dtype],
                              "ratio": relative / TOLERANCE[dtype]}  # fmt: skip
    if dtype == torch.float32:
        prompt = ids[:1, :8]
        mine = model.generate(prompt, new_tokens, temperature=0.0, stop_at_eos=False)
        theirs = other.generate(prompt.to(device), new_tokens, temperature=0.0, stop_at_eos=False).cpu()
        result["greedy_equal"] = mine.tolist() == theirs.tolist()
    return result


def parity_section(device: torch.device, noise: float, out: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`parity` of each of :func:`parity_models` in float32 and bfloat16 (TF32 off: float32 means float32)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name, model in parity_models().items():
        for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            result = parity(model, device, dtype, noise=noise)
            out[f"{name} {label}"] = result
            what = f"{name} {label} on {device.type}: max abs diff / ({result['tolerance']:g} x max abs logit)"
            rows.append(row("parity", what, result["ratio"], "{:.3f}", goal=1.0, kind="check", most=True))
            if "greedy_equal" in result:
                equal = float(result["greedy_equal"])
                rows.append(
                    row(
                        "parity",
                        f"{name} {label}: greedy tokens = CPU (1 yes)",
                        equal,
                        "{:.0f}",
                        goal=1.0,
                        kind="check",
                    )
                )
    return rows
