"""The logits processors and the one batched next-token choice: :class:`Sampler`.

Every way of generating text picks its next tokens here: :func:`~attnkit.models.generation.sample` (behind
:meth:`attnkit.models.LanguageModel.generate`, ``attnkit generate`` and ``chat``) and the serving engine
(``attnkit serve``), each row of a batch with its own :class:`~attnkit.models.generation.params.SamplingParams`.

A sampling option is one :class:`Processor` registered in :data:`PROCESSORS` beside its
:class:`SamplingParams` field. Processors run in registration order on float32 logits ``[B, V]``, each with one
value per row; a row whose value is the option's neutral one (``None``, 1 for a penalty, ...) is left exactly
as it was, so a row decodes the same alone or beside rows with other options. Two stages:

- ``"logits"``: the logit bias, then the penalties (transformers' and vLLM's order: a bias and a repetition
  penalty do not commute) change the logits of every row, greedy rows too (as transformers applies its logits
  processors before ``argmax``);
- ``"warp"``: temperature, top-k, top-p, min-p and typical-p shape the distribution a sampled row draws from
  (transformers' order); a greedy row (temperature 0) skips them.

Adding an option: its field in :class:`SamplingParams` (with its check), a :class:`Processor` subclass here
registered under the field's name, and a test (the development page shows one, step by step).

Draws: the rows of one request share its ``torch.Generator``, and draw together (one ``multinomial`` over
their rows), so a seeded request gets the same tokens alone or batched. Log-probabilities are the model's
own: the log-softmax of the logits as they came, before any processor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from attnkit.models.generation.params import SamplingParams
from attnkit.registry import Registry

__all__ = [
    "PROCESSORS",
    "Choice",
    "History",
    "Processor",
    "Sampler",
    "min_p_rows",
    "repetition_rows",
    "top_k_rows",
    "top_p_rows",
    "typical_p_rows",
]


# ---------------------------------------------------------------------------------------------- per-row filters
def top_k_rows(logits: Tensor, k: Tensor) -> Tensor:
    """Keep the ``k[b]`` largest logits of row ``b`` of ``[B, V]`` (ties at the k-th all kept); ``k >= V`` keeps all."""
    vocab = logits.shape[-1]
    k = k.clamp(1, vocab)
    largest = int(k.max())
    kth = torch.topk(logits, largest, dim=-1).values.gather(-1, (k - 1)[:, None])
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_rows(logits: Tensor, p: Tensor) -> Tensor:
    """Nucleus filter per row: keep the fewest most likely tokens whose probability reaches ``p[b]`` (the
    most likely one always); a row with ``p >= 1`` is kept whole."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = (before >= p[:, None]) & (p < 1.0)[:, None]  # already p without it: drop (never the first)
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def min_p_rows(logits: Tensor, min_p: Tensor) -> Tensor:
    """Drop the tokens of row ``b`` less likely than ``min_p[b]`` times its most likely one (transformers'
    ``MinPLogitsWarper``); ``min_p`` 0 keeps the row whole."""
    probs = logits.softmax(dim=-1)
    drop = probs < min_p[:, None] * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(drop, float("-inf"))


def repetition_rows(logits: Tensor, seen: Tensor, penalty: Tensor) -> Tensor:
    """transformers' ``RepetitionPenaltyLogitsProcessor`` per row: where ``seen [B, V]``, positive logits are
    divided by ``penalty[b]`` and negative ones multiplied; a penalty of 1 changes nothing."""
    factor = penalty[:, None]
    penalised = torch.where(logits < 0, logits * factor, logits / factor)
    return torch.where(seen & (penalty != 1.0)[:, None], penalised, logits)


def typical_p_rows(logits: Tensor, mass: Tensor) -> Tensor:
    """Locally typical sampling per row (transformers' ``TypicalLogitsWarper``): rank the tokens of row ``b`` by
    how far their information ``-log p`` is from the row's entropy, and keep the nearest ones whose probability
    reaches ``mass[b]`` (the nearest always); a row with ``mass >= 1`` is kept whole."""
    logp = logits.log_softmax(dim=-1)
    entropy = -(logp * logp.exp()).nansum(dim=-1, keepdim=True)
    distance, order = torch.sort((-logp - entropy).abs(), dim=-1)  # ties: the same distance kept or not
    cumulative = logits.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
    last = (cumulative < mass[:, None]).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    drop_sorted = (distance > distance.gather(-1, last)) & (mass < 1.0)[:, None]
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


