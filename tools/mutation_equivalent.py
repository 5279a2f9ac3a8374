"""The surviving mutants of tools/mutation.py's modules that change nothing observable, with the reason.

mutmut's names (module, function, number); the table of ``tools/mutation.py --table`` prints each reason.
"""

from __future__ import annotations

# Surviving mutants that change nothing observable, with the reason (mutmut's names: module, function, number).
EQUIVALENT: dict[str, str] = {
    "attnkit.nn.masks.x__broadcastable__mutmut_2": "lengths always match: callers pass 4-D attention masks and key "
    "padding masks whose dim() == 2 was checked first",
    "attnkit.nn.masks.x_band_mask__mutmut_38": "|distance| instead of distance for causal masks: distance >= 0 is "
    "already required there",
    "attnkit.nn.masks.x_prepare_attention__mutmut_43": "distance left int64: multiplying by the float slopes "
    "promotes it to their dtype anyway",
    "attnkit.nn.masks.x_positions_from_padding_mask__mutmut_4": "cumsum over dim 1 is dim -1 of the documented "
    "2-D [B, T] padding mask",
}
_A = "attnkit.nn.attention."
_MHA, _KV = _A + "xǁMultiHeadAttentionǁ", _A + "xǁKVCacheǁ"
_FOUR_D = "index 2 is index -2 of the documented 4-D [B, H, T, d] key/value tensors"
_NO_BIAS = "the dtype only matters for an additive (ALiBi) mask, which this call never makes"
_CAPACITY = "the cache's buffer size only (first capacity, growth factor, growing one step early): same values"
EQUIVALENT |= {
    _A + "x_attend__mutmut_116": "dropout with p = 0 is the identity",
    _A + "x_attend__mutmut_121": "dropout with p = 0 is the identity",
    _A + "x_attend__mutmut_128": "probs have v's dtype outside autocast; under autocast matmul casts both operands",
    _A + "x_scaled_dot_product_attention__mutmut_49": "ok = None is as false as ok = False",
    _A + "x_scaled_dot_product_attention__mutmut_60": _NO_BIAS,
    _A + "x_scaled_dot_product_attention__mutmut_67": _NO_BIAS,
    _MHA + "forward__mutmut_241": _NO_BIAS,
    _MHA + "forward__mutmut_248": _NO_BIAS,
    _MHA + "forward__mutmut_52": "_sizes[1] == _sizes[2] (both the key/value width)",
    _MHA + "forward__mutmut_193": "rotary positions shifted by one without a cache: RoPE attention depends only on "
    "relative positions",
    _MHA + "forward__mutmut_217": _FOUR_D,
    _MHA + "__init____mutmut_20": "range one longer: embed_dim + 1 never divides embed_dim",
    _MHA + "__init____mutmut_49": "range one longer: num_heads + 1 never divides num_heads",
    _MHA + "reset_parameters__mutmut_4": "split's default dim is 0",
    _A + "x__grow__mutmut_7": _FOUR_D,
    _KV + "set__mutmut_2": _FOUR_D,
    _KV + "reorder__mutmut_1": "keys and values are always set together",
    _KV + "append__mutmut_28": "keys and values are always set together",
    **{_KV + f"append__mutmut_{i}": _FOUR_D for i in (2, 14, 24, 45, 55, 61, 70)},
    **{_KV + f"append__mutmut_{i}": _CAPACITY for i in (37, 38, 60, 69)},
}
_P = "attnkit.nn.positional."
_INT_RANGE = "an integer arange times a float gives the same float32 values"
EQUIVALENT |= {
    **{_P + f"x_sinusoidal_encoding__mutmut_{i}": _INT_RANGE for i in (5, 8, 17, 22)},
    **{_P + f"x_rope_inv_freq__mutmut_{i}": "an arange of ints is int64 already" for i in (11, 16)},
    _P + "xǁRotaryEmbeddingǁ__init____mutmut_47": "persistent=None is as false as persistent=False",
    _P + "xǁSinusoidalPositionalEncodingǁ__init____mutmut_7": "persistent=None is as false as persistent=False",
    _P + "xǁRotaryEmbeddingǁcos_sin__mutmut_2": "recomputing the frequencies without scaling gives the same ones",
    _P + "xǁRotaryEmbeddingǁcos_sin__mutmut_10": "at seq_len == original, rope_inv_freq leaves the frequencies as "
    "they are",
    _P + "xǁRotaryEmbeddingǁforward__mutmut_20": "apply_rotary casts cos and sin to x's dtype anyway",
    _P + "xǁRotaryEmbeddingǁforward__mutmut_22": "apply_rotary casts cos and sin to x's dtype anyway",
    _P + "xǁLearnedPositionalEncodingǁforward__mutmut_16": "no positions: end 1 instead of 0 is still within max_len",
    _P + "xǁSinusoidalPositionalEncodingǁforward__mutmut_16": "a table one row longer than needed: the same rows",
    _P + "xǁSinusoidalPositionalEncodingǁforward__mutmut_17": "no positions: a one-row table, indexed by none",
}
_GEN = "attnkit.models.generation.sampling.x_"
_INF = 'float("-INF") is float("-inf")'
EQUIVALENT |= {
    **{_GEN + f"{f}__mutmut_{i}": _INF for f, i in (("top_k_filter", 22), ("top_p_filter", 39), ("min_p_filter", 23))},
    **{_GEN + f"sample_next_token__mutmut_{i}": "dim 1 is dim -1 of its [B, V] logits" for i in (17, 41, 51)},
    _GEN + "top_k_filter__mutmut_10": "topk's default dim is -1",
    _GEN + "top_p_filter__mutmut_8": "sort's default dim is -1",
    _GEN + "top_k_filter__mutmut_1": "k equal to the vocabulary keeps every logit either way",
    _GEN + "min_p_filter__mutmut_1": "min_p = 0 drops no probability (none is below 0)",
    _GEN + "apply_repetition_penalty__mutmut_10": "a zero logit times or divided by the penalty is zero",
    **{_GEN + f"left_pad__mutmut_{i}": "token ids (ints) make int64 tensors by default" for i in (4, 6, 23, 26)},
}
_G = "attnkit.data.splits.x_group_split__mutmut_"
_SAME_GROUPS = "groups numbered otherwise (ranks of a list, float ranks, np.unique of strings): the same partition"
_SORT = "ties ordered by numpy's default sort instead of the stable one: still largest first, deterministic in seed"
EQUIVALENT |= {
    **{_G + str(i): _SAME_GROUPS for i in (3, 4, 12, 16)},
    **{_G + str(i): "a fraction of 1 or more is still refused, by the sum's check" for i in (30, 31)},
    **{_G + str(i): "labels of zeros as floats: np.unique numbers them the same" for i in (40, 42)},
    **{_G + str(i): _SORT for i in (114, 116, 121)},
    **{_G + str(i): "part numbers as floats compare equal to the ints" for i in (128, 130)},
    _G + "76": "an extra class column with no examples and a target of 0 changes no growth",
    _G + "85": "counts and targets all doubled: every growth is 4 times larger, the same argmin",
}

