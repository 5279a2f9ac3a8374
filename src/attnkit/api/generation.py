"""Text out of trained runs: continue prompts with an ``lm`` run, translate with a ``translate`` run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from attnkit.data.readers.lines import read_lines
from attnkit.models.generation import check_sampling
from attnkit.tasks.lm import generate_from_run
from attnkit.tasks.translate import translate_run

__all__ = ["generate", "read_lines", "translate"]


def generate(
    run: str | Path,
    prompt: str | Sequence[str] = "",
    *,
    max_new_tokens: int = 200,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop: Sequence[str] | None = None,
    seed: int | None = None,
    num_samples: int = 1,
    batch_size: int = 8,
    write: Callable[[str], None] | None = None,
) -> list[str]:
    """Texts that continue ``prompt`` with the model and tokenizer of a trained ``lm`` run (folder or
    checkpoint file); each text is the prompt followed by its continuation.

    ``prompt``: one text (``num_samples`` samples, one after the other; with ``write`` each is
    streamed as it is generated: the prompt, every new piece, then ``"\\n"``) or a list of texts
    (``num_samples`` each, generated in batches of ``batch_size``). ``temperature`` 0 is greedy;
    ``top_k``, ``top_p`` and ``min_p`` restrict the sampled tokens, ``repetition_penalty`` > 1
    discourages repeats, a text stops at any of the ``stop`` strings (cut before it), and ``seed``
    makes the sampling reproducible. See :func:`attnkit.tasks.lm.generate_text`.

    The options are checked first (:func:`attnkit.models.generation.check_sampling`: a ``ValueError``
    naming the option), before the run is loaded or anything is written.
    """
    check_sampling(
        temperature, top_k, top_p, min_p, repetition_penalty,
        seed=seed, max_tokens=max_new_tokens, max_tokens_field="max_new_tokens",
    )  # fmt: skip
    return generate_from_run(
        run,
        prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        repetition_penalty=repetition_penalty,
        stop=list(stop or []),
        seed=seed,
        num_samples=num_samples,
        batch_size=batch_size,
        write=write,
    )


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
    return translate_run(run, texts, beam_size=beam_size, warn=warn)
