"""LoRA runs' checkpoints: only the trained tensors, plus a reference to the frozen base.

A run whose task config has ``model.lora`` trains adapters on a frozen base model (``model.init``).
Its checkpoints' ``state_dict`` keeps only the trainable tensors (the adapters, and modules trained
in full such as a new classification head); ``checkpoint["lora_base"]`` records where the base came
from (``init``: the ``model.init`` path) and the SHA-256 of its tensors
(:func:`attnkit.models.lora.base_fingerprint`). Loading such a checkpoint (resuming, testing, or
:func:`~attnkit.training.runner.load_run`) first loads the base into the module again (the task's
``init_weights``), checks its fingerprint (a changed base is a clear error, never a silently
different model) and then completes the state dict with the base's tensors, so that Lightning's
strict loading applies unchanged.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from attnkit.errors import CheckpointError
from attnkit.models.lora import base_fingerprint, is_lora, lora_state_keys

__all__ = ["LORA_BASE_KEY", "keep_trained_tensors", "restore_base_tensors"]

LORA_BASE_KEY = "lora_base"


def keep_trained_tensors(
    checkpoint: dict[str, Any], model: nn.Module, prefix: str, base: dict[str, str | None]
) -> None:
    """Strip ``checkpoint["state_dict"]`` down to the trained tensors of ``model`` (its keys start with
    ``prefix``) and add the base reference ``base`` (``{"init": path, "sha256": fingerprint}``)."""
    keep = {prefix + key for key in lora_state_keys(model)}
    checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in keep}
    checkpoint[LORA_BASE_KEY] = dict(base)


def restore_base_tensors(checkpoint: dict[str, Any], model: nn.Module, prefix: str, state: dict[str, Any]) -> str:
    """Check that the base now in ``model`` is the one ``checkpoint`` was trained on, then add the
    base tensors of ``state`` (the module's full state dict) to ``checkpoint["state_dict"]``.
    Returns the base fingerprint. A checkpoint without a base reference is left as it is."""
    reference = checkpoint.get(LORA_BASE_KEY)
    if reference is None:
        return ""
    if not is_lora(model):
        raise CheckpointError("this checkpoint holds LoRA adapters but the model it describes has no model.lora")
    fingerprint = base_fingerprint(model)
    if fingerprint != reference.get("sha256"):
        raise CheckpointError(
            f"the base model {reference.get('init')!r} changed since these LoRA adapters were trained on it "
            f"(its weights' SHA-256 is now {fingerprint[:12]}..., was {str(reference.get('sha256'))[:12]}...): "
            "restore the base it was trained on, or train the adapters again"
        )
    trained = checkpoint["state_dict"]
    checkpoint["state_dict"] = {k: v for k, v in state.items() if k.startswith(prefix) and k not in trained}
    checkpoint["state_dict"].update(trained)
    return fingerprint
