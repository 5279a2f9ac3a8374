"""Benchmark: instruction tuning (the ``sft`` task's step) with and without packing, and against TRL's ``SFTTrainer``.

Run::

    .venv/bin/python benchmarks/sft.py                 # 135M-class Llama shape, LoRA r=8, batch 8, 6 paired rounds
    .venv/bin/python benchmarks/sft.py --lengths uniform
    .venv/bin/python benchmarks/sft.py --quick         # a tiny model, 2 rounds: a smoke test, not a measurement
    .venv/bin/python benchmarks/sft.py --json out.json

The model is a random Llama of SmolLM2-135M's shape (30 layers, width 576, 9 heads, 3 key/value heads,
feed-forward 1536, vocabulary 49,152, tied embeddings; ``--layers`` etc. change it) saved with
``save_pretrained`` beside a byte-level BPE tokenizer trained here and a ChatML template (replies marked with
``{% generation %}`` for TRL); nothing is downloaded. The data: ``--conversations`` generated conversations
(a user message, the reply) whose lengths vary about 10x (about 21 to 217 tokens with the defaults), spread
``--lengths log-uniform`` (the default: as many conversations of 20-40 tokens as of 100-200, so many short
exchanges and a few long ones, as in real instruction sets) or ``uniform`` (as many of 20-40 tokens as of
180-200: plain batches then waste less on padding, and packing has less to gain).

What is compared, in one process, on the same model weights and conversations, LoRA rank 8 (alpha 16) on the
attention projections, AdamW, float32, ``clip_grad_norm_(1.0)``:

* **A: attnkit, unpacked** (the sft task's default): batches of ``--batch`` conversations of similar lengths
  (:class:`attnkit.data.samplers.LengthGroupedBatches`), each row one conversation padded to the batch's longest.
* **A': attnkit, plain batches** (``data.group_by_length=false``): ``--batch`` conversations in a random order,
  padded to the batch's longest (what "without packing" means in most trainers).
* **B: attnkit, packed** (``data.packing=true``): rows of ``--context`` positions holding several conversations
  (block-diagonal attention, positions restarting), ``--batch`` rows a step.
* **R: TRL** ``SFTTrainer`` (``assistant_only_loss=True``, ``train_sampling_strategy="group_by_length"`` as A, no
  packing; float32: ``bf16=False``, which TRL otherwise turns on by default; no gradient checkpointing) with a
  peft ``LoraConfig`` of the same rank on ``q/k/v/o_proj``, ``--batch`` conversations a step.

Throughput is in *real* tokens per second: the conversations' tokens a step trains on (padding excluded) over
the step's time (forward, backward, clipping, optimiser step; TRL's step as its ``Trainer`` runs it, timed by a
callback). A *round* trains one epoch of A, A' and B each (every conversation once: what a user waits for)
and as many TRL steps as A's epoch has (the first of a new trainer untimed), after one untimed warm-up step
of each; the order rotates between rounds. Per round the ratios B/A', B/A and A/R; the reported figures are
their medians with the rounds each side won. The script also prints the share of real tokens among each
side's positions and padding's bound on B/A' (the ratio of those shares). Peak memory: the largest growth of
the resident set (sampled every 5 ms) over the loaded model during two steps of A and of B, each in its own
process (``--no-memory`` skips it). Before starting it checks that the machine is quiet (load average and
a calibration's spread) and warns when it is not.

Goals (checked, exit status 1 when missed): packing gives at least 1.5x the real tokens/s of plain batches
(median B/A'), and attnkit is at least as fast as TRL (median A/R >= 1.0). B/A (packing against length-grouped
batches, which already waste little on padding) is printed, not checked. ``--quick`` checks nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import attnkit
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import attnkit

from attnkit.data.samplers import LengthGroupedBatches
from attnkit.data.sft.encode import Example, collate_examples, encode_conversation, make_example, pack_examples
from attnkit.interop import load_pretrained
from attnkit.models import LoraConfig, apply_lora
from attnkit.nn import IGNORE_INDEX
from attnkit.tasks.sft.module import assistant_loss
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from encoder_block import calibrate, loadavg

CHATML_GENERATION = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
KINDS = ["unpacked", "random", "packed", "trl"]
WORDS = ["the", "a", "cat", "dog", "owl", "fox", "sat", "ran", "on", "under", "hill", "river", "moon", "stars"]
WORDS += ["quiet", "old", "young", "small", "big", "looked", "at", "and"]


LENGTHS = ["log-uniform", "uniform"]


def conversations(n: int, min_tokens: int, seed: int, lengths: str = "log-uniform") -> list[list[dict[str, str]]]:
    """``n`` conversations (a short question, a reply of ``min_tokens / 6`` to ``8 min_tokens`` words) whose
    lengths vary about 10x: ``log-uniform`` (as many conversations between 20 and 40 tokens as between 100
    and 200: many short exchanges and a few long ones, as real conversation sets are) or ``uniform`` (as
    many between 20 and 40 tokens as between 180 and 200)."""
    rng = random.Random(seed)
    shortest, longest = max(2, min_tokens // 6), 8 * min_tokens
    out = []
    for _ in range(n):
        if lengths == "uniform":
            words = rng.randint(shortest, longest)
        else:
            words = round(math.exp(rng.uniform(math.log(shortest), math.log(longest))))
        question = " ".join(rng.choice(WORDS) for _ in range(4))
        reply = " ".join(rng.choice(WORDS) for _ in range(words))
        out.append([
            {"role": "user", "content": question},
            {"role": "assistant", "content": reply},
        ])  # fmt: skip
    return out


def build_folder(folder: Path, args: argparse.Namespace) -> Path:
    """A random Llama of the benchmark's shape with a locally trained tokenizer and a ChatML template."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator([" ".join(WORDS), "system\nuser\nassistant\nAnswer in words."] * 10, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    options = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
               "bos_token": None, "chat_template": CHATML_GENERATION}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.width, intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, max_position_embeddings=args.context,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
    )  # fmt: skip
    torch.manual_seed(args.seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


class Attnkit:
    """The sft task's training step on the folder's model with LoRA (rank 8 on qkv and out)."""

    def __init__(self, folder: Path, chats: list[list[dict[str, str]]], args: argparse.Namespace) -> None:
        torch.manual_seed(args.seed)
        self.model = load_pretrained(folder).model.train()
        apply_lora(self.model, LoraConfig(rank=8, alpha=16.0, targets=["qkv", "out"]))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.full_logits = args.full_logits
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4)
        tok, template = tokenizer_from_folder(folder), ChatTemplate.from_folder(folder)
        examples = [make_example(*encode_conversation(tok, template, c), args.context)[0] for c in chats]
        pad = tok.pad_id or 0
        lengths = [len(e) for e in examples]  # positions (a conversation's tokens but its last)
        self.lengths = [n + 1 for n in lengths]
        order = list(LengthGroupedBatches(lengths, args.batch, args.seed))
        self.batches = {"unpacked": [self._batch([[examples[i]] for i in b], pad) for b in order]}
        shuffled = list(range(len(examples)))
        random.Random(args.seed).shuffle(shuffled)
        plain = [shuffled[i : i + args.batch] for i in range(0, len(shuffled), args.batch)]
        self.batches["random"] = [self._batch([[examples[i]] for i in b], pad) for b in plain]
        rows = [[examples[i] for i in row] for row in pack_examples(lengths, args.context)]
        random.Random(args.seed).shuffle(rows)
        packed = [rows[i : i + args.batch] for i in range(0, len(rows), args.batch)]
        self.batches["packed"] = [self._batch(b, pad) for b in packed]
        self.next = dict.fromkeys(self.batches, 0)

    @staticmethod
    def _batch(rows: list[list[Example]], pad: int) -> tuple[tuple, int]:
        return collate_examples(rows, pad), sum(len(e) for row in rows for e in row)

    def fill(self, kind: str) -> float:
        """The share of an epoch's positions of ``kind`` that are real tokens (not padding)."""
        return sum(t for (batch, t) in self.batches[kind]) / sum(batch[0].numel() for batch, _ in self.batches[kind])

    def epoch(self, kind: str) -> tuple[list[float], list[int]]:
        """One optimiser step on each batch of ``kind`` (every conversation once): ``(seconds, real tokens)``."""
        self.next[kind] = 0
        pairs = [self.step(kind) for _ in self.batches[kind]]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def step(self, kind: str) -> tuple[float, int]:
        """One optimiser step on the next batch of ``kind``: ``(seconds, real tokens)``."""
        batches = self.batches[kind]
        batch, tokens = batches[self.next[kind] % len(batches)]
        self.next[kind] += 1
        start = time.perf_counter()
        if self.full_logits:  # the loss as it was: the [N, V] logits of the counted positions, then their loss
            inputs, targets, documents = batch
            keep = targets != IGNORE_INDEX
            loss = F.cross_entropy(self.model(inputs, document_ids=documents, only=keep).float(), targets[keep])
        else:
            loss, _, _ = assistant_loss(self.model, batch)  # the sft task's loss (SFTModule.step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start, tokens


