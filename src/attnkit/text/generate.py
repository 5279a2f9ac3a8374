"""Text out of a decoder: prompt ids -> new ids -> streamed text -> cut at the stop strings, once.

:func:`generate_texts` is the one path from a :class:`~attnkit.models.LanguageModel` to text that
``attnkit generate`` (:func:`attnkit.tasks.lm.generate_text`), ``attnkit chat`` and
:meth:`attnkit.interop.Pretrained.generate` / :meth:`~attnkit.interop.Pretrained.chat`, and ``lmeval``'s
``generate_until`` use (``attnkit serve`` streams many requests in one batch with its own scheduler):

- the tokens come from :meth:`LanguageModel.generate` with one
  :class:`~attnkit.models.generation.params.SamplingParams` (every option, each row's own draw), which also
  stops a row early once its newest text holds a stop string (a check whose cost per token is flat);
- each row's ids become text piece by piece (:class:`~attnkit.text.streaming.StreamDecoder`), and the text is
  cut before the first stop string (:class:`~attnkit.text.stops.StopText`, which never lets out text that
  could still become one); a stop id (the model's EOS and ``params.stop_ids``) ends a text and is not in it.

So the text is ``decode(new ids up to the first stop id)`` cut at the earliest occurrence of any stop
string: what lm-evaluation-harness does with its ``until`` strings (``text.split(stop)[0]`` for each).

:func:`sampling_params` turns an entry point's keywords into that one :class:`SamplingParams`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from attnkit.models.generation.params import FIELDS, SamplingParams
from attnkit.models.lm import LanguageModel
from attnkit.text.stops import StopText
from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import Tokenizer

__all__ = ["ALIASES", "generate_texts", "sampling_params"]

ALIASES = {"max_new_tokens": "max_tokens"}
"""Other names entry points take for :class:`SamplingParams` fields (``attnkit generate --max-new-tokens``)."""


def sampling_params(
    params: SamplingParams | None = None, options: Mapping[str, Any] | None = None, **defaults: Any
) -> SamplingParams:
    """One :class:`SamplingParams` from an entry point's inputs: ``params`` (or a new one with ``defaults``,
    an entry point's own defaults such as ``max_tokens=200``), with ``options`` (fields by name, or by their
    :data:`ALIASES`) over it. Checked as every ``SamplingParams`` is: a wrong value is a
    :class:`~attnkit.models.generation.options.SamplingError` naming the field; an unknown name is a
    ``TypeError`` listing the fields."""
    changes: dict[str, Any] = {}
    for name, value in (options or {}).items():
        field = ALIASES.get(name, name)
        if field not in FIELDS:
            raise TypeError(
                f"unknown sampling option {name!r}; the options are {sorted(FIELDS)} "
                f"({', '.join(f'{k} is {v}' for k, v in ALIASES.items())})"
            )
        if field in changes:
            raise TypeError(f"sampling option {field!r} given twice (as {field} and as one of {sorted(ALIASES)})")
        changes[field] = value
    if params is None:
        return SamplingParams(**{**defaults, **changes})
    if not isinstance(params, SamplingParams):
        raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
    return params.replace(**changes) if changes else params


def generate_texts(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    generator: torch.Generator | None = None,
    stop_ids: Sequence[int] = (),
    on_text: Callable[[int, str], None] | None = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
) -> list[str]:
    """The text each of ``prompts`` (token-id lists, of any lengths: left-padded together, each row decoded
    as if alone) continues with, as the module docstring says.

    ``params.max_tokens`` new tokens at most (``None``: what the context leaves after the longest prompt);
    ``generator`` draws the samples (default: one seeded with ``params.seed``, if any); ``stop_ids`` end a
    text besides the model's EOS and ``params.stop_ids`` (e.g. a chat template's end of turn). ``on_text``
    receives ``(row, piece)`` as each row's text grows (nothing past a stop). ``num_beams > 1``: beam search
    (no sampling options; the best hypothesis of each row, cut the same way, not streamed).
    """
    if not prompts:
        return []
    rows = [list(p) for p in prompts]
    if any(not row for row in rows):
        raise ValueError("every prompt needs at least one token (start from the BOS for no prompt)")
    budget = params.max_tokens
    if budget is None:
        budget = max(0, model.config.max_len - max(map(len, rows)))
    ends = {model.config.eos_id, *params.stop_ids, *(int(i) for i in stop_ids)}
    device = model.token_embedding.weight.device
    ids = [torch.tensor(row, dtype=torch.long) for row in rows]
    if num_beams != 1:
        if params != SamplingParams(max_tokens=params.max_tokens, temperature=params.temperature, stop=params.stop):
            raise ValueError("beam search (num_beams > 1) takes no sampling options but max_tokens and stop")
        out = model.generate(ids, budget, num_beams=num_beams, length_penalty=length_penalty)
        texts = []
        for new in out[:, max(map(len, rows)) :].tolist():
            end = next((i for i, t in enumerate(new) if t in ends), len(new))
            texts.append(StopText(params.stop).flush(tokenizer.decode(new[:end])))
        return texts
    if generator is None and params.seed is not None:
        generator = torch.Generator(device=device).manual_seed(params.seed)
    streams = [StreamDecoder(tokenizer) for _ in rows]
    cuts = [StopText(params.stop) for _ in rows]
    pieces: list[list[str]] = [[] for _ in rows]
    ended = [False] * len(rows)

    def emit(row: int, piece: str) -> None:
        if piece:
            pieces[row].append(piece)
            if on_text is not None:
                on_text(row, piece)

    def on_token(tokens: Tensor) -> None:
        for row, token in enumerate(tokens.tolist()):
            if ended[row]:
                continue
            if token in ends:  # a stop id ends the text (it is not in it); after it come only pads
                ended[row] = True
                continue
            piece, ended[row] = cuts[row].add(streams[row].push(token))
            emit(row, piece)

    model.generate(
        ids,
        budget,
        params=params.replace(stop_ids=tuple(sorted(ends - {model.config.eos_id}))),
        generator=generator,
        decode=tokenizer.decode if params.stop else None,
        on_token=on_token,
    )
    for row in range(len(rows)):  # bytes held back for an unfinished character, text held back for a stop
        emit(row, cuts[row].flush(streams[row].flush()))
    return ["".join(p) for p in pieces]
