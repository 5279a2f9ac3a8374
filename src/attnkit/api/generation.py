"""Text out of trained runs: continue prompts with an ``lm`` run, translate with a ``translate`` run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnkit.data.readers.lines import read_lines
from attnkit.models.generation import FIELDS, SamplingError, SamplingParams, field_doc
from attnkit.text.generate import sampling_params

__all__ = ["FIELDS", "SamplingError", "SamplingParams", "field_doc", "generate", "read_lines", "translate"]


def generate(
    run: str | Path,
    prompt: str | Sequence[str] = "",
    params: SamplingParams | None = None,
    *,
    num_samples: int = 1,
    batch_size: int = 8,
    write: Callable[[str], None] | None = None,
    **options: Any,
) -> list[str]:
    """Texts that continue ``prompt`` with the model and tokenizer of a trained ``lm`` run (folder or
    checkpoint file); each text is the prompt followed by its continuation.

    ``prompt``: one text (``num_samples`` samples, one after the other; with ``write`` each is
    streamed as it is generated: the prompt, every new piece, then ``"\\n"``) or a list of texts
    (``num_samples`` each, generated in batches of ``batch_size``).

    The sampling options are one :class:`~attnkit.models.generation.SamplingParams` (``params``) and/or
    its fields as keywords over it (``max_new_tokens`` is ``max_tokens``, 200 by default): ``temperature``
    0 is greedy; ``top_k``, ``top_p`` and ``min_p`` restrict the sampled tokens, ``repetition_penalty`` > 1
    and the ``presence_penalty`` / ``frequency_penalty`` discourage repeats, ``logit_bias`` shifts tokens,
    a text stops at any of the ``stop`` strings (cut before it), and ``seed`` makes the sampling
    reproducible. See :func:`attnkit.tasks.lm.generate_text`.

    The options are checked first (a :class:`~attnkit.models.generation.SamplingError`, a ``ValueError``
    naming the field), before the run is loaded or anything is written.
    """
    params = sampling_params(params, options, max_tokens=200)
    # Lazy, to keep a heavy stack off the start-up path (no cycle: the tasks never import the API): the
    # command line's `generate --help` and `chat --help` derive their flags from this module's
    # SamplingParams, and must not import every task (the registry) to show them.
    from attnkit.tasks.lm import generate_from_run

    return generate_from_run(run, prompt, params, num_samples=num_samples, batch_size=batch_size, write=write)


def translate(
    run: str | Path,
    texts: Sequence[str],
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """One translation (a single line) per text of ``texts``, with a trained ``translate`` run (folder
    or checkpoint file). ``beam_size``: 1 is greedy decoding (default: the run's ``decode.beam_size``).
    ``warn`` receives warnings about the inputs (e.g. words the vocabulary does not know)."""
    from attnkit.tasks.translate import translate_run  # lazy: see generate

    return translate_run(run, texts, beam_size=beam_size, warn=warn)
