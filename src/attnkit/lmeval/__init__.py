"""attnkit's language models in EleutherAI's lm-evaluation-harness (``lm_eval``, ``pip install attnkit[eval]``).

Importing this package registers :class:`AttnkitLM` with lm_eval's model registry as ``"attnkit"``, so
that lm_eval's own entry points can name it. lm_eval 0.4 has no plugin mechanism that would import
it by itself (its model registry takes no entry points), so its command line is started through
attnkit, which imports the adapter first::

    python -m attnkit.lmeval run --model attnkit --model_args pretrained=MODEL_FOLDER --tasks hellaswag

and from Python ``lm_eval.simple_evaluate(model="attnkit", model_args={"pretrained": folder}, ...)``
works once ``attnkit.lmeval`` is imported. ``attnkit eval RUN --tasks ...`` (and
:func:`attnkit.api.evaluate_harness`) does all of this for any RUN.
"""

from __future__ import annotations

try:
    import lm_eval.models  # noqa: F401  (lm_eval's own models first: its registry imports them only while empty)
    from lm_eval.api.registry import model_registry
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(f"attnkit.lmeval needs lm-evaluation-harness ({err}): pip install 'attnkit[eval]'") from err

from attnkit.lmeval.model import GENERATION_OPTIONS, MAX_GEN_TOKS_ALIASES, AttnkitLM

__all__ = ["GENERATION_OPTIONS", "MAX_GEN_TOKS_ALIASES", "MODEL_NAME", "AttnkitLM"]

MODEL_NAME = "attnkit"
"""The name lm_eval knows :class:`AttnkitLM` by (``--model attnkit``)."""

if model_registry.get(MODEL_NAME, None) is not AttnkitLM:
    model_registry.register(MODEL_NAME)(AttnkitLM)