_S = "attnkit.tuning.storage.x_"
_UNREACHABLE = "attempt RACE_RETRIES returns or raises: a later attempt and the code after the loop are never reached"
EQUIVALENT |= {
    **{
        _S + f"_check_url__mutmut_{i}": "the folder of an empty or :memory: SQLite database is '.', which exists"
        for i in (13, 14, 15)
    },
    **{_S + f"_postgres_driver__mutmut_{i}": "hide_password=None is as false as hide_password=False" for i in (12, 21)},
    **{_S + f"open_storage__mutmut_{i}": _UNREACHABLE for i in (8, 89, 90, 91)},
    _S + "prepare_storage__mutmut_6": "check_version=None is as false as check_version=False",
    _S + "prepare_storage__mutmut_9": "open_storage's create defaults to True",
}

_C = "attnkit.data.cache.x"
_W, _ROWS, _TEXTS, _TC = _C + "ǁCacheWriterǁ", _C + "ǁCachedRowsǁ", _C + "ǁCachedTextsǁ", _C + "ǁTokenCacheǁ"
_INT64 = "Python ints (and the lengths given) make int64 arrays by default, and _offsets writes int64 anyway"
_READ_SIZE = "the bytes read in other chunks (or at once, or buffered): the same hash"
_UTF8 = "codec names are case-insensitive: UTF-8 is utf-8"
_IN_MEMORY = "offsets read into memory instead of memory-mapped: the same values (memory-mapping is promised for "
"tokens and arrays only)"
_CHECKED = "only another process's entry is opened with verify: it was checked whole by the open just before"
EQUIVALENT |= {
    **{_C + f"_content_digest__mutmut_{i}": _READ_SIZE for i in (21, 23, 24)},
    **{
        _C + f"_content_digest__mutmut_{i}": "another memo file name, still one per (path, size, mtime)" for i in (8, 9)
    },
    **{_C + f"_file_hash__mutmut_{i}": _READ_SIZE for i in (8, 11)},
    _C + "_open_or_build__mutmut_20": "ours = None is as false as ours = False",
    **{_C + f"_open_or_build__mutmut_{i}": _CHECKED for i in (21, 46)},
    **{
        _C + f"_reuse_entry__mutmut_{i}": "the manifest is written with sorted keys (write_json_atomic): its items "
        "dump the same sorted or not"
        for i in (18, 20, 22)
    },
    **{_W + f"add__mutmut_{i}": "astype's copy flag: the same bytes written" for i in (11, 13, 14)},
    **{_W + f"add__mutmut_{i}": _INT64 for i in (17, 19)},
    **{
        _W + f"add_rows__mutmut_{i}": "fromiter's default float64 lengths or ids are cast back (to int64, to the "
        "token dtype) by add: the same bytes"
        for i in (3, 14)
    },
    **{_W + f"add_rows__mutmut_{i}": "fromiter's count only preallocates: the same array" for i in (7, 18)},
    **{_W + f"finish__mutmut_{i}": _INT64 for i in (7, 9, 26, 28)},
    _W + "add_texts__mutmut_12": _UTF8,
    _TEXTS + "__iter____mutmut_16": _UTF8,
    _TEXTS + "_get__mutmut_14": _UTF8,
    **{
        f"{cls}{fn}__mutmut_{i}": _IN_MEMORY
        for cls, fn, i in (
            (_ROWS, "__init__", 5),
            (_ROWS, "__init__", 7),
            (_ROWS, "__setstate__", 4),
            (_ROWS, "__setstate__", 6),
            (_TEXTS, "__init__", 4),
            (_TEXTS, "__init__", 6),
            (_TEXTS, "__setstate__", 4),
            (_TEXTS, "__setstate__", 6),
            (_TC, "offsets", 2),
            (_TC, "offsets", 4),
        )
    },
    _C + "ǁLazySequenceǁ_check__mutmut_8": "with no items every index is refused before the modulo",
    _TC + "open__mutmut_27": 'problem = "" is as false as problem = None',
}
_E = "attnkit.serve.engine.xǁEngineǁ"
_EMPTIED = "an empty batch's mask and pending tokens are replaced whole by the next prefill's (the cache is None)"
EQUIVALENT |= {
    **{_E + f"_fail_all__mutmut_{i}": _EMPTIED + "; stats' width is 0 either way" for i in (6, 8, 9)},
    _E + "_step__mutmut_57": "the greedy argmax recomputed for each greedy request: the same tokens",
    _E + "_step__mutmut_59": "dim 1 is dim -1 of the step's [B, V] logits",
}
# check_sampling moved from sampling.py to options.py (its penalty default was sampling's check_sampling__mutmut_1).
EQUIVALENT["attnkit.models.generation.options.x_check_sampling__mutmut_2"] = (
    "the default repetition penalty, 1 or 2, is valid either way (a penalty has no upper bound)"
)
EQUIVALENT["attnkit.training.preemption.xǁPreemptionCheckpointǁ__init____mutmut_2"] = (
    "_sigusr1_received = None is as false as False (it is only tested for truth)"
)
_SFT = "attnkit.data.sft.encode."
_FALSE_PROMPT = "add_generation_prompt=None for False: templates test it for truth, and None is as false"
EQUIVALENT |= {
    _SFT + "x__common_start__mutmut_12": "another halving point: with same < most, (same + most + 2) // 2 <= most "
    "still, and the loop ends at the same longest common beginning",
    _SFT + "x_assistant_spans__mutmut_15": _FALSE_PROMPT,
    _SFT + "x_assistant_spans__mutmut_56": _FALSE_PROMPT,
    _SFT + "x_encode_conversation__mutmut_8": _FALSE_PROMPT,
    _SFT + "x_assistant_spans__mutmut_29": "add_generation_prompt=True is ChatTemplate.render's default",
    **{
        f"{_SFT}x_collate_examples__mutmut_{n}": "torch.full with an int fill value is int64 without a dtype"
        for n in (7, 10, 14, 17)
    },
}

