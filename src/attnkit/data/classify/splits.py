"""The classify task's splits: texts and labels from the built-in corpus, an aclImdb folder or a table file."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.data.classify.config import ClassifyDataConfig, source_kind, table_suffixes
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.readers.arrow_rows import RowFilter
from attnkit.data.readers.columnar_tasks import Part, read_labelled, split_parts
from attnkit.data.readers.imdb import load_imdb
from attnkit.data.readers.tables import read_column, read_table
from attnkit.data.splits import TextSplits, group_split, stratified_split, take

__all__ = ["TextSplits", "load_splits", "load_table", "remap_labels", "take"]


_INT_RE = re.compile(r"[+-]?\d+")


def _map_labels(raw: Sequence[Any], where: str) -> tuple[list[int], list[str]]:
    """Raw labels -> ``(ids, label_names)``.

    All integer-like (ints or digit strings): kept as ids, which must be ``0 .. K-1``.
    Otherwise: string labels, ids in sorted order of the names.
    """
    if all(isinstance(v, int) or _INT_RE.fullmatch(v) for v in raw):
        ids = [int(v) for v in raw]
        present = sorted(set(ids))
        if present != list(range(len(present))):
            raise ValueError(
                f"{where}: integer labels must be the class ids 0..K-1, found {present[:20]}; "
                "remap them or use string labels (mapped to ids in sorted order of the names)"
            )
        return ids, [str(i) for i in present]
    names = sorted({str(v) for v in raw})
    index = {name: i for i, name in enumerate(names)}
    return [index[str(v)] for v in raw], names


def load_table(
    path: str | Path,
    text_column: str = "text",
    label_column: str = "label",
    *,
    test_path: str | Path | None = None,
    val_path: str | Path | None = None,
    group_column: str | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 42,
    row_filter: RowFilter | None = None,
) -> TextSplits:
    """Splits from a ``.csv``/``.tsv``/``.jsonl`` file (see :func:`read_table` for the format), or from
    Parquet/Arrow data (:mod:`attnkit.data.readers.columnar`; its own ``val``/``test`` splits, when its
    layout names them, are used as ``val_path``/``test_path`` are, and ``row_filter`` picks its rows).

    String labels map to ids in sorted order of the names (over all files); integer labels are
    kept (``label_names`` are their ``str``) and must be ``0 .. K-1``. ``test_path`` /
    ``val_path`` give the test / validation split as files; the splits not given are held out of
    ``path``, stratified: ``val_fraction`` and ``test_fraction`` of it. With ``group_column`` (a
    column of ``path``) they hold whole groups (:func:`attnkit.data.splits.group_split`).
    """
    main, sources = split_parts(str(path), str(val_path) if val_path else None, str(test_path) if test_path else None)

    def read(part: Part, groups: str | None = None) -> tuple[list[str], list[Any], list[str] | None]:
        if isinstance(part, list):
            return read_labelled(part, text_column, label_column, groups, row_filter)
        return (*read_table(part, text_column, label_column), read_column(part, groups) if groups else None)

    texts, raw, groups = read(main, group_column)
    given: dict[str, tuple[list[str], list[Any]]] = {s: read(sources[s])[:2] for s in sources if s in ("val", "test")}
    where = " + ".join(str(p) for p in (path, val_path, test_path) if p)
    ids, names = _map_labels(raw + [y for _, labels in given.values() for y in labels], where)
    labels, start = ids[: len(raw)], len(raw)
    out: dict[str, tuple[list[str], list[int]]] = {}
    for name, (split_texts, split_raw) in given.items():
        out[name] = (split_texts, ids[start : start + len(split_raw)])
        start += len(split_raw)
    held = [name for name in ("val", "test") if name not in given]
    fractions = [val_fraction if name == "val" else test_fraction for name in held]
    if groups is not None:
        where = f"{path} (groups of column {group_column!r})"
        keep, *parts = (list(idx) for idx in group_split(groups, fractions, seed, stratify=labels, where=where))
    else:
        keep, parts = stratified_split(labels, fractions, seed)
    for name, idx in zip(held, parts):
        out[name] = (take(texts, idx), take(labels, idx))
    return TextSplits(
        train_texts=take(texts, keep),
        train_labels=take(labels, keep),
        val_texts=out["val"][0],
        val_labels=out["val"][1],
        test_texts=out["test"][0],
        test_labels=out["test"][1],
        label_names=names,
    )


# ====================================================================== dispatch
def load_splits(cfg: ClassifyDataConfig) -> TextSplits:
    """The splits described by ``cfg`` (synthetic corpus, aclImdb folder or table file)."""
    kind = source_kind(cfg.source)
    if kind == "synthetic":
        texts, labels, names = generate_synthetic_corpus(cfg.synthetic_size, cfg.seed)
        keep, (val_idx, test_idx) = stratified_split(labels, [cfg.val_fraction, cfg.test_fraction], cfg.seed)
        return TextSplits(
            take(texts, keep),
            take(labels, keep),
            take(texts, val_idx),
            take(labels, val_idx),
            take(texts, test_idx),
            take(labels, test_idx),
            names,
        )
    if kind == "imdb":
        return load_imdb(cfg.source, val_fraction=cfg.val_fraction, seed=cfg.seed)
    if kind in ("table", "columnar"):
        return load_table(
            cfg.source,
            cfg.text_column,
            cfg.label_column,
            test_path=cfg.test_source,
            val_path=cfg.val_source,
            group_column=cfg.group_column,
            val_fraction=cfg.val_fraction,
            test_fraction=cfg.test_fraction,
            seed=cfg.seed,
            row_filter=RowFilter.of(cfg),
        )
    raise ValueError(f"data.source={cfg.source!r}: not 'synthetic', a folder or a {table_suffixes()} file")


def remap_labels(splits: TextSplits, label_names: list[str]) -> TextSplits:
    """Relabel ``splits`` so that ids follow ``label_names`` (matched by name)."""
    if list(splits.label_names) == list(label_names):
        return splits
    unknown = [n for n in splits.label_names if n not in label_names]
    if unknown:
        raise ValueError(
            f"the data has label(s) {unknown} that are not among the given label_names {label_names} "
            f"(data label_names: {splits.label_names})"
        )
    index = {name: i for i, name in enumerate(label_names)}
    to_new = [index[name] for name in splits.label_names]

    def remap(labels: list[int]) -> list[int]:
        return [to_new[y] if isinstance(y, int) and 0 <= y < len(to_new) else y for y in labels]

    return TextSplits(
        splits.train_texts,
        remap(splits.train_labels),
        splits.val_texts,
        remap(splits.val_labels),
        splits.test_texts,
        remap(splits.test_labels),
        list(label_names),
    )
