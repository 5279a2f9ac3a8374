"""The classify task's encoded texts: in memory or read from the token cache."""

from __future__ import annotations

from collections.abc import Sequence

from torch.utils.data import Dataset

from attnkit.data.cache import CachedRows
from attnkit.data.collate import chunks
from attnkit.text.tokenizers import Tokenizer

__all__ = ["ENCODE_BATCH", "CachedTextDataset", "EncodedTextDataset", "encode_texts"]


class EncodedTextDataset(Dataset):
    """Pre-encoded texts: item ``i`` is ``(ids: list[int], label: int)``."""

    def __init__(self, ids: Sequence[Sequence[int]], labels: list[int]) -> None:
        if len(ids) != len(labels):
            raise ValueError(f"{type(self).__name__}: {len(ids)} sequences but {len(labels)} labels")
        self.ids = ids
        self.labels = labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[Sequence[int], int]:
        return self.ids[index], self.labels[index]


class CachedTextDataset(EncodedTextDataset):
    """Texts encoded in the token cache: item ``i`` is ``(ids: list[int], label: int)``, read from
    the memory-mapped split (``ids`` is the lazy sequence of every text's ids)."""

    ids: CachedRows


ENCODE_BATCH = 4096  # texts per Hugging Face encode_batch call


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Every text's ids, at most ``max_len`` (cut at the end); a text with no token is ``[unk_id]``
    (no row is fully masked). The same ids as ``tokenizer.encode(text, max_len)`` one by one (tested),
    in parallel batches (Hugging Face ``encode_batch``) except for pretrained tokenizers (their
    kind's ``pretrained`` flag), whose special tokens are added after the cut."""
    out: list[list[int]] = []
    for batch in chunks(texts, ENCODE_BATCH):
        if tokenizer.spec.pretrained:  # its special tokens are added after the cut
            encoded = [tokenizer.encode(t, max_len) for t in batch]
        else:
            encoded = [ids[:max_len] for ids in tokenizer.encode_batch(list(batch))]
        out += [ids if ids else [tokenizer.unk_id] for ids in encoded]
    return out
