"""Benchmark: `attnkit train lm` data setup at 5 MB, 50 MB, 500 MB (and 1 GB) of text: peak RSS, time;
``--task classify`` / ``--task translate``: the same at 1 M table rows / sentence pairs.

Run::

    .venv/bin/python benchmarks/data_scale.py                    # 5, 50, 500 MB (+ 1000 MB with --gb)
    .venv/bin/python benchmarks/data_scale.py --sizes 5 --rounds 2   # quick
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_scale.py --tokenize-only --rounds 6   # tokenization only
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_scale.py --tokenize-only --text corpus.txt   # on your text
    .venv/bin/python benchmarks/data_scale.py --json out.json
    .venv/bin/python benchmarks/data_scale.py --task classify --rounds 2   # 1 M csv rows
    .venv/bin/python benchmarks/data_scale.py --task translate --sizes 0.1 --rounds 2   # 100 000 pairs
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_scale.py --format parquet --sizes 50 400 1000 --rounds 3
    .venv/bin/python benchmarks/data_scale.py --format parquet --quick   # a smoke test (tiny, no checks)

``--format parquet`` (lm): the token cache built from a Parquet corpus against the same documents as a
``.txt`` file, paired rounds, and the Parquet build's peak RSS across sizes (default 50 and 400 MB);
see ``benchmarks/data_scale_parquet.py``.

``--task classify`` and ``--task translate``: ``--sizes`` counts **millions of rows** (default 1).
classify: a csv ``text,label`` of reviews drawn at random with a seed from 20 000 of the built-in
generator's (``generate_synthetic_corpus``); translate: a tab-separated pairs file, each pair two
pairs of the built-in generator (``number_pairs``, 24 000 of them) drawn at random and joined with
``"; "`` (so nearly all of the pairs are distinct: the split deduplicates). Each child does what
``attnkit train classify|translate --data FILE`` does before training (data module with its token
cache, model, one training step through the task's module); the tokenization-rate comparison is
run for ``lm`` only.

The corpus is generated (``--text FILE``: the first ``--sizes`` MB of that file, cut after a blank
line): documents of the built-in grammar (``generate_grammar_corpus``, 20 000 of
them) drawn at random with a seed and separated by blank lines until the size is reached. Each
measurement runs in a fresh Python process (``resource.getrusage`` gives its own peak RSS) that does
what ``attnkit train lm --data FILE`` does before training: build the config, the data module
(``prepare_data`` + ``setup``: the token cache), the model, and one training step on the first
batch. **cold**: a new cache folder (the corpus is read, split, the tokenizer built on the training
documents and every document tokenized into the cache); **warm**: the same corpus and config again
(the cache is reused); warm runs are repeated ``--rounds`` times (median). Imports are timed apart.

Tokenization throughput (``tok MB/s``) for char, word and BPE tokenizers built on the documents:
the cache build's tokenization (:func:`attnkit.data.encode.encode_batches` over batches of about 2 M
characters, in worker processes where :func:`attnkit.data.encode.tokenize_workers` chooses them:
word and BPE on 8 MB or more, one per core; :func:`attnkit.data.encode.fast_encoder` in each:
vectorised for char, :class:`attnkit.text.chunk_encoder.ChunkEncoder` for word and BPE: each distinct chunk
of text encoded once and remembered for the rest of the build, BPE's new pieces by
:class:`attnkit.text.byte_pairs.BytePairs`) on 5 MB of generated documents, or with ``--text FILE`` on
the first ``--text-mb`` MB of a real text file's documents; median of ``--rounds``, new encoders each
round (nothing remembered from an earlier round), side by side in the same process with the same in
one process and with the reference **0.1 way**: one ``tokenizer.encode`` per document into Python
lists of ints (what ``attnkit`` 0.1 did); the paired ratio is the median over rounds of
``time_reference / time_cache``. The generated documents come from a grammar of about a hundred words,
so their chunks repeat far more than a real text's: measure your own corpus with ``--text``.

Memory: the measured process's peak RSS (``getrusage``), and, while it runs, this script reads the
peak RSS (``VmHWM`` in ``/proc/<pid>/status``, every 20 ms) of every process it starts (the
tokenizing workers, where the cold build starts them: word or BPE corpora of 8 MB or more; DataLoader
workers). **All processes together** is the sum of these peaks: the parent's and every worker's. It
is at least the memory the process tree held at any moment (a page a forked worker shares with the
parent counts in both: an overstatement, never an understatement). **Without the pages the workers
share** is the parent's peak RSS plus each worker's largest private memory (``smaps_rollup``): the
memory the tree held, which the check bounds (forked workers share the parent's tokenizer tables and
torch, so the plain sum counts those once per worker).

Checks (exit status 1 when one fails): peak RSS of every setup <= 1.2 GB (and of each tokenizing
worker process); the parent and all its workers together (without the pages they share) <= 2.5 GB;
warm setup to the first training step <= 3 s; tokenization >= 20 MB/s for char, word and BPE.
``--tokenize-only`` runs the tokenization comparison alone. The machine is shared: the load average is
printed with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RSS_LIMIT_GB = 1.2  # each process
TOTAL_RSS_LIMIT_GB = 2.5  # the parent's peak RSS plus each worker's peak private memory
WARM_LIMIT_S = 3.0
TOKENIZE_MIN_MBS = 20.0

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
import torch
from attnkit.api import build_config
from attnkit.tasks import get_task
from attnkit.training.runner import build_module
t_import = time.perf_counter() - t0
torch.set_num_threads(1)
path, cache, tokenizer, name = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
t1 = time.perf_counter()
data = {"source": path, "cache_dir": cache} | ({"tokenizer": tokenizer} if name != "classify" else {})
cfg = build_config(name, overrides={"data": data, "trainer": {"progress_bar": False, "threads": 1}})
task = get_task(name)
dm = task.build_datamodule(cfg)
dm.prepare_data()
t_prepare = time.perf_counter() - t1
dm.setup("fit")
module = build_module(task, cfg, dm)
opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
loss = module.step(next(iter(dm.train_dataloader())))[0]
loss.backward(); opt.step()
t_setup = time.perf_counter() - t1
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest tokenizing worker
out = {"import_s": t_import, "prepare_s": t_prepare, "setup_s": t_setup, "rss": rss, "workers_rss": workers}
print(json.dumps(out))
"""


