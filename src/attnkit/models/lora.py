"""LoRA adapters on attnkit models, with `peft <https://huggingface.co/docs/peft>`_.

:func:`apply_lora` freezes a model and wraps the ``nn.Linear`` layers of its attention and
feed-forward blocks in peft's LoRA layers (``W x + (alpha / rank) · B A x``, with ``B`` zero at
the start, so the wrapped model first computes exactly what the base did). Only the adapters
(and the modules named in ``train_modules``, e.g. a new classification head) are trained.
:func:`merge_lora` folds the adapters into the weights and unwraps the layers: a plain attnkit
model again, loadable without peft.

Targets name roles, not module paths, so they fit every attnkit model:

- ``"qkv"``: the query/key/value projection of every self-attention layer. attnkit fuses the three
  into one ``in_proj`` (``[3·H·hd, D]``); its adapter is one rank-``rank`` update of the fused
  matrix (what peft can wrap: it adapts whole ``nn.Linear`` modules). Models with separate
  ``q_proj``/``k_proj``/``v_proj`` get one adapter each.
- ``"out"``: the attention output projection ``out_proj``.
- ``"ffn"``: the feed-forward layers (``linear1``, ``linear2``; SwiGLU's gate and up projections
  are fused in ``linear1``).

Cross-attention computes keys and values with a slice of its fused weight (not by calling the
module), which an adapter would silently miss: models with cross-attention are refused for ``"qkv"``.

peft is an optional dependency (``pip install 'attnkit[lora]'``), imported only when a model is
wrapped or merged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, field_validator, model_validator
from torch import Tensor, nn

from attnkit.models.config import StrictModel
from attnkit.nn import FeedForward, MultiHeadAttention

__all__ = [
    "LORA_TARGETS",
    "LoraConfig",
    "LoraFineTuning",
    "apply_lora",
    "base_fingerprint",
    "base_state_dict",
    "is_lora",
    "load_base_state_dict",
    "lora_state_keys",
    "lora_target_modules",
    "merge_lora",
    "trainable_share",
]

Target = Literal["qkv", "out", "ffn"]
LORA_TARGETS: tuple[str, ...] = ("qkv", "out", "ffn")
_BASE = ".base_layer"  # peft keeps the wrapped layer under this name
_ADAPTER_PARTS = (".lora_A.", ".lora_B.", ".lora_embedding_A.", ".lora_embedding_B.", ".lora_magnitude_vector.")


class LoraConfig(StrictModel):
    """LoRA adapters (``model.lora`` of the ``lm`` and ``classify`` tasks)."""

    rank: int = Field(8, gt=0, description="rank r of each adapter (B A, with A [r, in] and B [out, r])")
    alpha: float = Field(16.0, gt=0.0, description="the update is scaled by alpha / rank")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapters' input (training only)")
    targets: list[Target] = Field(
        ["qkv", "out"],
        min_length=1,
        description="layers that get adapters: 'qkv' (the fused query/key/value projection), 'out' (attention "
        "output), 'ffn' (feed-forward layers)",
    )
    train_modules: list[str] = Field(
        [],
        description="modules trained in full besides the adapters (paths in the model, e.g. 'head'); "
        "the classify task adds its new head itself",
    )

    @field_validator("targets")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"targets lists a layer twice: {value}")
        return value


class LoraFineTuning(StrictModel):
    """A task's ``model.lora`` section, for model configs that also have ``init`` (the pretrained base).

    ``lora`` without ``init`` is refused here, unless the config sets ``lora_checks_init = False``: a task
    that always fine-tunes a base (sft, whose default is LoRA) refuses a missing ``init`` itself, so that its
    default config stays valid for printing and describing."""

    lora_checks_init: ClassVar[bool] = True
    lora: LoraConfig | None = Field(
        None, description="train LoRA adapters on the frozen model.init instead of every weight (needs peft)"
    )

    @model_validator(mode="after")
    def _check_lora_init(self) -> LoraFineTuning:
        if self.lora_checks_init and self.lora is not None and not getattr(self, "init", None):
            raise ValueError("model.lora trains adapters on a pretrained base: set model.init=PATH (or --init PATH)")
        return self


def lora_target_modules(model: nn.Module, targets: Iterable[str]) -> list[str]:
    """Paths of the ``nn.Linear`` modules of ``model`` that ``targets`` (see :data:`LORA_TARGETS`) name."""
    targets = set(targets)
    unknown = targets - set(LORA_TARGETS)
    if unknown:
        raise ValueError(f"unknown LoRA targets {sorted(unknown)}; choose among {list(LORA_TARGETS)}")
    names: list[str] = []
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        if isinstance(module, MultiHeadAttention):
            if "qkv" in targets and path.rsplit(".", 1)[-1] == "cross_attn":
                raise ValueError(
                    f"{path}: LoRA cannot adapt a cross-attention's fused projection (its keys and values use a "
                    "slice of the weight, which an adapter would miss); leave 'qkv' out of the targets"
                )
            for name, child in module.named_children():
                role = "out" if name == "out_proj" else "qkv"
                if isinstance(child, nn.Linear) and role in targets:
                    names.append(prefix + name)
        elif isinstance(module, FeedForward) and "ffn" in targets:
            names += [prefix + name for name, child in module.named_children() if isinstance(child, nn.Linear)]
    return names


def _peft() -> Any:
    try:
        import peft
    except ImportError as err:
        raise ImportError(f"LoRA needs peft: pip install 'attnkit[lora]' ({err})") from err
    return peft


def apply_lora(model: nn.Module, config: LoraConfig | Mapping[str, Any]) -> nn.Module:
    """Freeze ``model`` and wrap its target layers in LoRA adapters (in place); returns ``model``.

    Afterwards only the adapters and the parameters of ``config.train_modules`` require gradients.
    The adapters start as a zero update (peft's default: ``A`` Kaiming-uniform, ``B`` zeros), so the
    model's outputs are unchanged until it is trained.
    """
    cfg = config if isinstance(config, LoraConfig) else LoraConfig.model_validate(config)
    if is_lora(model):
        raise ValueError(f"{type(model).__name__} already has LoRA adapters; merge_lora() it first")
    names = lora_target_modules(model, cfg.targets)
    if not names:
        raise ValueError(f"{type(model).__name__} has no layers for the LoRA targets {cfg.targets}")
    modules = dict(model.named_modules())
    missing = [m for m in cfg.train_modules if m not in modules or not m]
    if missing:
        top = [n for n in modules if n and "." not in n]
        raise ValueError(f"train_modules {missing} are not modules of {type(model).__name__}; its modules: {top}")
    peft = _peft()
    peft_config = peft.LoraConfig(
        r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=names, bias="none"
    )
    peft.inject_adapter_in_model(peft_config, model)
    for p in model.parameters():  # peft freezes the base; make sure of it whatever the version does
        p.requires_grad_(False)
    for name, p in model.named_parameters():
        if any(part in name for part in _ADAPTER_PARTS):
            p.requires_grad_(True)
    for name in cfg.train_modules:
        modules[name].requires_grad_(True)
    return model


def is_lora(model: nn.Module) -> bool:
    """Whether ``model`` holds LoRA layers (unmerged)."""
    return any(_ADAPTER_PARTS[0] in f"{name}." for name, _ in model.named_modules())


def lora_state_keys(model: nn.Module) -> list[str]:
    """The state-dict keys a LoRA checkpoint keeps: the trainable tensors (adapters and ``train_modules``)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def _plain(key: str) -> str:
    return key.replace(_BASE + ".", ".")


def _is_adapter(key: str) -> bool:
    return any(part in f".{key}" for part in _ADAPTER_PARTS)


def base_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The frozen tensors of ``model`` under their plain (unwrapped) names: the LoRA base.

    Adapters and ``train_modules`` are left out; a model without adapters is all base (its whole
    state dict).
    """
    trained = set(lora_state_keys(model)) if is_lora(model) else set()
    return {
        _plain(k): v for k, v in model.state_dict(keep_vars=True).items() if k not in trained and not _is_adapter(k)
    }


def base_fingerprint(model: nn.Module) -> str:
    """SHA-256 of the base tensors (:func:`base_state_dict`: names, dtypes, shapes and bytes), hex."""
    digest = hashlib.sha256()
    for name, tensor in sorted(base_state_dict(model).items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def load_base_state_dict(model: nn.Module, state: Mapping[str, Tensor], *, source: str = "the base model") -> None:
    """Load plain (unwrapped) weights ``state`` into ``model``, whether or not it has LoRA layers.

    Every base tensor of ``model`` must be in ``state`` and nothing else; adapters and
    ``train_modules`` present in ``model`` keep their values. A mismatch is a ``ValueError`` naming
    the tensors.
    """
    own = model.state_dict()
    plain_to_own = {_plain(k): k for k in own if not _is_adapter(k)}
    unexpected = sorted(set(state) - set(plain_to_own))
    missing = sorted(set(plain_to_own) - set(state))
    if unexpected or missing:
        raise ValueError(
            f"{source} does not fit {type(model).__name__}: missing {missing[:6]}, unexpected {unexpected[:6]}"
        )
    try:
        model.load_state_dict({plain_to_own[k]: v for k, v in state.items()}, strict=False)
    except RuntimeError as err:
        raise ValueError(f"{source} does not fit {type(model).__name__}: {err}") from None


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA adapter into its layer's weight (``W + alpha/rank · B A``) and unwrap the
    layers (in place); returns ``model``, now a plain attnkit model with the base's state-dict names.
    A model without adapters is returned unchanged."""
    if not is_lora(model):
        return model
    peft = _peft()
    layers = [(path, m) for path, m in model.named_modules() if isinstance(m, peft.tuners.tuners_utils.BaseTunerLayer)]
    for path, layer in layers:
        layer.merge(safe_merge=True)
        parent_path, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, child, layer.get_base_layer())
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def trainable_share(model: nn.Module) -> tuple[int, int]:
    """``(trainable parameters, all parameters)`` of ``model`` (a tied weight counted once)."""
    params = list(model.parameters())  # nn.Module.parameters() yields a shared tensor once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