class Trl:
    """TRL's SFTTrainer on the same folder and conversations (peft LoRA rank 8 on q/k/v/o_proj)."""

    def __init__(self, folder: Path, chats: list[list[dict[str, str]]], args: argparse.Namespace) -> None:
        from datasets import Dataset  # TRL's side only: the GPU suite imports this module without `datasets`
        from peft import LoraConfig as PeftLora
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import SFTConfig, SFTTrainer

        self.times: list[float] = []
        self.tokens: list[int] = []
        owner = self

        class Timer(TrainerCallback):
            def on_step_begin(self, *a, **k):  # the callback signature of transformers
                owner._start = time.perf_counter()

            def on_step_end(self, *a, **k):
                owner.times.append(time.perf_counter() - owner._start)

        class Counting(SFTTrainer):
            def training_step(self, model, inputs, num_items_in_batch=None):
                owner.tokens.append(int(inputs["attention_mask"].sum()))
                return super().training_step(model, inputs, num_items_in_batch)

        self.config = dict(
            output_dir=tempfile.mkdtemp(prefix="sft-trl-"), assistant_only_loss=True, max_length=args.context,
            per_device_train_batch_size=args.batch, packing=False, report_to="none", use_cpu=True, save_strategy="no",
            logging_strategy="no", learning_rate=1e-4, max_grad_norm=1.0, train_sampling_strategy="group_by_length",
            dataloader_num_workers=0, seed=args.seed, disable_tqdm=True, gradient_checkpointing=False, bf16=False,
        )  # fmt: skip
        self.new = lambda steps: Counting(
            model=AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
            args=SFTConfig(**self.config, max_steps=steps),
            train_dataset=Dataset.from_list([{"messages": c} for c in chats]),
            processing_class=AutoTokenizer.from_pretrained(folder),
            peft_config=PeftLora(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
            callbacks=[Timer()],
        )

    def steps(self, n: int) -> tuple[list[float], list[int]]:
        """``n + 1`` steps of ``SFTTrainer.train()`` (the first untimed): ``(seconds, real tokens)`` of the last n."""
        trainer = self.new(n + 1)  # a new trainer (and model) a round: a trainer trains once
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        self.times, self.tokens = [], []
        trainer.train()
        return self.times[1:], self.tokens[1:]


def memory_child(args: argparse.Namespace, folder: Path, kind: str) -> None:
    """(In a child process.) The resident set's growth during two steps of ``kind``, printed as MiB."""
    chats = conversations(args.conversations, args.min_tokens, args.seed, args.lengths)
    run = Attnkit(folder, chats, args)
    base, peak, done = _rss_kib(), [0], threading.Event()

    def sample() -> None:  # the process's peak (ru_maxrss) is the model's loading: sample the resident set
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kib())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for _ in range(2):
            run.step(kind)
    finally:
        done.set()
        sampler.join()
    print(json.dumps({"peak_growth_mib": (peak[0] - base) / 1024}))


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--lengths", choices=LENGTHS, default="log-uniform", help="how conversation lengths spread")
    parser.add_argument("--batch", type=int, default=8, help="conversations (A, A', R) or packed rows (B) a step")
    parser.add_argument("--context", type=int, default=256, help="the rows' length (packing) and the longest cut")
    parser.add_argument("--conversations", type=int, default=64, help="conversations an epoch (a round) trains on")
    parser.add_argument("--min-tokens", type=int, default=24, help="shortest replies (words); longest about 10x")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--ffn", type=int, default=1536)
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--full-logits",
        action="store_true",
        help="attnkit's loss through the [N, V] logits (as before attnkit.nn.linear_cross_entropy)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model and 2 rounds (smoke test; no checks)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--memory-child", choices=["unpacked", "packed"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.layers, args.width, args.ffn, args.heads, args.kv_heads = 2, 2, 64, 128, 4, 2
        args.vocab, args.conversations, args.context, args.min_tokens, args.no_memory = 512, 32, 256, 8, True
        args.batch = 2  # 32 short conversations fill only a few packed rows
    if args.threads:
        torch.set_num_threads(args.threads)
    from datasets.utils.logging import disable_progress_bar
    from transformers.utils import logging as hf_logging

    disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamed gradient_checkpointing
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.memory_child:
        memory_child(args, args.folder, args.memory_child)
        return 0
    print(f"attnkit {attnkit.__version__}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    load_start, spread = loadavg(), calibrate(torch.get_num_threads())["max_over_min"]
    if load_start[0] > 0.5 or spread > 1.5:
        print(f"WARNING: the machine is not quiet (1-minute load {load_start[0]:.2f}, calibration spread "
              f"{spread:.2f}x): timings are noisy, compare ratios")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as tmp:
        folder = build_folder(Path(tmp) / "model", args)
        chats = conversations(args.conversations, args.min_tokens, args.seed, args.lengths)
        ours, trl = Attnkit(folder, chats, args), Trl(folder, chats, args)
        sizes = sorted(ours.lengths)
        print(f"model: {sum(p.numel() for p in ours.model.parameters()) / 1e6:.1f}M parameters, {args.layers} layers; "
              f"{len(chats)} conversations of {sizes[0]}..{sizes[-1]} tokens (5th-95th percentile "
              f"{sizes[len(sizes) // 20]}..{sizes[-len(sizes) // 20]}); batch {args.batch}, "
              f"context {args.context}; lengths {args.lengths}")  # fmt: skip
        fills = {kind: ours.fill(kind) for kind in KINDS[:3]}
        steps, packed_steps = len(ours.batches["random"]), len(ours.batches["packed"])
        print(f"real tokens: {fills['random']:.1%} of A' positions, {fills['unpacked']:.1%} of A's, "
              f"{fills['packed']:.1%} of B's; an epoch is {steps} steps of A' and A, {packed_steps} of B. "
              f"Padding's bound on B/A': {fills['packed'] / fills['random']:.2f}x (if every position cost the "
              f"same; the head and loss run on counted tokens only, which packing does not make fewer)")  # fmt: skip
        for kind in KINDS[:3]:
            ours.step(kind)  # warm-up
        print(
            "| round | A unpacked tok/s | A' random batches tok/s | B packed tok/s | R TRL tok/s | B/A' | B/A | A/R |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        rounds = []
        for r in range(args.rounds):
            speeds: dict[str, float] = {}
            order = KINDS[r % 4 :] + KINDS[: r % 4]
            for kind in order:
                if kind == "trl":  # as many steps as A's epoch
                    seconds, tokens = trl.steps(len(ours.batches["unpacked"]))
                else:
                    seconds, tokens = ours.epoch(kind)
                speeds[kind] = sum(tokens) / sum(seconds)
            row = {**speeds, "packed/random": speeds["packed"] / speeds["random"],
                   "packed/unpacked": speeds["packed"] / speeds["unpacked"],
                   "attnkit/trl": speeds["unpacked"] / speeds["trl"]}  # fmt: skip
            rounds.append(row)
            print(f"| {r + 1} | {speeds['unpacked']:.1f} | {speeds['random']:.1f} | {speeds['packed']:.1f} | "
                  f"{speeds['trl']:.1f} | {row['packed/random']:.2f} | {row['packed/unpacked']:.2f} | "
                  f"{row['attnkit/trl']:.2f} |", flush=True)  # fmt: skip
        memory = {}
        if not args.no_memory:
            for kind in ("unpacked", "packed"):
                argv = [sys.executable, __file__, "--memory-child", kind, "--folder", str(folder)]
                keys = ("batch", "context", "conversations", "min_tokens", "seed", "threads", "lengths", "full_logits")
                flags = {f"--{k.replace('_', '-')}": v for k, v in vars(args).items() if k in keys and v}
                argv += [flag if v is True else f"{flag}={v}" for flag, v in flags.items()]
                out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                memory[kind] = json.loads(out.strip().splitlines()[-1])["peak_growth_mib"]
    packing = statistics.median(r["packed/random"] for r in rounds)
    bucketed = statistics.median(r["packed/unpacked"] for r in rounds)
    versus = statistics.median(r["attnkit/trl"] for r in rounds)
    packing_wins = sum(r["packed/random"] > 1 for r in rounds)
    trl_wins = sum(r["attnkit/trl"] > 1 for r in rounds)
    print(f"packing: median {packing:.2f}x the real tokens/s of plain (random) batches (packed faster in "
          f"{packing_wins} of {len(rounds)} rounds); {bucketed:.2f}x that of length-grouped batches (faster in "
          f"{sum(r['packed/unpacked'] > 1 for r in rounds)})")  # fmt: skip
    print(f"attnkit vs TRL: median {versus:.2f}x TRL's real tokens/s (attnkit faster in {trl_wins} of {len(rounds)} "
          f"rounds, ties {sum(r['attnkit/trl'] == 1 for r in rounds)})")  # fmt: skip
    if memory:
        grown = f"unpacked {memory['unpacked']:.0f} MiB, packed {memory['packed']:.0f} MiB"
        print(f"peak memory growth during 2 steps: {grown}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "packing": packing, "packing_vs_grouped": bucketed,
                                         "lengths": args.lengths, "fill": fills, "calibration_spread": spread,
                                         "attnkit_vs_trl": versus,
                                         "memory_mib": memory, "load": os.getloadavg()[0]}, indent=2))  # fmt: skip
    if args.quick:
        return 0
    failed = []
    if packing < 1.5:
        failed.append(f"packing {packing:.2f}x < 1.5x")
    if versus < 1.0:
        failed.append(f"attnkit {versus:.2f}x TRL < 1.0x")
    for message in failed:
        print(f"GOAL MISSED: {message}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