# ---------------------------------------------------------------------------------------------- history
class History:
    """What the rows have seen: ``seen [B, V]`` (the prompt's tokens, padding excluded, and every generated
    one) and ``counts [B, V]`` (how often each token was generated), kept only while a row's processor needs
    them (``None`` otherwise)."""

    def __init__(self) -> None:
        self.seen: Tensor | None = None
        self.counts: Tensor | None = None


# ---------------------------------------------------------------------------------------------- processors
class Processor:
    """One sampling option applied to a batch ``[B, V]``, one value per row.

    Subclasses set ``field`` (their :class:`SamplingParams` field and registry name), ``stage``
    (``"logits"`` or ``"warp"``, see the module docstring), ``neutral`` (the value that changes nothing;
    ``None`` is neutral too) and ``needs`` (``"seen"`` / ``"counts"``: the :class:`History` they read), and
    implement :meth:`__call__`. ``values`` holds each row's value as a tensor (neutral values included).
    """

    field: ClassVar[str]
    stage: ClassVar[str] = "logits"
    neutral: ClassVar[Any] = None
    needs: ClassVar[str | None] = None
    dtype: ClassVar[torch.dtype] = torch.float32

    def __init__(self, values: Sequence[Any], device: torch.device) -> None:
        fill = [self.neutral if v is None else v for v in values]
        self.values = torch.tensor(fill, dtype=self.dtype, device=device)

    @classmethod
    def active(cls, value: Any) -> bool:
        """Whether ``value`` changes the logits (not ``None`` nor the neutral value)."""
        return value is not None and value != cls.neutral

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        raise NotImplementedError


PROCESSORS: Registry[type[Processor]] = Registry("logits processor")
"""The sampling options' processors by field name, applied in registration order."""


@PROCESSORS.register("logit_bias")
class LogitBias(Processor):
    field, neutral = "logit_bias", ()

    def __init__(self, values: Sequence[Any], device: torch.device) -> None:
        rows, tokens, biases = [], [], []
        for row, pairs in enumerate(values):
            for token, bias in pairs or ():
                rows.append(row)
                tokens.append(int(token))
                biases.append(float(bias))
        self.index = (torch.tensor(rows, dtype=torch.long, device=device), torch.tensor(tokens, device=device))
        self.values = torch.tensor(biases, dtype=torch.float32, device=device)

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return logits.index_put(self.index, self.values, accumulate=True)


@PROCESSORS.register("repetition_penalty")
class RepetitionPenalty(Processor):
    field, neutral, needs = "repetition_penalty", 1.0, "seen"

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        assert history.seen is not None
        return repetition_rows(logits, history.seen, self.values)


@PROCESSORS.register("frequency_penalty")
class FrequencyPenalty(Processor):
    field, neutral, needs = "frequency_penalty", 0.0, "counts"

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        assert history.counts is not None
        return logits - history.counts * self.values[:, None]


@PROCESSORS.register("presence_penalty")
class PresencePenalty(Processor):
    field, neutral, needs = "presence_penalty", 0.0, "counts"

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        assert history.counts is not None
        return logits - (history.counts > 0) * self.values[:, None]


@PROCESSORS.register("temperature")
class Temperature(Processor):
    field, stage, neutral = "temperature", "warp", 1.0

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return logits / self.values[:, None]


@PROCESSORS.register("top_k")
class TopK(Processor):
    field, stage, dtype = "top_k", "warp", torch.long
    neutral = 2**62  # every token

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return top_k_rows(logits, self.values)


@PROCESSORS.register("top_p")
class TopP(Processor):
    field, stage, neutral = "top_p", "warp", 1.0

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return top_p_rows(logits, self.values)


@PROCESSORS.register("min_p")
class MinP(Processor):
    field, stage, neutral = "min_p", "warp", 0.0

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return min_p_rows(logits, self.values)


@PROCESSORS.register("typical_p")
class TypicalP(Processor):
    field, stage, neutral = "typical_p", "warp", 1.0

    def __call__(self, logits: Tensor, history: History) -> Tensor:
        return typical_p_rows(logits, self.values)


