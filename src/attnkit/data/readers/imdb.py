"""The unpacked Large Movie Review Dataset (``aclImdb``); nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

from attnkit.data.splits import TextSplits, stratified_split, take

__all__ = ["IMDB_LABEL_NAMES", "load_imdb"]

IMDB_LABEL_NAMES: list[str] = ["negative", "positive"]  # folder neg -> 0, pos -> 1


def load_imdb(root: str | Path, *, val_fraction: float = 0.1, seed: int = 42) -> TextSplits:
    """Load the unpacked Large Movie Review Dataset (``aclImdb``).

    Expects ``root/train/{neg,pos}/*.txt`` and ``root/test/{neg,pos}/*.txt`` (``root`` may also
    be the folder that contains ``aclImdb/``). Labels: ``neg`` -> 0 (``"negative"``),
    ``pos`` -> 1 (``"positive"``). ``train/unsup`` (unlabelled) is ignored. Validation is a seeded
    stratified ``val_fraction`` of train. Files are read in sorted name order.
    """
    root = Path(root)
    if not (root / "train").is_dir() and (root / "aclImdb" / "train").is_dir():
        root = root / "aclImdb"
    if not root.is_dir():
        raise FileNotFoundError(f"aclImdb folder {root} does not exist")
    data: dict[str, tuple[list[str], list[int]]] = {}
    for split in ("train", "test"):
        texts: list[str] = []
        labels: list[int] = []
        for label, sub in enumerate(("neg", "pos")):
            folder = root / split / sub
            if not folder.is_dir():
                raise FileNotFoundError(
                    f"aclImdb layout: missing folder {folder} "
                    f"(expected {root}/train/{{neg,pos}}/*.txt and {root}/test/{{neg,pos}}/*.txt)"
                )
            files = sorted(folder.glob("*.txt"))
            if not files:
                raise ValueError(f"aclImdb layout: folder {folder} has no .txt files")
            for path in files:
                text = path.read_text(encoding="utf-8", errors="replace")
                if not text.strip():
                    raise ValueError(f"{path}: empty review")
                texts.append(text)
                labels.append(label)
        data[split] = (texts, labels)
    train_texts, train_labels = data["train"]
    keep, (val_idx,) = stratified_split(train_labels, [val_fraction], seed)
    return TextSplits(
        train_texts=take(train_texts, keep),
        train_labels=take(train_labels, keep),
        val_texts=take(train_texts, val_idx),
        val_labels=take(train_labels, val_idx),
        test_texts=data["test"][0],
        test_labels=data["test"][1],
        label_names=list(IMDB_LABEL_NAMES),
    )
