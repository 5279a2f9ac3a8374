"""Benchmark: beam search (beam 4) against greedy decoding with the translator, time per sentence.

Run::

    .venv/bin/python benchmarks/beam_search.py                # trains a default-size model briefly, then times
    .venv/bin/python benchmarks/beam_search.py --run RUN      # a trained translate run and its test sentences
    .venv/bin/python benchmarks/beam_search.py --quick        # tiny sizes, a few reps: a smoke test
    .venv/bin/python benchmarks/beam_search.py --json out.json

The model is the ``translate`` task's default size (width 64, 4 heads, 2 encoder + 2 decoder
layers, feed-forward 256) on the built-in English->Spanish data. Without ``--run`` it is trained
for ``--train-steps`` steps first (about a minute on one core), so that it writes sentences of
realistic length and stops at EOS as a trained model does; a random model would never stop.
The sentences are the first ``--sentences`` of the test split, in split order.

Both decoders run under ``torch.inference_mode()`` in eval mode with the key/value cache
(:func:`attnkit.models.seq2seq.greedy_decode` and :func:`attnkit.models.seq2seq.beam_search`,
beam 4, length penalty 1.0), at two batch sizes: **B=1** (sentence by sentence: the latency of
translating one sentence) and **B=64** (the test split's batch size: throughput). One call
decodes all the sentences of its row; time per sentence is the call's time divided by their
number.

Timing as in ``benchmarks/encoder_block.py``: ``torch.set_num_threads(--threads)``, warm-up, then
rounds in which greedy and beam run once each, in alternating order; the ratio is the median over
rounds of ``time_beam / time_greedy`` within a round (a paired ratio, robust to load that comes
and goes). The script checks that the machine is quiet (load average and a calibration loop) and
prints a ``WARNING`` when it is not. It also checks that beam search with beam 1 gives greedy's
output, and reports the mean score (log P / length) and the exact-match rate of both decoders.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import attnkit  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnkit.data.translate.module import PairsDataModule
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer, beam_search, greedy_decode
from attnkit.tasks.translate import TranslateConfig, TranslateTask
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.schedule import CosineWarmupScheduler
from encoder_block import calibrate, loadavg, rel_iqr, time_interleaved

BEAM = 4
GOAL = 4.5  # beam 4 may take at most 4.5x greedy's time per sentence


def train_default_model(steps: int, quick: bool, seed: int) -> tuple[Seq2SeqTransformer, PairsDataModule, int]:
    """The translate task's default model and data, trained ``steps`` steps (AdamW, warm-up + cosine)."""
    torch.manual_seed(seed)
    overrides: dict = {"data": {"num_pairs": 600}} if quick else {}
    if quick:
        overrides["model"] = {"d_model": 32, "dim_feedforward": 64, "num_layers": 1}
    cfg = TranslateConfig.model_validate(overrides)
    dm = PairsDataModule(cfg.data, batch_size=cfg.trainer.batch_size)
    dm.setup()
    model_cfg = TranslateTask().model_spec(cfg, dm).config
    model = Seq2SeqTransformer(Seq2SeqConfig.model_validate(model_cfg))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    sched = CosineWarmupScheduler(opt, warmup=min(cfg.optim.warmup, steps // 4), max_iters=max(steps, 1))
    model.train()
    done = 0
    while done < steps:
        for src, src_mask, tgt_in, tgt_out, _ in dm.train_dataloader():
            logits = model(src, tgt_in, src_mask)
            valid = tgt_out != model.pad_id
            loss = F.cross_entropy(logits[valid], tgt_out[valid], label_smoothing=cfg.label_smoothing)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            done += 1
            if done >= steps:
                break
    return model.eval(), dm, cfg.data.max_len + 1


def load_trained(run: str) -> tuple[Seq2SeqTransformer, PairsDataModule, int]:
    from attnkit.tasks import load_run

    loaded = load_run(run)
    if loaded.task.name != "translate":
        raise SystemExit(f"{run} is a {loaded.task.name!r} run, not a translate run")
    dm = loaded.task.build_datamodule(loaded.config, loaded.hparams["artifacts"])
    dm.setup()
    return loaded.module.model.eval(), dm, loaded.module.max_decode_len()  # type: ignore[attr-defined,operator]


def batches(sources: list[list[int]], batch_size: int, pad: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        src = torch.full((len(chunk), max(map(len, chunk))), pad, dtype=torch.long)
        for row, ids in enumerate(chunk):
            src[row, : len(ids)] = torch.tensor(ids)
        out.append((src, src != pad))
    return out


def decoder_call(
    model: Seq2SeqTransformer, data: list[tuple[torch.Tensor, torch.Tensor]], beam: int, max_len: int
) -> Callable[[], None]:
    def run() -> None:
        with torch.inference_mode():
            for src, mask in data:
                if beam == 1:
                    greedy_decode(model, src, mask, max_len=max_len)
                else:
                    beam_search(model, src, mask, beam_size=beam, max_len=max_len, length_penalty=1.0)

    run.reset = lambda: None  # type: ignore[attr-defined]
    return run


def quality(
    model: Seq2SeqTransformer,
    data: list[tuple[torch.Tensor, torch.Tensor]],
    refs: list[str],
    tok: Tokenizer,
    max_len: int,
) -> dict[str, float]:
    """Mean score and exact match of greedy and beam 4; whether beam 1 reproduces greedy."""
    scores: dict[str, list[float]] = {"greedy": [], "beam": []}
    texts: dict[str, list[str]] = {"greedy": [], "beam": []}
    same = True
    with torch.inference_mode():
        for src, mask in data:
            greedy = greedy_decode(model, src, mask, max_len=max_len)
            beam = beam_search(model, src, mask, beam_size=BEAM, max_len=max_len, length_penalty=1.0)
            one = beam_search(model, src, mask, beam_size=1, max_len=max_len)
            same &= torch.equal(one.tokens, greedy.tokens)
            for name, hyp in (("greedy", greedy), ("beam", beam)):
                scores[name] += hyp.scores(1.0).tolist()
                texts[name] += [tok.decode(ids) for ids in hyp.token_lists()]
    out = {f"{n}_mean_score": statistics.mean(s) for n, s in scores.items()}
    for name, hyps in texts.items():
        out[f"{name}_exact"] = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
    out["beam1_equals_greedy"] = float(same)
    out["beam_not_worse"] = sum(b >= g - 1e-5 for b, g in zip(scores["beam"], scores["greedy"])) / len(refs)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="a trained translate run (folder or checkpoint); default: train one briefly")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads(N) (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and a few reps: a smoke test, not a measurement")
    p.add_argument("--sentences", type=int, default=256, help="test sentences decoded by the B=64 row (default 256)")
    p.add_argument("--single", type=int, default=32, help="of those, decoded one at a time by the B=1 row (32)")
    p.add_argument("--train-steps", type=int, default=1000, help="training steps without --run (default 1000)")
    p.add_argument("--reps", type=int, default=None, help="rounds per row (default: enough to fill --budget)")
    p.add_argument("--budget", type=float, default=30.0, help="target seconds of timing per row (default 30)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = loadavg()
    if args.quick:
        args.sentences, args.single, args.train_steps = min(args.sentences, 16), min(args.single, 4), 30
    t0 = time.perf_counter()
    if args.run:
        model, dm, max_len = load_trained(args.run)
        origin = f"run {args.run}"
    else:
        model, dm, max_len = train_default_model(args.train_steps, args.quick, args.seed)
        origin = f"default-size model trained {args.train_steps} steps on the built-in data"
    train_s = time.perf_counter() - t0
    test = dm.datasets["test"]
    n = min(args.sentences, len(test))
    sources, refs = test.src[:n], test.refs[:n]
    tok = dm.tokenizers[1]
    params = sum(p.numel() for p in model.parameters())
    c = model.config

    print("# Beam search vs greedy decoding (attnkit translator)")
    print()
    print(
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
        f"threads={torch.get_num_threads()}, float32; {origin} ({train_s:.0f} s); d_model={c.d_model}, "
        f"heads={c.num_heads}, layers={c.num_layers}+{c.decoder_layers}, ff={c.dim_feedforward}, "
        f"vocab={c.tgt_vocab_size}, {params:,} parameters; max_len={max_len}; beam {BEAM}, length penalty 1.0"
        + (", QUICK (smoke test)" if args.quick else "")
    )
    calib = calibrate(args.threads)
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}")
    print(
        f"calibration: median {calib['median_s'] * 1e3:.2f} ms, IQR {calib['rel_iqr'] * 100:.1f}%, "
        f"max/min {calib['max_over_min']:.2f}"
    )
    warnings = []
    if load_start[0] > 0.5:
        warnings.append(f"1-minute load average is {load_start[0]:.2f} before starting: the machine is not quiet")
    if calib["rel_iqr"] > 0.10 or calib["max_over_min"] > 1.6:
        warnings.append("the calibration loop's timings spread widely: another process is using the CPU")
    for w in warnings:
        print(f"WARNING: {w}")
    print()

    rows = []
    for batch_size, count in ((1, min(args.single, n)), (64, n)):
        data = batches(sources[:count], batch_size, model.pad_id)
        steps = {"greedy": decoder_call(model, data, 1, max_len), "beam": decoder_call(model, data, BEAM, max_len)}
        reps = 3 if args.quick else args.reps
        times = time_interleaved(steps, warmup=1, reps=reps, budget_s=0.0 if args.quick else args.budget, min_reps=5)
        med = {k: statistics.median(v) / count for k, v in times.items()}
        ratio = statistics.median(tb / tg for tg, tb in zip(times["greedy"], times["beam"]))
        rows.append(
            {
                "batch": batch_size,
                "sentences": count,
                "reps": len(times["greedy"]),
                "ms_per_sentence": {k: v * 1e3 for k, v in med.items()},
                "paired_ratio": ratio,
                "ratio_of_medians": med["beam"] / med["greedy"],
                "noise": max(rel_iqr(v) for v in times.values()),
            }
        )
        print(f"... B={batch_size}: done ({len(times['greedy'])} rounds)", file=sys.stderr, flush=True)
    q = quality(model, batches(sources, 64, model.pad_id), refs, tok, max_len)
    load_end = loadavg()

    print(f"## Time per sentence, {torch.get_num_threads()} thread(s)")
    print()
    print("| batch | sentences | greedy ms/sentence | beam 4 ms/sentence | beam / greedy | rounds | noise |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ms = r["ms_per_sentence"]
        print(
            f"| {r['batch']} | {r['sentences']} | {ms['greedy']:.2f} | {ms['beam']:.2f} | {r['paired_ratio']:.2f}x "
            f"| {r['reps']} | {r['noise'] * 100:.0f}% |"
        )
    print()
    print(
        "beam / greedy = median over rounds of the paired per-round time ratio; noise = largest IQR/median of "
        "a row's per-call times."
    )
    print()
    print("## Output quality on the same sentences")
    print()
    print("| decoder | mean score (log P / length) | exact match |")
    print("|---|---:|---:|")
    print(f"| greedy | {q['greedy_mean_score']:.4f} | {q['greedy_exact'] * 100:.1f} % |")
    print(f"| beam 4 | {q['beam_mean_score']:.4f} | {q['beam_exact'] * 100:.1f} % |")
    print()
    print(
        f"beam 1 reproduces greedy: {'yes' if q['beam1_equals_greedy'] else 'NO'}; "
        f"beam 4 scores at least greedy's on {q['beam_not_worse'] * 100:.1f} % of the sentences"
    )
    print()
    print("## Goals")
    print()
    print("| goal | measured | target | result |")
    print("|---|---:|---:|---|")
    goals = []
    for r in rows:
        passed = r["paired_ratio"] <= GOAL
        goals.append({"name": f"B={r['batch']}: beam 4 / greedy time per sentence", "passed": passed})
        print(
            f"| B={r['batch']}: beam 4 / greedy time per sentence | {r['paired_ratio']:.2f}x | <= {GOAL:.2f}x "
            f"| {'PASS' if passed else 'FAIL'} |"
        )
    print()
    print(f"{sum(g['passed'] for g in goals)}/{len(goals)} goals pass")
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    for w in warnings:
        print(f"WARNING: {w}")
    if args.quick:
        print("NOTE: --quick uses a tiny, barely trained model and a few reps; its numbers say nothing about the goal.")
    if args.json is not None:
        result = {
            "meta": {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "origin": origin,
                "params": params,
                "max_len": max_len,
                "load_start": load_start,
                "load_end": load_end,
                "calibration": calib,
                "warnings": warnings,
            },
            "rows": rows,
            "quality": q,
            "goals": goals,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