_LCE = "attnkit.nn.losses.xǁ_LinearCrossEntropyǁ"
_LAST_DIM = "dim 1 for -1 (or unsqueeze(1) of a 1-D tensor): the chunk's logits are 2-D [rows, V]"
_AUTOGRAD_CAST = "autograd casts a returned gradient to its input's dtype (.to(None) keeps it float32)"
_UNUSED_GRAD = "a gradient returned for an input that does not require one (an empty one): autograd drops it"
_PROMOTED = "the weights are float32 by type promotion anyway (bool / float32, float32 / a 0-dim int64)"
EQUIVALENT |= {
    **{_LCE + f"backward__mutmut_{n}": _AUTOGRAD_CAST for n in (7, 11, 16)},
    **{_LCE + f"backward__mutmut_{n}": _UNUSED_GRAD for n in (5, 10)},
    **{_LCE + f"forward__mutmut_{n}": _LAST_DIM for n in (58, 124, 132, 134, 138, 146, 148, 162, 170)},
    **{_LCE + f"forward__mutmut_{n}": _PROMOTED for n in (54, 55)},
    _LCE + "forward__mutmut_4": "needs_input_grad[:4] adds the targets' flag, always False (integer targets)",
    _LCE + "forward__mutmut_176": "grad_hidden's rows converted to weight's dtype: assigning them into grad_hidden "
    "(hidden's dtype) converts them the same way",
    _LCE + "forward__mutmut_187": "None saved instead of an empty stand-in for a gradient not wanted: backward "
    "reads only the wanted ones (and hooks on saved tensors see neither's bytes)",
    _LCE + "forward__mutmut_193": "the bias's dtype not noted: " + _AUTOGRAD_CAST,
    _LCE + "forward__mutmut_214": 'float("NAN") is float("nan")',
}

