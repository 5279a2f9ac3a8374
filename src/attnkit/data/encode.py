"""The token cache's encoder: documents to ``(tokens, lengths)`` with exactly the ids of ``Tokenizer.encode``.

:func:`fast_encoder` picks the fastest way a tokenizer's kind allows (its
:class:`~attnkit.text.tokenizer_kinds.KindSpec`): a vectorised lookup of code points (``char``),
:class:`attnkit.text.chunk_encoder.ChunkEncoder` (``word``, ``bpe``), or Hugging Face's
``encode_batch``. :func:`encode_batches` runs encoders in worker processes, one per core
(:func:`tokenize_workers`), for the token cache of a large corpus.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

from attnkit.data.cache import token_dtype
from attnkit.text.chunk_encoder import ChunkEncoder, fits
from attnkit.text.framing import document_bounds
from attnkit.text.tokenizer_kinds import kind_spec
from attnkit.text.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, tokenizer_from_dict

__all__ = ["PARALLEL_BYTES", "encode_batches", "fast_encoder", "tokenize_workers"]

Encoded = tuple[np.ndarray, np.ndarray]  # (tokens, lengths) of a list of documents


def fast_encoder(tokenizer: Tokenizer) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    """``docs -> (tokens, lengths)``: each document as ``<bos> ids <eos>`` (a pretrained tokenizer: as
    :func:`attnkit.text.framing.document_ids` frames it), concatenated (the token
    cache's dtype), and the number of ids of each (``int64``).

    ``char``: a vectorised lookup of the code points (the same ids as ``tokenizer.encode``, tested;
    splitting into characters through the tokenizers library runs at well under 1 MB/s). ``word``
    and ``bpe`` (as :func:`build_tokenizer` makes them): :class:`attnkit.text.chunk_encoder.ChunkEncoder`
    (each distinct chunk of text encoded once by Hugging Face, remembered across calls; the same
    ids, tested). Others: Hugging Face ``encode_batch`` (parallel threads)."""
    dtype = token_dtype(tokenizer.vocab_size)
    if fits(tokenizer):
        return ChunkEncoder(tokenizer, dtype)
    if kind_spec(tokenizer.kind).code_points:
        table = np.full(0x110000, UNK_ID, dtype=dtype)
        for i, token in enumerate(tokenizer.vocab):
            if i not in (PAD_ID, BOS_ID, EOS_ID, UNK_ID) and len(token) == 1:
                table[ord(token)] = i

        def encode(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
            lengths = np.fromiter((len(d) + 2 for d in docs), dtype=np.int64, count=len(docs))
            points = np.frombuffer("".join(docs).encode("utf-32-le"), dtype=np.uint32)
            out = np.empty(int(lengths.sum()), dtype=dtype)
            ends = np.cumsum(lengths)
            starts = ends - lengths
            out[starts] = BOS_ID
            out[ends - 1] = EOS_ID
            body = np.ones(out.size, dtype=bool)
            body[starts] = False
            body[ends - 1] = False
            out[body] = table[points]
            return out, lengths

        return encode

    bos, eos = document_bounds(tokenizer)
    head, tail = [bos] if bos is not None else [], [eos] if eos is not None else []

    def encode_hf(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if tokenizer.spec.pretrained:  # framed as the model's documents (attnkit.text.framing)
            body = tokenizer.backend.encode_batch_fast(list(docs), add_special_tokens=False)
            ids = [[*head, *e.ids, *tail] for e in body]
        else:
            ids = tokenizer.encode_batch(docs, add_bos=True, add_eos=True)
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum())), lengths

    return encode_hf


#: Text below this many bytes is tokenized in the calling process (starting workers would cost more).
PARALLEL_BYTES = 8 << 20


def tokenize_workers(requested: int | None, tokenizer: Tokenizer, nbytes: int) -> int:
    """How many processes tokenize ``nbytes`` of text for the token cache: ``requested`` if given;
    else one per CPU core this process may use for ``word``, ``bpe`` and pretrained tokenizers on
    text of at least :data:`PARALLEL_BYTES` (``char`` is a vectorised lookup, faster than the
    workers' transfers), else 1 (this process)."""
    if requested is not None:
        return max(1, requested)
    if kind_spec(tokenizer.kind).code_points or nbytes < PARALLEL_BYTES:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def encode_batches(
    tokenizer: Tokenizer, batches: Iterable[list[list[str]]], workers: int = 1, *, ahead: int = 2
) -> Iterator[tuple[list[list[str]], list[Encoded]]]:
    """``(batch, [fast_encoder(tokenizer)(docs) for docs in batch])`` for each batch (a list of lists
    of documents), in order.

    ``workers > 1``: the batches are encoded in that many worker processes, each with its own
    :func:`fast_encoder` (so a :class:`ChunkEncoder` remembers the chunks of the batches it saw);
    at most ``ahead`` batches per worker are in flight, so memory does not grow with the input.
    Workers are forked where the platform can (nothing to import again), else spawned. A worker's
    error is raised here; a worker that dies (e.g. killed for memory) raises
    ``concurrent.futures.process.BrokenProcessPool``. A daemon process (which may not start
    processes) encodes in itself."""
    if workers <= 1 or multiprocessing.current_process().daemon:
        encode = fast_encoder(tokenizer)
        for batch in batches:
            yield batch, [encode(docs) for docs in batch]
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context(method),
        initializer=_start_worker,
        initargs=(tokenizer.to_dict(),),
    )
    pending: deque[tuple[list[list[str]], Future]] = deque()
    try:
        for batch in batches:
            if pending:
                pending.append((batch, pool.submit(_encode_in_worker, batch)))
            else:  # the first submit starts the workers
                with _tokenizers_parallelism_set():
                    pending.append((batch, pool.submit(_encode_in_worker, batch)))
            if len(pending) > workers * ahead:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _tokenizers_parallelism_set() -> Iterator[None]:
    """``TOKENIZERS_PARALLELISM`` set while workers are forked: a process forked after Hugging Face
    ``tokenizers`` used its thread pool (training BPE does) prints a warning unless it is set. The
    workers encode in one thread each either way."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    if before is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)


_worker_encode: Callable[[list[str]], Encoded] | None = None


def _start_worker(spec: dict[str, Any]) -> None:
    global _worker_encode
    _worker_encode = fast_encoder(tokenizer_from_dict(spec))


def _encode_in_worker(batch: list[list[str]]) -> list[Encoded]:
    assert _worker_encode is not None, "encode_batches: worker not started"
    return [_worker_encode(docs) for docs in batch]