def make_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """Write about ``megabytes`` MB of grammar documents separated by blank lines; returns the bytes."""
    from attnkit.data.generators.grammar import generate_grammar_corpus

    pool = [d.encode() for d in generate_grammar_corpus(20000, seed=seed)]
    rng = random.Random(seed)
    target, written = int(megabytes * 1e6), 0
    with path.open("wb") as f:
        while written < target:
            chunk = b"\n\n".join(rng.choices(pool, k=5000)) + b"\n\n"
            f.write(chunk)
            written += len(chunk)
    return written


def copy_text(source: Path, path: Path, megabytes: float) -> int:
    """Write the first ``megabytes`` MB of the text file ``source`` to ``path``, cut after a blank line
    (whole documents); returns the bytes."""
    with source.open("rb") as f:
        head = f.read(int(megabytes * 1e6))
    cut = head.rfind(b"\n\n")
    path.write_bytes(head[: cut + 2] if cut > 0 else head)
    return path.stat().st_size


def make_table(path: Path, millions: float, seed: int = 0) -> int:
    """Write ``millions`` M rows ``text,label`` of built-in reviews (classify); returns the bytes."""
    from attnkit.data.generators.reviews import generate_synthetic_corpus

    texts, labels, names = generate_synthetic_corpus(20000, seed)
    pool = ['"' + t.replace('"', '""') + f'",{names[y]}\n' for t, y in zip(texts, labels)]
    return _write_rows(path, "text,label\n", lambda rng, k: rng.choices(pool, k=k), int(millions * 1e6), seed)


def make_pairs(path: Path, millions: float, seed: int = 0) -> int:
    """Write ``millions`` M tab-separated pairs, each two built-in number pairs joined with "; "."""
    from attnkit.data.generators.numbers import number_pairs

    pool = number_pairs(24000, seed)

    def draw(rng: random.Random, k: int) -> list[str]:
        picks = iter(rng.choices(pool, k=2 * k))
        return [f"{s1}; {s2}\t{t1}; {t2}\n" for (s1, t1), (s2, t2) in zip(picks, picks)]

    return _write_rows(path, "", draw, int(millions * 1e6), seed)


def _write_rows(path: Path, header: str, draw, n: int, seed: int) -> int:  # type: ignore[no-untyped-def]
    """Write ``header`` then ``n`` rows ``draw(rng, k)`` gives, 100 000 at a time; returns the bytes."""
    rng = random.Random(seed)
    with path.open("wb") as f:
        written = f.write(header.encode())
        for start in range(0, n, 100_000):
            written += f.write("".join(draw(rng, min(100_000, n - start))).encode())
    return written