# ---------------------------------------------------------------------------------------------- the sampler
@dataclass(frozen=True)
class Choice:
    """One step's choice for every row: ``tokens [B]``; with log-probabilities asked by any row,
    ``logprobs [B]`` (each chosen token's) and ``top_ids`` / ``top_logprobs [B, K]`` (each row's most likely
    tokens, ``K`` the most any row asked for: row ``b`` reads its own first ``logprobs`` columns)."""

    tokens: Tensor
    logprobs: Tensor | None = None
    top_ids: Tensor | None = None
    top_logprobs: Tensor | None = None


@dataclass(eq=False)
class _Row:
    params: SamplingParams
    generator: torch.Generator | None


class Sampler:
    """The next token of every row of a batch, each row with its own :class:`SamplingParams` and generator.

    Rows are added with :meth:`add` (a prompt's ids start its :class:`History` when a processor needs it),
    kept with :meth:`keep` (an index, as the batch drops finished rows), and each step :meth:`choose` turns
    the model's last logits ``[B, V]`` into a :class:`Choice` and records the tokens chosen.
    """

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu") -> None:
        self.vocab_size = int(vocab_size)
        self.device = torch.device(device)
        self._rows: list[_Row] = []
        self.history = History()
        self._stages: tuple[list[Processor], list[Processor]] | None = None  # built lazily per composition
        self._groups: list[tuple[torch.Generator | None, Tensor]] | None = None

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def params(self) -> list[SamplingParams]:
        """Each row's parameters."""
        return [row.params for row in self._rows]

    def add(
        self,
        params: SamplingParams,
        prompts: Tensor | Sequence[Sequence[int]],
        *,
        generator: torch.Generator | None = None,
        padding_mask: Tensor | None = None,
    ) -> None:
        """Append one row per prompt of ``prompts`` (``[N, T]`` ids, with ``padding_mask`` True at real tokens,
        or lists of ids), all with ``params`` and ``generator`` (they draw together)."""
        if isinstance(prompts, Tensor):
            ids, mask = prompts.to(self.device), None if padding_mask is None else padding_mask.to(self.device)
        else:
            rows = [list(p) for p in prompts]
            width = max((len(r) for r in rows), default=0)
            ids = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
            mask = torch.zeros(len(rows), width, dtype=torch.bool, device=self.device)
            for i, r in enumerate(rows):
                if r:
                    ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long, device=self.device)
                    mask[i, width - len(r) :] = True
        count = ids.shape[0]
        params.check_vocab(self.vocab_size)
        self._rows += [_Row(params, generator) for _ in range(count)]
        needs = {cls.needs for name, cls in PROCESSORS.items() if cls.active(getattr(params, name))}
        if self.history.seen is not None or "seen" in needs:
            new_seen = _seen(ids, mask, self.vocab_size)
            old = self.history.seen
            if old is None:
                old = torch.zeros(len(self._rows) - count, self.vocab_size, dtype=torch.bool, device=self.device)
            self.history.seen = torch.cat([old, new_seen])
        if self.history.counts is not None or "counts" in needs:
            old = self.history.counts
            if old is None:
                old = torch.zeros(len(self._rows) - count, self.vocab_size, dtype=torch.float32, device=self.device)
            new = torch.zeros(count, self.vocab_size, dtype=torch.float32, device=self.device)
            self.history.counts = torch.cat([old, new])
        self._stages = self._groups = None

    def keep(self, index: Sequence[int] | Tensor) -> None:
        """Keep the rows ``index`` (in that order)."""
        rows = index.tolist() if isinstance(index, Tensor) else list(index)
        self._rows = [self._rows[i] for i in rows]
        at = torch.tensor(rows, dtype=torch.long, device=self.device)
        if self.history.seen is not None:
            self.history.seen = self.history.seen.index_select(0, at)
        if self.history.counts is not None:
            self.history.counts = self.history.counts.index_select(0, at)
        self._stages = self._groups = None

    def extend(self, other: Sampler) -> None:
        """Append the rows of ``other`` (their parameters, generators and history) after this one's."""
        if other.vocab_size != self.vocab_size:
            raise ValueError(f"cannot join samplers of {other.vocab_size} and {self.vocab_size} tokens")
        mine, theirs = len(self._rows), len(other._rows)
        self._rows += other._rows
        for name in ("seen", "counts"):
            a, b = getattr(self.history, name), getattr(other.history, name)
            if a is None and b is None:
                continue
            like = a if a is not None else b
            assert like is not None
            a = a if a is not None else like.new_zeros(mine, self.vocab_size)
            b = b if b is not None else like.new_zeros(theirs, self.vocab_size)
            setattr(self.history, name, torch.cat([a, b]))
        self._stages = self._groups = None

    def subset(self, index: Sequence[int]) -> Sampler:
        """A new sampler of the rows ``index`` (a copy of their history): to choose for some rows alone."""
        part = Sampler(self.vocab_size, self.device)
        part.extend(self)
        part.keep(index)
        return part

    def _build(self) -> tuple[list[Processor], list[Processor]]:
        if self._stages is None:
            params = self.params
            greedy = [p.greedy for p in params]
            stages: tuple[list[Processor], list[Processor]] = ([], [])
            for name, cls in PROCESSORS.items():
                values = [getattr(p, name) for p in params]
                if cls.stage == "warp":  # a greedy row skips the warpers: neutral values
                    values = [None if g else v for v, g in zip(values, greedy)]
                if any(cls.active(v) for v in values):
                    stages[cls.stage == "warp"].append(cls(values, self.device))
            self._stages = stages
        return self._stages

    def _draw_groups(self) -> list[tuple[torch.Generator | None, Tensor]]:
        """The sampled rows grouped by generator (rows sharing one draw together), in order of first row."""
        if self._groups is None:
            groups: dict[int, tuple[torch.Generator | None, list[int]]] = {}
            for i, row in enumerate(self._rows):
                if not row.params.greedy:
                    groups.setdefault(id(row.generator), (row.generator, []))[1].append(i)
            self._groups = [(g, torch.tensor(idx, device=self.device)) for g, idx in groups.values()]
        return self._groups

    def choose(self, logits: Tensor) -> Choice:
        """The next token of every row from the model's last logits ``[B, V]``, recorded in the history."""
        if logits.dim() != 2 or logits.shape[0] != len(self._rows):
            raise ValueError(f"logits must be [{len(self._rows)} rows, vocab], got {tuple(logits.shape)}")
        base, warpers = self._build()
        scores = logits.float()
        logprobs = top_ids = top_lps = chosen = None
        asked = [row.params.logprobs for row in self._rows if row.params.logprobs is not None]
        if asked:
            logprobs = scores.log_softmax(dim=-1)
        for processor in base:
            scores = processor(scores, self.history)
        tokens = scores.argmax(dim=-1)
        groups = self._draw_groups()
        if groups:
            warped = scores
            for processor in warpers:
                warped = processor(warped, self.history)
            probs = warped.softmax(dim=-1)
            for generator, index in groups:
                drawn = torch.multinomial(probs.index_select(0, index), 1, generator=generator).squeeze(-1)
                tokens = tokens.index_copy(0, index, drawn)
        if logprobs is not None:
            chosen = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
            most = min(max(asked), self.vocab_size)
            if most:
                top_lps, top_ids = torch.topk(logprobs, most, dim=-1)
        self.record(tokens)
        return Choice(tokens, chosen, top_ids, top_lps)

    def record(self, tokens: Tensor) -> None:
        """Add ``tokens [B]`` to the rows' history (done by :meth:`choose`; for tokens chosen elsewhere)."""
        at = tokens[:, None].to(self.device)
        if self.history.seen is not None:
            self.history.seen.scatter_(1, at, True)
        if self.history.counts is not None:
            self.history.counts.scatter_add_(1, at, torch.ones_like(at, dtype=self.history.counts.dtype))


def _seen(ids: Tensor, mask: Tensor | None, vocab_size: int) -> Tensor:
    """``[N, V]``: True at the ids of each row of ``ids [N, T]`` (where ``mask`` is True: real tokens)."""
    seen = torch.zeros(ids.shape[0], vocab_size, dtype=torch.bool, device=ids.device)
    if ids.shape[1] == 0:
        return seen
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask
    seen.scatter_(1, ids.masked_fill(~real, 0), real)  # padding writes False at id 0 ...
    seen[:, 0] |= (ids == 0).logical_and(real).any(dim=1)  # ... so id 0 is set where it is a real token
    return seen
