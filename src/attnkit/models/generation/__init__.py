"""Generation, in one place for every generating model (the language model and the translator).

- :mod:`~attnkit.models.generation.sampling`: choosing the next token from logits (greedy, temperature,
  top-k, top-p, min-p, repetition penalty) and left-padding prompts.
- :mod:`~attnkit.models.generation.search`: greedy decoding and beam search (with a length penalty),
  written once over a :class:`Decoding` (next-token logits, append, reorder rows) that each family
  implements (:meth:`attnkit.models.LanguageModel.decoding`, :meth:`attnkit.models.Seq2SeqTransformer.decoding`).
- :mod:`~attnkit.models.generation.causal`: the decoder-only decoding (key/value cache, left-padded
  batches, a sliding window past the context) and the sampling loop.
"""

from attnkit.models.generation.causal import (
    CausalDecoding,
    LastLogits,
    check_left_padding,
    check_stop_strings,
    sample,
    seen_tokens,
)
from attnkit.models.generation.sampling import (
    apply_repetition_penalty,
    check_sampling,
    left_pad,
    min_p_filter,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)
from attnkit.models.generation.search import (
    Decodable,
    Decoding,
    Hypotheses,
    beam_search,
    check_beam_size,
    check_max_len,
    greedy_decode,
    length_normalized,
    log_probs,
    run_beam_search,
    run_greedy,
)

__all__ = [
    "CausalDecoding",
    "Decodable",
    "Decoding",
    "Hypotheses",
    "LastLogits",
    "apply_repetition_penalty",
    "beam_search",
    "check_beam_size",
    "check_left_padding",
    "check_max_len",
    "check_sampling",
    "check_stop_strings",
    "greedy_decode",
    "left_pad",
    "length_normalized",
    "log_probs",
    "min_p_filter",
    "run_beam_search",
    "run_greedy",
    "sample",
    "sample_next_token",
    "seen_tokens",
    "top_k_filter",
    "top_p_filter",
]