def workers_text(gb: float) -> str:
    """The tokenizing workers' peak RSS, if there were workers (forked: pages shared with the parent
    count too, so this overstates what they add)."""
    return f" (each tokenizing worker at most {gb:.2f} GB, shared pages counted)" if gb > 0 else ""


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (its threads' ``/proc/<pid>/task/<tid>/children``)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError):
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return out


def _peak_rss(pid: int) -> int:
    """The peak RSS of ``pid`` so far in bytes (``VmHWM``), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _private(pid: int) -> int:
    """The pages of ``pid`` no other process maps, in bytes (``smaps_rollup``), 0 when it is gone."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) * 1024 for line in lines if line.startswith(("Private_Clean:", "Private_Dirty:")))


def run_child(path: Path, cache: Path, tokenizer: str, task: str = "lm") -> dict:
    """Run ``CHILD`` in a fresh process; while it runs, read the peak RSS of every process it starts
    (and theirs) every 20 ms: ``descendants_rss`` is their sum, ``total_rss`` that plus the child's;
    ``total_private``: the child's peak RSS plus the largest private memory of each (read every 100 ms;
    what the workers add without the pages they share with the child, for comparison)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    peaks: dict[int, int] = {}
    private: dict[int, int] = {}
    sample = 0
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(cache), tokenizer, task],
            stdout=stdout,
            stderr=stderr,
            text=True,
            env=env,
        )
        while child.poll() is None:
            todo = _children(child.pid)
            while todo:
                pid = todo.pop()
                peaks[pid] = max(peaks.get(pid, 0), _peak_rss(pid))
                if sample % 5 == 0:
                    private[pid] = max(private.get(pid, 0), _private(pid))
                todo += _children(pid)
            sample += 1
            time.sleep(0.02)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    if child.returncode != 0:
        raise RuntimeError(f"child failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    # a worker that lived less than 20 ms: at least the largest child's peak (getrusage in the child)
    descendants = max(sum(peaks.values()), result["workers_rss"])
    return {
        **result,
        "processes": 1 + len(peaks),
        "descendants_rss": descendants,
        "total_rss": result["rss"] + descendants,
        "total_private": result["rss"] + sum(private.values()),
    }


def tokenize_rates(rounds: int, text: Path | None = None, text_mb: float = 30.0) -> dict:
    """MB/s of the cache build's tokenization vs one encode per document into lists of ints (attnkit
    0.1), on 5 MB of built-in grammar documents or on the first ``text_mb`` MB of the documents of
    ``text`` (blank-line separated). The tokenizers are built on the first 20 000 documents. The
    cache's way is what ``attnkit train lm`` runs: the documents in batches of about 2 M characters
    through :func:`attnkit.data.encode.encode_batches`, in as many worker processes as
    :func:`attnkit.data.encode.tokenize_workers` chooses (their start counted), and the same in this
    process alone (``one``); every round starts new encoders, so nothing is remembered from an
    earlier round. The order of the three is rotated every round."""
    from attnkit.data.encode import encode_batches, tokenize_workers
    from attnkit.data.generators.grammar import generate_grammar_corpus
    from attnkit.data.lm.module import LanguageModelDataModule
    from attnkit.text.tokenizers import build_tokenizer

    if text is None:
        pool = generate_grammar_corpus(20000, seed=1)
        rng = random.Random(1)
        docs: list[str] = []
        size = 0
        while size < 5e6:
            docs.extend(rng.choices(pool, k=5000))
            size = sum(map(len, docs))
    else:
        with open(text, encoding="utf-8") as f:
            head = f.read(int(text_mb * 1e6))
        docs = [d.strip() for d in head.split("\n\n") if d.strip()]
        pool = docs[:20000]
    nbytes = sum(len(d.encode()) for d in docs)
    mb = nbytes / 1e6
    batches: list[list[list[str]]] = [[[]]]
    size = 0
    for d in docs:  # as LanguageModelDataModule._batches (one split)
        batches[-1][0].append(d)
        size += len(d)
        if size >= LanguageModelDataModule.BATCH_CHARS:
            batches.append([[]])
            size = 0
    out = {}
    for kind in ("char", "word", "bpe"):
        tok = build_tokenizer(kind, pool)
        workers = tokenize_workers(None, tok, nbytes)
        ways = ["cache", "one", "ref"] if workers > 1 else ["cache", "ref"]
        times: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(rounds):
            for which in ways[r % len(ways) :] + ways[: r % len(ways)]:
                t = time.perf_counter()
                if which == "ref":
                    [tok.encode(d, add_bos=True, add_eos=True) for d in docs]
                else:
                    for _ in encode_batches(tok, iter(batches), workers if which == "cache" else 1):
                        pass
                times[which].append(time.perf_counter() - t)
        ratios = [ref / ours for ref, ours in zip(times["ref"], times["cache"], strict=True)]
        out[kind] = {
            "mb": mb,
            "workers": workers,
            "cache_mbs": mb / statistics.median(times["cache"]),
            "one_process_mbs": mb / statistics.median(times["one" if workers > 1 else "cache"]),
            "reference_mbs": mb / statistics.median(times["ref"]),
            "speedup": statistics.median(ratios),
            "wins": sum(x > 1 for x in ratios),
            "goal_rounds": sum(mb / t >= TOKENIZE_MIN_MBS for t in times["cache"]),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="lm", choices=["lm", "classify", "translate"])
    parser.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=None,
        help="lm: corpus sizes in MB (default 5 50 500); classify/translate: millions of rows (default 1)",
    )
    parser.add_argument("--gb", action="store_true", help="also 1000 MB when the disk has room")
    parser.add_argument("--rounds", type=int, default=6, help="warm runs per size and tokenization rounds")
    parser.add_argument(
        "--tokenizer", default=None, choices=["char", "word", "bpe"], help="lm: default char; translate: default word"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where the corpora and caches go (default: a temp dir)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--tokenize-only", action="store_true", help="lm: only the tokenization comparison (no corpus, no setups)"
    )
    parser.add_argument(
        "--text",
        type=Path,
        default=None,
        help="lm: measure on this UTF-8 text file's documents (tokenization; and setups: its first --sizes MB)",
    )
    parser.add_argument("--text-mb", type=float, default=30.0, help="with --text: how many MB of it (default 30)")
    parser.add_argument(
        "--format", default="txt", choices=["txt", "parquet"], help="lm: parquet compares a Parquet corpus with .txt"
    )
    parser.add_argument("--row-group-rows", type=int, default=50_000, help="--format parquet: rows a row group")
    parser.add_argument(
        "--quick", action="store_true", help="--format parquet: 0.5 and 1 MB, 1 round: a smoke test, no checks"
    )
    args = parser.parse_args()
    if args.format == "parquet":
        return parquet_main(args)
    lm = args.task == "lm"
    sizes = list(args.sizes or ([5, 50, 500] if lm else [1]))
    tokenizer = args.tokenizer or ("char" if lm else "word")
    make = {"lm": make_corpus, "classify": make_table, "translate": make_pairs}[args.task]
    unit = "MB" if lm else "M rows"
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="attnkit-data-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.gb and lm:
        free = shutil.disk_usage(workdir).free
        if free > 6e9:  # corpus + text copy + uint16 tokens
            sizes.append(1000)
        else:
            print(f"1000 MB skipped: {free / 1e9:.1f} GB free in {workdir}")
    shown = "char, word, bpe (tokenization only)" if args.tokenize_only and lm else tokenizer
    print(
        f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}; task: {args.task}; "
        f"tokenizer: {shown if args.task != 'classify' else 'text'}"
    )
    rows, failures, rates = [], [], {}
    try:
        for mb in [] if args.tokenize_only and lm else sizes:
            suffix = {"lm": "txt", "classify": "csv", "translate": "tsv"}[args.task]
            corpus = workdir / f"{args.task}_{mb:g}.{suffix}"
            nbytes = copy_text(args.text, corpus, mb) if lm and args.text else make(corpus, mb)
            cache = workdir / f"cache_{mb:g}"
            shutil.rmtree(cache, ignore_errors=True)
            cold = run_child(corpus, cache, tokenizer, args.task)
            warm = [run_child(corpus, cache, tokenizer, args.task) for _ in range(args.rounds)]
            row = {
                "size": mb,
                "unit": unit,
                "mb": nbytes / 1e6,
                "cold_setup_s": cold["setup_s"],
                "cold_build_mbs": nbytes / 1e6 / cold["prepare_s"],
                "cold_rss_gb": cold["rss"] / 1e9,
                "cold_workers_rss_gb": cold["workers_rss"] / 1e9,
                "cold_processes": cold["processes"],
                "cold_total_rss_gb": cold["total_rss"] / 1e9,
                "cold_total_private_gb": cold["total_private"] / 1e9,
                "warm_setup_s": statistics.median(w["setup_s"] for w in warm),
                "warm_rss_gb": max(w["rss"] for w in warm) / 1e9,
                "warm_total_rss_gb": max(w["total_rss"] for w in warm) / 1e9,
                "warm_total_private_gb": max(w["total_private"] for w in warm) / 1e9,
                "import_s": statistics.median(w["import_s"] for w in warm),
                "load": os.getloadavg()[0],
            }
            rows.append(row)
            rows_text = "" if lm else f"{mb:g} M rows, "
            print(
                f"{rows_text}{row['mb']:8.1f} MB | cold: setup {row['cold_setup_s']:7.1f} s, "
                f"build {row['cold_build_mbs']:5.1f} MB/s, peak RSS {row['cold_rss_gb']:.2f} GB"
                f"{workers_text(row['cold_workers_rss_gb'])}, all {row['cold_processes']} process(es) together "
                f"{row['cold_total_rss_gb']:.2f} GB (without the pages the workers share: "
                f"{row['cold_total_private_gb']:.2f} GB) | "
                f"warm: setup {row['warm_setup_s']:.2f} s (median of {args.rounds}), "
                f"peak RSS {row['warm_rss_gb']:.2f} GB (all together {row['warm_total_rss_gb']:.2f} GB) | "
                f"imports {row['import_s']:.1f} s | load {row['load']:.1f}"
            )
            if max(row["cold_rss_gb"], row["warm_rss_gb"], row["cold_workers_rss_gb"]) > RSS_LIMIT_GB:
                failures.append(f"{mb:g} {unit}: peak RSS above {RSS_LIMIT_GB} GB")
            total = max(row["cold_total_private_gb"], row["warm_total_private_gb"])
            if total > TOTAL_RSS_LIMIT_GB:
                failures.append(
                    f"{mb:g} {unit}: the parent and its workers together {total:.2f} GB > {TOTAL_RSS_LIMIT_GB} GB"
                )
            if row["warm_setup_s"] > WARM_LIMIT_S:
                failures.append(f"{mb:g} {unit}: warm setup {row['warm_setup_s']:.2f} s > {WARM_LIMIT_S} s")
            corpus.unlink()
            shutil.rmtree(cache, ignore_errors=True)
        rates = tokenize_rates(args.rounds, args.text, args.text_mb) if lm else {}
        source = f"of {args.text}" if args.text else "of grammar documents"
        for kind, r in rates.items():
            print(
                f"tokenize {kind:4s}: cache build {r['cache_mbs']:6.1f} MB/s ({r['workers']} process(es); "
                f"{r['goal_rounds']} of {args.rounds} rounds >= {TOKENIZE_MIN_MBS} MB/s; one process "
                f"{r['one_process_mbs']:5.1f}), 0.1 way (encode per document into lists) {r['reference_mbs']:5.1f} "
                f"MB/s, paired speed-up x{r['speedup']:.1f}, faster in {r['wins']} of {args.rounds} rounds "
                f"(medians, {r['mb']:.1f} MB {source})"
            )
            if r["cache_mbs"] < TOKENIZE_MIN_MBS:
                failures.append(f"tokenize {kind}: {r['cache_mbs']:.1f} MB/s < {TOKENIZE_MIN_MBS} MB/s")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"sizes": rows, "tokenize": rates}, indent=2))
    for failure in failures:
        print(f"CHECK FAILED: {failure}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def parquet_main(args: argparse.Namespace) -> int:
    """``--format parquet``: :func:`data_scale_parquet.compare` over the sizes, its table and checks."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    from data_scale_parquet import compare

    if args.task != "lm":
        raise SystemExit("--format parquet measures the lm task (leave out --task)")
    sizes = [0.5, 1.0] if args.quick else sorted(args.sizes or [50.0, 400.0])
    rounds = 1 if args.quick else args.rounds
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="attnkit-data-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.gb and 1000 not in sizes:
        sizes.append(1000.0)
    source = args.text
    make = (lambda path, mb: copy_text(source, path, mb)) if source else make_corpus
    print(
        f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}; format: parquet vs txt; "
        f"tokenizer: {args.tokenizer or 'char'}; rounds: {rounds}" + ("; QUICK (smoke test)" if args.quick else "")
    )
    try:
        rows, failures = compare(sizes, rounds, args.tokenizer or "char", workdir, make, args.row_group_rows)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps({"parquet": rows, "failures": failures, "quick": args.quick}, indent=2))
    for failure in failures:
        print(f"CHECK {'(not applied: --quick) ' if args.quick else ''}FAILED: {failure}")
    if args.quick:
        print("NOTE: --quick builds 0.5 and 1 MB once each; its numbers say nothing about the goals.")
        return 0
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
