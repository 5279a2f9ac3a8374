"""Reading weight files and mapping their tensors onto attnkit models, name by name.

Every tensor of the model must come from the file, every tensor of the file must be used (or be
one of the few a converter knows to leave out: buffers, task heads) and every shape must match;
otherwise :class:`CheckpointError` lists each offending tensor by its name in the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor, nn

from attnkit.errors import CheckpointError

__all__ = [
    "WEIGHT_FILES",
    "Rule",
    "convert_state_dict",
    "export_state_dict",
    "load_weights",
    "read_weights",
    "weight_names",
]

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_SHOWN = 8  # names listed per kind of problem


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """The tensors of one ``.safetensors`` file or a ``pytorch_model.bin`` (``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no weights file at {path}")
    if path.suffix == ".safetensors":
        try:
            return load_file(path)
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(
                f"cannot read {path}: not a valid safetensors file, truncated or corrupt ({err})"
            ) from None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt bytes fail anywhere in torch.load (UnicodeDecodeError, KeyError, ...)
        raise CheckpointError(
            f"cannot read {path}: truncated, corrupt or not a weights-only PyTorch file ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(v, Tensor) for v in data.values()):
        raise CheckpointError(f"{path} does not hold a state dict (a mapping of names to tensors)")
    return data


def load_weights(folder: str | Path) -> tuple[dict[str, Tensor], Path]:
    """The tensors saved in a model folder and the file they came from.

    Reads ``model.safetensors``, shards listed by ``model.safetensors.index.json``, or
    ``pytorch_model.bin``, in that order of preference.
    """
    folder = Path(folder)
    single = folder / "model.safetensors"
    if single.is_file():
        return read_weights(single), single
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{index} is not a valid index of safetensors shards ({err})") from None
        tensors: dict[str, Tensor] = {}
        for shard in shards:
            tensors.update(read_weights(folder / shard))
        return tensors, index
    pickled = folder / "pytorch_model.bin"
    if pickled.is_file():
        return read_weights(pickled), pickled
    raise CheckpointError(f"no weights in {folder}: expected one of {', '.join(WEIGHT_FILES)}")


def weight_names(folder: str | Path) -> set[str]:
    """The tensor names of :func:`load_weights`'s file, read cheaply (safetensors headers only)."""
    folder = Path(folder)
    single = folder / "model.safetensors"
    if single.is_file():
        try:
            with safe_open(single, "pt") as f:
                return set(f.keys())
        except (SafetensorError, OSError) as err:
            raise CheckpointError(
                f"cannot read {single}: not a valid safetensors file, truncated or corrupt ({err})"
            ) from None
    return set(load_weights(folder)[0])


@dataclass(frozen=True)
class Rule:
    """One tensor of the attnkit model, ``target``, made of ``sources`` of the file.

    Several sources are concatenated along dim 0 (BERT's query, key, value -> the fused
    ``in_proj``), in equal parts, or in the sizes ``split`` (grouped-query attention: fewer key and
    value rows than query rows); ``transpose`` turns GPT-2's ``Conv1D`` weights ``[in, out]`` into
    ``nn.Linear``'s ``[out, in]``. :func:`export_state_dict` applies the rules backwards.
    """

    target: str
    sources: tuple[str, ...]
    transpose: bool = False
    split: tuple[int, ...] | None = None


def _source_shapes(rule: Rule, target: torch.Size) -> list[tuple[int, ...]]:
    """The shape each source of ``rule`` must have for a target of shape ``target``."""
    n = len(rule.sources)
    sizes = list(rule.split) if rule.split is not None else [target[0] // n] * n if target else [0] * n
    shapes = []
    for size in sizes:
        shape = [size, *target[1:]] if n > 1 else list(target)
        shapes.append(tuple(reversed(shape)) if rule.transpose else tuple(shape))
    return shapes


def convert_state_dict(
    tensors: dict[str, Tensor],
    rules: Iterable[Rule],
    model: nn.Module,
    *,
    ignore: Callable[[str], bool] = lambda name: False,
    source: str = "the weights file",
) -> dict[str, Tensor]:
    """Map ``tensors`` (names as in the file) onto ``model``'s state dict with ``rules``.

    Raises :class:`CheckpointError` naming every missing, unexpected (not used by a rule and not
    ``ignore``-d) or mis-shaped tensor of the file.
    """
    expected = model.state_dict()
    out: dict[str, Tensor] = {}
    used: set[str] = set()
    missing: list[str] = []
    mismatched: list[str] = []
    for rule in rules:
        if rule.target not in expected:
            raise KeyError(f"conversion rule for {rule.target!r}, which {type(model).__name__} does not have")
        wants = _source_shapes(rule, expected[rule.target].shape)
        parts = []
        for name, want in zip(rule.sources, wants, strict=True):
            used.add(name)
            if name not in tensors:
                missing.append(name)
                continue
            tensor = tensors[name]
            if tuple(tensor.shape) != want:
                mismatched.append(f"{name}: shape {tuple(tensor.shape)} in the file, the config implies {want}")
                continue
            parts.append(tensor)
        if len(parts) == len(rule.sources):
            value = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
            out[rule.target] = value.t() if rule.transpose else value
    unexpected = sorted(k for k in tensors if k not in used and not ignore(k))
    uncovered = sorted(set(expected) - set(out) - {r.target for r in rules if set(r.sources) - set(tensors)})
    problems = []
    for title, names in (("missing", sorted(set(missing))), ("unexpected", unexpected), ("wrong shape", mismatched)):
        if names:
            shown = "; ".join(names[:_SHOWN]) + (f"; ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")
            problems.append(f"  {title} ({len(names)}): {shown}")
    if problems:
        raise CheckpointError(f"{source} does not match its config:\n" + "\n".join(problems))
    if uncovered:
        raise KeyError(f"no conversion rule for {uncovered[:_SHOWN]} of {type(model).__name__}")
    return out


def export_state_dict(state: dict[str, Tensor], rules: Iterable[Rule]) -> dict[str, Tensor]:
    """The file's tensors (names as in the file) made from an attnkit ``state`` dict: ``rules``
    (as for :func:`convert_state_dict`) applied backwards, fused tensors split into their sources.
    A source named by several rules (a tied output layer) is written once. Tensors are contiguous
    copies, ready for ``safetensors``."""
    out: dict[str, Tensor] = {}
    for rule in rules:
        value = state[rule.target]
        shapes = _source_shapes(rule, value.shape)
        rows = [shape[-1] if rule.transpose else shape[0] for shape in shapes]
        parts = value.split(rows, dim=0) if len(rule.sources) > 1 else (value,)
        for name, part in zip(rule.sources, parts, strict=True):
            out.setdefault(name, (part.t() if rule.transpose else part).detach().contiguous().clone())
    return out
