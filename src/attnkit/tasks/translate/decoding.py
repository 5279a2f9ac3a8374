"""Decoding a batch (greedy or beam search) and scoring translations against references."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from attnkit.models.seq2seq import Hypotheses, Seq2SeqTransformer, beam_search, greedy_decode

__all__ = ["corpus_scores", "decode_batch", "one_line"]


def decode_batch(
    model: Seq2SeqTransformer, src: Tensor, src_mask: Tensor, *, beam_size: int, length_penalty: float, max_len: int
) -> Hypotheses:
    """Greedy decoding for ``beam_size == 1``, else beam search."""
    if beam_size == 1:
        return greedy_decode(model, src, src_mask, max_len=max_len)
    return beam_search(model, src, src_mask, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacrebleu, 0-100, default settings) and the exact-match rate (0-1)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        return {"bleu": 0.0, "chrf": 0.0, "exact": 0.0}
    hyps, refs = list(hypotheses), list(references)
    return {
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
        "exact": sum(h.strip() == r.strip() for h, r in zip(hyps, refs)) / len(refs),
    }


def one_line(text: str) -> str:
    """``text`` on one line: its line breaks become spaces."""
    return " ".join(text.splitlines())