_WD = "attnkit.training.watchdog.xǁStopWatchdogǁ"
_SET_BY_START = "only read by stop() after start() set it (stop() returns at once while _thread is None)"
_NOT_A_SIGNAL = "None for 0: the loop tests signum for truth only"
EQUIVALENT |= {
    **{_WD + f"__init____mutmut_{n}": _SET_BY_START for n in (13, 14, 15, 16)},
    **{_WD + f"_watch__mutmut_{n}": _NOT_A_SIGNAL for n in (4, 14)},
    _WD + "_watch__mutmut_9": "65 bytes read at a time instead of 64: a watched signal among them is found the same",
    _WD + "_watch__mutmut_24": ">= for > against a monotonic clock's deadline: the same within a clock tick",
    _WD + "start__mutmut_14": "warn_on_full_buffer=None: set_wakeup_fd takes the flag's truth, and None is as "
    "false as False",
    _WD + "stop__mutmut_8": "another wake-up payload: no byte of it is a signal number (88 is none), so the thread "
    "wakes and ends the same",
}

# Issue 34: the logits processors and the Sampler; SamplingParams.
_PR = "attnkit.models.generation.processors."
_SA = _PR + "xǁSamplerǁ"
_ROWS_2D = "dim 1 (or the default -1) for dim -1: the logits are [B, V] (Sampler.choose checks it)"
_INF_UPPER = 'float("-INF") is float("-inf")'
_DEFAULT_DTYPE = "no dtype: Python ints make int64 and floats float32 tensors anyway (the values met float32 logits)"
_GREEDY_WARPED = (
    "greedy rows warped too (or warpers run with the logits processors): a greedy row's token is the argmax before "
    "any warper, its warped row is never drawn from, and a neutral warper leaves a row bit for bit"
)
EQUIVALENT |= {
    **{
        _PR + f"x_{fn}__mutmut_{n}": _ROWS_2D
        for fn, ns in (
            ("min_p_rows", (3, 12)),
            ("top_k_rows", (2, 22, 23, 25)),
            ("top_p_rows", (7, 10, 16, 21, 35)),
            ("typical_p_rows", (3, 12, 19, 22, 31, 33, 35, 44, 48, 58, 69)),
        )
        for n in ns
    },
    **{_SA + f"choose__mutmut_{n}": _ROWS_2D for n in (15, 24, 35, 51, 68, 70, 84, 85)},
    **{
        _PR + f"x_{fn}__mutmut_{n}": _INF_UPPER
        for fn, n in (("min_p_rows", 21), ("top_k_rows", 36), ("top_p_rows", 43), ("typical_p_rows", 77))
    },
    **{_PR + f"xǁLogitBiasǁ__init____mutmut_{n}": _DEFAULT_DTYPE for n in (11, 14, 22, 25)},
    **{_PR + f"xǁProcessorǁ__init____mutmut_{n}": _DEFAULT_DTYPE for n in (7, 10)},
    **{_SA + f"add__mutmut_{n}": _DEFAULT_DTYPE for n in (37, 39, 95, 99, 105, 109)},
    **{_SA + f"_build__mutmut_{n}": _GREEDY_WARPED for n in (11, 12, 14, 24, 25)},
    _PR + "x_top_k_rows__mutmut_5": "no lower clamp: top_k >= 1 is checked by SamplingParams (and the neutral is huge)",
    _PR + "x_repetition_rows__mutmut_9": "<= for <: a zero logit times or divided by the penalty is zero",
    _PR + "x__seen__mutmut_35": "= for |=: the value assigned is the right one (a real id 0 anywhere in the row)",
    _SA + "__init____mutmut_10": "draw groups are rebuilt after every add/keep/extend; with no rows, none to draw",
    _SA + "add__mutmut_14": "with no rows, a prompt width of 1 instead of 0: no row to fill",
    _SA + "keep__mutmut_2": "a tensor index iterated: 0-d tensors index the list and make the same index tensor",
    _SA + "choose__mutmut_30": "no warp-stage processor reads the history",
}
_PA = "attnkit.models.generation.params."
EQUIVALENT |= {
    **{
        _PA + f"x__field__mutmut_{n}": "_field runs at import (SamplingParams' class body), before mutmut switches a "
        "mutant on; broken by hand, test_sampling_params.py::test_the_fields_their_defaults_and_docs fails"
        for n in range(1, 7)
    },
    _PA + "x__number__mutmut_6": "a non-finite number passed on fails the range check after it (nan compares "
    "false, inf is past every bound)",
}
EQUIVALENT |= {
    "attnkit.training.module.xǁTaskModuleǁon_before_optimizer_step__mutmut_17": 'reduce_op "SUM" for "sum": '
    "Lightning's reduce reads a name upper-cased (torch.distributed.ReduceOp.SUM either way)",
}
_LM = "attnkit.lmeval.model."
EQUIVALENT |= {
    _LM + "x__positive_int__mutmut_4": "1 for 0 where int() refuses the value: its text is then never '1' (the text "
    "check refuses it either way; int() reads every str, bytes or number that prints as '1')",
    _LM + "xǁAttnkitLMǁgeneration_settings__mutmut_36": "the EOS appended even when until has it: dict.fromkeys keeps "
    "the first of each, and an empty EOS is dropped (`if u`)",
    _LM + "xǁAttnkitLMǁgeneration_settings__mutmut_60": "_clamped = None for False (only tested for truth)",
}
EQUIVALENT |= {
    _E + "_clear__mutmut_5": _EMPTIED + " (stats reads only the mask)",
    _E + "_drop__mutmut_26": "`or` in an assertion for the type checker: the batch's cache and sampler are set and "
    "cleared together (_join, _clear), so both are set while rows remain",
}
_APP = "attnkit.serve.app.x_create_app__mutmut_"
EQUIVALENT |= {
    **{
        _APP + f"{n}": "the engine's context not given (None or left out): Engine then takes the model's "
        "config.max_len, which is what Pretrained.context is"
        for n in (26, 32)
    },
    _APP + "187": '"UTF-8" for "utf-8": codec names are case-insensitive',
    **{
        _APP + f"{n}": "the Retry-After header's name in another case: HTTP header names are case-insensitive (the "
        "server sends them lower-cased anyway)"
        for n in (224, 225)
    },
}

_DIFF = "attnkit.models.diff.x__model_diff__mutmut_"
_ALL_HOOKS = "every hook point cached instead of the patterns alone: the patterns read are the same (only slower)"
EQUIVALENT |= {
    _DIFF + "129": "an assertion for the type checker: the loop ran once at least (an empty sequence list is refused)",
    _DIFF + "16": "the initial value is overwritten in the loop, which runs once at least",
    _DIFF + "18": "ids moved to no device instead of the model's: the same on the CPU the tests run on",
    **{_DIFF + str(i): _ALL_HOOKS for i in (59, 62, 66, 69)},
}
EQUIVALENT["attnkit.models.generation.batch.xǁContinuousBatchǁ_merge__mutmut_14"] = (
    "_cache and _sampler are set together (None both, or neither): `and` and `or` agree"
)
