"""Generation, in one place for every generating model (the language model and the translator).

- :mod:`~attnkit.models.generation.options`: the one check of sampling options (temperature, seed, top-k/p,
  min-p, repetition penalty, token counts) that every entry point shares; :class:`SamplingError` names the option.
- :mod:`~attnkit.models.generation.params`: :class:`SamplingParams`, the one parameters type of every way of
  generating text (Python, the command line, ``chat``, ``serve``, ``explore``, ``lmeval``).
- :mod:`~attnkit.models.generation.processors`: one :class:`Processor` per sampling option, registered in
  :data:`PROCESSORS`, and :class:`Sampler`, the one batched next-token choice (every row its own parameters,
  log-probabilities).
- :mod:`~attnkit.models.generation.batch`: :class:`ContinuousBatch`, the continuous-batching decode loop (rows
  of many requests joining and leaving one batch between steps; the server's engine runs it), with its prefill
  (:mod:`~attnkit.models.generation.prefill`) and log-probabilities (:mod:`~attnkit.models.generation.logprobs`).
- :mod:`~attnkit.models.generation.prefix_cache`: :class:`PrefixCache`, the keys and values of prompt prefixes
  that later prompts starting the same way reuse (the server's ``--prefix-cache-mb``).
- :mod:`~attnkit.models.generation.sampling`: the filters with one value for every row, one row's choice
  (:func:`sample_next_token`), and left-padding prompts.
- :mod:`~attnkit.models.generation.search`: greedy decoding and beam search (with a length penalty),
  written once over a :class:`Decoding` (next-token logits, append, reorder rows) that each family
  implements (:meth:`attnkit.models.LanguageModel.decoding`, :meth:`attnkit.models.Seq2SeqTransformer.decoding`).
- :mod:`~attnkit.models.generation.causal`: the decoder-only decoding (key/value cache, left-padded
  batches, a sliding window past the context) and the sampling loop.
"""

from attnkit.models.generation.batch import BatchRow, ContinuousBatch, NewToken, Update
from attnkit.models.generation.causal import (
    CausalDecoding,
    LastLogits,
    check_left_padding,
    check_stop_strings,
    sample,
)
from attnkit.models.generation.logprobs import TokenLogprob
from attnkit.models.generation.options import (
    MAX_TOKENS,
    MIN_TEMPERATURE,
    SEED_END,
    SamplingError,
    check_max_tokens,
    check_min_p,
    check_repetition_penalty,
    check_sampling,
    check_seed,
    check_temperature,
    check_top_k,
    check_top_p,
)
from attnkit.models.generation.params import FIELDS, SamplingParams, field_doc
from attnkit.models.generation.prefill import BatchModel, BatchRequest
from attnkit.models.generation.prefix_cache import PrefixCache, PrefixHit
from attnkit.models.generation.processors import PROCESSORS, Choice, History, Processor, Sampler
from attnkit.models.generation.sampling import (
    apply_repetition_penalty,
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
    "FIELDS",
    "MAX_TOKENS",
    "MIN_TEMPERATURE",
    "PROCESSORS",
    "SEED_END",
    "BatchModel",
    "BatchRequest",
    "BatchRow",
    "CausalDecoding",
    "Choice",
    "ContinuousBatch",
    "Decodable",
    "Decoding",
    "History",
    "Hypotheses",
    "LastLogits",
    "NewToken",
    "PrefixCache",
    "PrefixHit",
    "Processor",
    "Sampler",
    "SamplingError",
    "SamplingParams",
    "TokenLogprob",
    "Update",
    "apply_repetition_penalty",
    "beam_search",
    "check_beam_size",
    "check_left_padding",
    "check_max_len",
    "check_max_tokens",
    "check_min_p",
    "check_repetition_penalty",
    "check_sampling",
    "check_seed",
    "check_stop_strings",
    "check_temperature",
    "check_top_k",
    "check_top_p",
    "field_doc",
    "greedy_decode",
    "left_pad",
    "length_normalized",
    "log_probs",
    "min_p_filter",
    "run_beam_search",
    "run_greedy",
    "sample",
    "sample_next_token",
    "top_k_filter",
    "top_p_filter",
]
