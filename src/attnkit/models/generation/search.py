"""Greedy decoding and beam search, written once for every generating model.

A model takes part through a :class:`Decoding`: the incremental decoding of a batch of rows (the
translator: a source's encoder memory and the decoder's cache; the language model: a left-padded
prompt and its cache). :func:`run_greedy` and :func:`run_beam_search` only choose tokens; they ask the
decoding for the next-token logits of every row, append the chosen tokens and, in beam search,
reorder its rows to the surviving beams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

__all__ = [
    "Decodable",
    "Decoding",
    "Hypotheses",
    "beam_search",
    "check_beam_size",
    "check_max_len",
    "greedy_decode",
    "length_normalized",
    "log_probs",
    "run_beam_search",
    "run_greedy",
]


class Decoding(Protocol):
    """The incremental decoding of a batch of ``N`` rows, as the searches see it.

    Attributes:
        pad_id: the id written after a row has ended.
        eos_id: the id that ends a row.
        banned: ids never generated (probability 0), e.g. the translator's PAD and BOS.
    """

    pad_id: int
    eos_id: int
    banned: tuple[int, ...]

    def logits(self) -> Tensor:
        """Next-token logits ``[N, V]`` after every token so far (the start: the prompt, or BOS)."""
        ...

    def append(self, tokens: Tensor) -> None:
        """Add the chosen tokens ``[N]`` (one per row) to the rows."""
        ...

    def reorder(self, rows: Tensor) -> None:
        """Keep rows ``rows [N]`` in that order (beam search: the surviving beams; a row may repeat).

        Beam search keeps each row among its input's beams (``rows[i] // beam_size == i // beam_size``),
        so what the beams of one input share (the translator's encoder memory) needs no reordering.
        """
        ...


class Decodable(Protocol):
    """A model that :func:`greedy_decode` and :func:`beam_search` can decode with."""

    def decoding(
        self,
        inputs: Tensor,
        padding_mask: Tensor | None = None,
        *,
        repeat: int = 1,
        max_len: int,
        use_cache: bool = True,
    ) -> Decoding:
        """The :class:`Decoding` of a batch ``inputs [B, T]`` (the translator: sources; the language model:
        left-padded prompts), each row repeated ``repeat`` times (consecutively: beams), with room for
        ``max_len`` new tokens; ``padding_mask [B, T]`` is True at real tokens (True = may attend)."""
        ...


@dataclass
class Hypotheses:
    """Decoded target sequences of a batch.

    Attributes:
        tokens: ``[B, T]`` generated ids (no BOS), ending with EOS unless cut at ``max_len``,
            then ``pad_id``.
        lengths: ``[B]`` generated tokens per row, EOS included.
        log_probs: ``[B]`` sum of the log-probabilities of the generated tokens (EOS included).
        logits: ``[B, T, V]`` the raw logits of every step, zero after a row's EOS
            (:func:`attnkit.models.generation.greedy_decode` with ``return_logits=True`` only).
        eos_id: the EOS id, which :meth:`token_lists` strips.
    """

    tokens: Tensor
    lengths: Tensor
    log_probs: Tensor
    logits: Tensor | None = None
    eos_id: int | None = None

    def scores(self, length_penalty: float = 1.0) -> Tensor:
        """``log_probs / lengths ** length_penalty`` (see :func:`length_normalized`)."""
        return length_normalized(self.log_probs, self.lengths, length_penalty)

    def token_lists(self) -> list[list[int]]:
        """Per row, the generated ids without EOS and padding."""
        out = []
        for row, n in zip(self.tokens.tolist(), self.lengths.tolist()):
            ids = row[:n]
            out.append(ids[:-1] if ids and ids[-1] == self.eos_id else ids)
        return out


def length_normalized(log_probs: Tensor, lengths: Tensor | float, length_penalty: float) -> Tensor:
    """The score that beam search ranks finished hypotheses by: ``log P(y) / |y| ** length_penalty``.

    ``|y|`` counts the generated tokens, EOS included. ``length_penalty=0`` ranks by the raw
    log-probability (which favours short outputs); ``1`` by the mean log-probability per token.
    (This is the "divide by length^alpha" rule, not GNMT's ``((5 + |y|) / 6) ** alpha``.)
    """
    lengths = torch.as_tensor(lengths, dtype=log_probs.dtype, device=log_probs.device)
    return log_probs / lengths.clamp_min(1) ** length_penalty


def log_probs(logits: Tensor, banned: tuple[int, ...] = ()) -> Tensor:
    """Next-token log-probabilities (float32) of ``logits [..., V]``; the ``banned`` ids get probability 0."""
    logits = logits.float().clone()
    for token in banned:
        logits[..., token] = float("-inf")
    return torch.log_softmax(logits, dim=-1)


def check_max_len(max_len: int) -> None:
    """Raise a ``ValueError`` unless ``max_len`` (the most tokens to generate, EOS included) is an int >= 1."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1 (the most tokens to generate, EOS included), got {max_len!r}")


def check_beam_size(beam_size: int) -> None:
    """Raise a ``ValueError`` unless ``beam_size`` is an int >= 1."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")


@torch.no_grad()
def run_greedy(decoding: Decoding, batch: int, *, max_len: int, return_logits: bool = False) -> Hypotheses:
    """The most likely next token at every step for the ``batch`` rows of ``decoding``.

    Stops a row at EOS (later positions are ``pad_id``) and the whole batch when every row has ended
    or after ``max_len`` tokens.
    """
    check_max_len(max_len)
    ref = decoding.logits()
    device = ref.device
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    total = torch.zeros(batch, device=device)
    tokens: list[Tensor] = []
    step_logits = []
    for t in range(max_len):
        logits = ref if t == 0 else decoding.logits()
        if return_logits:
            step_logits.append(logits.float().masked_fill(finished.unsqueeze(1), 0.0))
        best_logp, token = log_probs(logits, decoding.banned).max(dim=-1)
        token = token.masked_fill(finished, decoding.pad_id)
        total += best_logp.masked_fill(finished, 0.0)
        lengths += (~finished).long()
        finished |= token == decoding.eos_id
        tokens.append(token)
        if bool(finished.all()):
            break
        decoding.append(token)
    return Hypotheses(
        tokens=torch.stack(tokens, dim=1),
        lengths=lengths,
        log_probs=total,
        logits=torch.stack(step_logits, dim=1) if return_logits else None,
        eos_id=decoding.eos_id,
    )


@torch.no_grad()
def run_beam_search(
    decoding: Decoding, batch: int, *, beam_size: int, max_len: int, length_penalty: float = 1.0
) -> Hypotheses:
    """Beam search over ``decoding``, whose ``batch * beam_size`` rows are the beams (``beam_size``
    identical rows per input, consecutive): the best finished hypothesis of each input.

    At every step each input's ``2 * beam_size`` best extensions are ranked by their summed
    log-probability. An extension ending in EOS among the first ``beam_size`` is a finished
    hypothesis, scored by :func:`length_normalized` (``log P / length ** length_penalty``); the
    ``beam_size`` best extensions not ending in EOS stay alive, and the decoding's rows are reordered
    to them. An input is done when no alive beam can still beat its best finished hypothesis: a beam's
    log-probability only falls, so its final score is at most ``log P / L ** length_penalty`` for the
    best final length ``L <= max_len`` (no early stop after ``beam_size`` finished hypotheses, which
    can miss a better, longer one). After ``max_len`` tokens the alive beams are finished as they are.
    With ``beam_size=1`` an input also stops when its best extension is EOS, which makes it exactly
    :func:`run_greedy` whatever the length penalty.
    """
    check_beam_size(beam_size)
    check_max_len(max_len)
    pad_id, eos_id = decoding.pad_id, decoding.eos_id
    k = beam_size
    logits = decoding.logits()
    device = logits.device
    rows = torch.arange(batch, device=device)
    neg_inf = float("-inf")

    alive_scores = torch.full((batch, k), neg_inf, device=device)
    alive_scores[:, 0] = 0.0  # all beams start identical: expand only the first at step 1
    alive_tokens = torch.empty(batch, k, 0, dtype=torch.long, device=device)
    best_score = torch.full((batch,), neg_inf, device=device)
    best_logp = torch.full((batch,), neg_inf, device=device)
    best_len = torch.zeros(batch, dtype=torch.long, device=device)
    best_tokens = torch.full((batch, max_len), pad_id, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)

    for t in range(max_len):
        length = t + 1
        if t > 0:
            logits = decoding.logits()
        logp = log_probs(logits, decoding.banned)  # [B*K, V]
        vocab = logp.shape[-1]
        candidates = (alive_scores.unsqueeze(-1) + logp.view(batch, k, vocab)).view(batch, k * vocab)
        top_scores, top_idx = candidates.topk(min(2 * k, k * vocab), dim=1)  # [B, 2K], best first
        top_beam, top_tok = top_idx // vocab, top_idx % vocab
        is_eos = top_tok == eos_id

        # finished hypotheses: EOS among the K best (every candidate of the K best at the last step)
        last_step = length == max_len
        finished = torch.ones_like(is_eos) if last_step else is_eos.clone()
        finished[:, k:] = False
        finished &= torch.isfinite(top_scores) & ~done.unsqueeze(1)
        normalized = length_normalized(top_scores, float(length), length_penalty).masked_fill(~finished, neg_inf)
        cand_score, cand_j = normalized.max(dim=1)
        improve = cand_score > best_score
        if bool(improve.any()):
            beam_j = top_beam[rows, cand_j]
            seqs = torch.cat([alive_tokens[rows, beam_j], top_tok[rows, cand_j].unsqueeze(1)], dim=1)
            best_tokens[improve, :length] = seqs[improve]
            best_tokens[improve, length:] = pad_id
            best_score = torch.where(improve, cand_score, best_score)
            best_logp = torch.where(improve, top_scores[rows, cand_j], best_logp)
            best_len = torch.where(improve, torch.full_like(best_len, length), best_len)
        if last_step:
            break
        if k == 1:
            # One beam is greedy decoding: an input whose best extension is EOS is finished (length
            # normalisation would otherwise keep looking for a longer hypothesis that scores higher).
            done |= is_eos[:, 0]

        # the K best extensions that do not end in EOS stay alive
        alive_scores, pick = top_scores.masked_fill(is_eos, neg_inf).topk(k, dim=1)
        pick_beam, pick_tok = top_beam.gather(1, pick), top_tok.gather(1, pick)
        alive_tokens = torch.cat(
            [alive_tokens.gather(1, pick_beam.unsqueeze(-1).expand(-1, -1, t)), pick_tok.unsqueeze(-1)], dim=2
        )
        # An alive beam's log-probability can only fall; its best possible final score:
        best_alive = alive_scores.max(dim=1).values
        bound = torch.maximum(
            length_normalized(best_alive, float(length + 1), length_penalty),
            length_normalized(best_alive, float(max_len), length_penalty),
        )
        done |= best_score >= bound
        if bool(done.all()):
            break
        decoding.reorder((rows.unsqueeze(1) * k + pick_beam).view(-1))
        decoding.append(pick_tok.view(-1))

    width = int(best_len.max())
    return Hypotheses(tokens=best_tokens[:, :width], lengths=best_len, log_probs=best_logp, eos_id=eos_id)


def greedy_decode(
    model: Decodable,
    inputs: Tensor,
    padding_mask: Tensor | None = None,
    *,
    max_len: int,
    use_cache: bool = True,
    return_logits: bool = False,
) -> Hypotheses:
    """The most likely next token at every step, for a batch ``inputs [B, T]`` of either family.

    The translator decodes sources ``[B, Ts]`` from BOS; the language model continues left-padded
    prompts ``[B, T]`` (``padding_mask``: True = real token). Stops a row at EOS (later positions are
    ``pad_id``) and the whole batch when every row has ended or after ``max_len`` tokens. With
    ``use_cache`` each step feeds only the newest token through the decoder; without it the whole
    prefix is recomputed at every step (same result, for checking). Call ``model.eval()`` first.
    """
    check_max_len(max_len)
    decoding = model.decoding(inputs, padding_mask, repeat=1, max_len=max_len, use_cache=use_cache)
    return run_greedy(decoding, inputs.shape[0], max_len=max_len, return_logits=return_logits)


def beam_search(
    model: Decodable,
    inputs: Tensor,
    padding_mask: Tensor | None = None,
    *,
    beam_size: int = 4,
    max_len: int,
    length_penalty: float = 1.0,
) -> Hypotheses:
    """Beam search for a batch ``inputs [B, T]`` of either family: the best finished hypothesis of each
    (see :func:`run_beam_search` for the rule).

    All ``B * beam_size`` beams run as one batch with the decoder's key/value cache, reordered to the
    surviving beams at every step (the translator's encoder runs once, and the cross-attention
    keys/values are computed once: the beams of a sentence share its memory). ``padding_mask [B, T]``:
    True at real tokens. Beam search usually finds a higher-scoring output than greedy decoding, but
    not always: the greedy prefix can fall out of the beam. Call ``model.eval()`` first.
    """
    check_beam_size(beam_size)
    check_max_len(max_len)
    decoding = model.decoding(inputs, padding_mask, repeat=beam_size, max_len=max_len)
    return run_beam_search(
        decoding, inputs.shape[0], beam_size=beam_size, max_len=max_len, length_penalty=length_penalty
    )
