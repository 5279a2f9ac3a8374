"""``benchmarks/data_scale.py --format parquet``: the lm token cache built from a Parquet corpus against the
same documents as a ``.txt`` file, side by side.

For each size, the text corpus of ``data_scale.py`` (generated grammar documents, or the first MB of
``--text``) is written as a ``.txt`` file and, document by document, as a Parquet file of one ``text``
column (``--row-group-rows`` rows a row group, snappy: what ``DataFrame.to_parquet`` and ``datasets``
write). One process imports attnkit once and forks a fresh process for every cache build (so each
build has its own peak RSS, measured from the same starting point: the imports), in paired rounds:
each round builds the ``.txt`` cache and the Parquet cache into new cache folders, the order
alternating from round to round. The build is what ``attnkit prepare lm --data FILE`` does
(``prepare_data``: the file's digest, the split, the tokenizer trained on the training documents,
every document tokenized into the cache). Its rate is the **text**'s MB (the ``.txt`` file's bytes)
over the build's seconds, for both formats; the paired ratio is the median over rounds of
``time_txt / time_parquet``, "wins" the rounds where Parquet was faster. Both caches must hold the
same tokens, offsets and texts (their files' hashes are compared).

Checks (exit status 1 when one fails, except with ``--quick``): the paired ratio >= 1.0 at every size;
the Parquet builds' peak RSS flat in the corpus size: the largest size's at most ``RSS_GROWTH_GB``
above the smallest size's; every peak RSS <= 1.2 GB; the two caches equal at every size.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

RATIO_MIN = 1.0  # Parquet's MB/s over .txt's, paired
RSS_GROWTH_GB = 0.15  # the Parquet build's peak RSS, largest size minus smallest size
RSS_LIMIT_GB = 1.2

# Imports once, then forks a process per build: its own peak RSS (getrusage) and time; one JSON line each.
BUILDS = r"""
import hashlib, json, os, resource, shutil, sys, time
import torch
from attnkit.api import build_config
from attnkit.tasks import get_task
torch.set_num_threads(1)
jobs = json.loads(open(sys.argv[1]).read())
task = get_task("lm")
for job in jobs:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        status = 0
        try:
            t = time.perf_counter()
            data = {"source": job["source"], "cache_dir": job["cache"], "tokenizer": job["tokenizer"]}
            cfg = build_config("lm", overrides={"data": data, "trainer": {"progress_bar": False, "threads": 1}})
            dm = task.build_datamodule(cfg)
            dm.prepare_data()
            seconds = time.perf_counter() - t
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before the hashing below
            workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
            hashes = {}
            for path in sorted(dm.cache.folder.iterdir()):  # every file: the manifest does not list the texts
                if path.name != "manifest.json":
                    with path.open("rb") as f:
                        hashes[path.name] = hashlib.file_digest(f, "blake2b").hexdigest()
            out = {**job, "prepare_s": seconds, "rss": rss, "workers_rss": workers, "hashes": hashes}
            shutil.rmtree(job["cache"], ignore_errors=True)
        except BaseException as err:
            out, status = {**job, "error": f"{type(err).__name__}: {err}"}, 1
        os.write(write, (json.dumps(out) + "\n").encode())
        os._exit(status)
    os.close(write)
    with os.fdopen(read) as f:
        line = f.read()
    os.waitpid(pid, 0)
    print(line.strip(), flush=True)
"""


def write_parquet(text: Path, path: Path, row_group_rows: int = 50_000) -> int:
    """Write the documents of the text file ``text`` (blank-line separated, as ``attnkit`` reads them) to
    ``path`` as a Parquet file of one ``text`` column, ``row_group_rows`` rows a row group, streamed;
    returns the file's bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnkit.data.readers.text_files import iter_documents

    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        rows: list[str] = []
        for doc in iter_documents([text]):
            rows.append(doc)
            if len(rows) == row_group_rows:
                writer.write_table(pa.table({"text": rows}, schema=schema))
                rows = []
        if rows:
            writer.write_table(pa.table({"text": rows}, schema=schema))
    return path.stat().st_size


def run_builds(jobs: list[dict]) -> list[dict]:
    """Run ``BUILDS`` over ``jobs`` in one new process (one forked process per job); their results, each
    also shown on stderr as it comes."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(jobs, f)
    results, lines = [], []
    try:
        with subprocess.Popen(
            [sys.executable, "-c", BUILDS, f.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("{"):
                    r = json.loads(line)
                    results.append(r)
                    done = (
                        f"{r['prepare_s']:.1f} s, peak RSS {r['rss'] / 1e9:.2f} GB" if "error" not in r else r["error"]
                    )
                    print(f"  built {r['size']:g} MB {r['format']:7s} round {r['round']}: {done}", file=sys.stderr)
    finally:
        os.unlink(f.name)
    failed = [r for r in results if "error" in r]
    if proc.returncode != 0 or failed or len(results) != len(jobs):
        why = failed[0]["error"] if failed else "".join(lines)[-3000:]
        raise RuntimeError(f"a cache build failed: {why}")
    return results


def compare(
    sizes: list[float],
    rounds: int,
    tokenizer: str,
    workdir: Path,
    make: Callable[[Path, float], int],
    row_group_rows: int,
) -> tuple[list[dict], list[str]]:
    """The rows of the table (one per size) and the checks that failed. ``make(path, mb)`` writes the
    text corpus of ``mb`` MB and returns its bytes. Every build runs in one process (imports once)."""
    jobs, files = [], {}
    for mb in sizes:
        txt, parquet = workdir / f"lm_{mb:g}.txt", workdir / f"lm_{mb:g}.parquet"
        files[mb] = (txt, parquet, make(txt, mb), write_parquet(txt, parquet, row_group_rows))
        for r in range(rounds):
            pair = [("txt", txt), ("parquet", parquet)]
            for fmt, path in pair if r % 2 == 0 else pair[::-1]:
                cache = str(workdir / f"cache_{mb:g}_{fmt}_{r}")
                jobs.append({"size": mb, "round": r, "format": fmt, "source": str(path), "cache": cache})
    for job in jobs:
        job["tokenizer"] = tokenizer
    every = run_builds(jobs)
    rows, failures = [], []
    print_header()
    for mb in sizes:
        txt, parquet, nbytes, parquet_bytes = files[mb]
        txt.unlink()
        parquet.unlink()
        results = [r for r in every if r["size"] == mb]
        t = {fmt: [r["prepare_s"] for r in results if r["format"] == fmt] for fmt in ("txt", "parquet")}
        ratios = [a / b for a, b in zip(t["txt"], t["parquet"], strict=True)]  # both in round order
        rss = {fmt: max(r["rss"] for r in results if r["format"] == fmt) / 1e9 for fmt in ("txt", "parquet")}
        row = {
            "size": mb,
            "text_mb": nbytes / 1e6,
            "parquet_mb": parquet_bytes / 1e6,
            "txt_mbs": nbytes / 1e6 / statistics.median(t["txt"]),
            "parquet_mbs": nbytes / 1e6 / statistics.median(t["parquet"]),
            "ratio": statistics.median(ratios),
            "ratios": ratios,
            "wins": sum(x > 1 for x in ratios),
            "rounds": rounds,
            "txt_rss_gb": rss["txt"],
            "parquet_rss_gb": rss["parquet"],
            "workers_rss_gb": max(r["workers_rss"] for r in results) / 1e9,
            "same_cache": all(r["hashes"] == results[0]["hashes"] for r in results),
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print_row(row)
        if row["ratio"] < RATIO_MIN:
            failures.append(f"{mb:g} MB: Parquet at x{row['ratio']:.2f} the MB/s of .txt (< {RATIO_MIN})")
        if max(rss.values()) > RSS_LIMIT_GB:
            failures.append(f"{mb:g} MB: peak RSS {max(rss.values()):.2f} GB > {RSS_LIMIT_GB} GB")
        if not row["same_cache"]:
            failures.append(f"{mb:g} MB: the Parquet and .txt caches differ")
    growth = rows[-1]["parquet_rss_gb"] - rows[0]["parquet_rss_gb"] if len(rows) > 1 else 0.0
    if growth > RSS_GROWTH_GB:
        failures.append(
            f"Parquet peak RSS grows {growth:.2f} GB from {sizes[0]:g} to {sizes[-1]:g} MB (> {RSS_GROWTH_GB} GB)"
        )
    return rows, failures


def print_header() -> None:
    print(
        "| text | Parquet file | .txt build | Parquet build | Parquet / .txt (paired, median) | Parquet faster in "
        "| peak RSS .txt | peak RSS Parquet | same cache | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|", flush=True)


def print_row(r: dict) -> None:
    print(
        f"| {r['text_mb']:.1f} MB | {r['parquet_mb']:.1f} MB | {r['txt_mbs']:.1f} MB/s | {r['parquet_mbs']:.1f} MB/s "
        f"| x{r['ratio']:.2f} | {r['wins']} of {r['rounds']} rounds | {r['txt_rss_gb']:.2f} GB "
        f"| {r['parquet_rss_gb']:.2f} GB | {'yes' if r['same_cache'] else 'NO'} | {r['load']:.1f} |",
        flush=True,
    )
