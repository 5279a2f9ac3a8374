"""Hook points on every activation: read or replace any of them, TransformerLens' names.

Every attnkit block, stack and model holds :class:`HookPoint` modules, tiny identities placed on the
activations (the embeddings, the residual stream before, between and after the sublayers of each block,
each head's queries, keys, values, scores, pattern and output, the MLP's hidden layer and output, the
final norm). With no hook added a hook point returns its input at once: nothing is computed, nothing
kept. Names follow TransformerLens (:func:`hook_points`), e.g. ``blocks.3.attn.hook_pattern``.

* :func:`run_with_cache` runs a model and keeps the activations ``names`` picks (an :class:`ActivationCache`);
* ``with hooks(model, {name: fn}):`` adds hooks for the duration of a block (forward passes, generation);
  ``fn(activation, hook)`` returns ``None`` (read) or a tensor of the same shape (replace).

Per-head tensors are given in TransformerLens' layout: queries, keys, values and ``hook_z`` (each head's
output before ``out_proj``) ``[B, T, H, head_dim]``, scores and pattern ``[B, H, Tq, Tk]``. With a key/value
cache the hooks see the new positions only (keys ``Tk`` include the cached ones). Asking for scores or
pattern makes that attention layer compute them explicitly (the fused kernel keeps none); other hooks
leave the fused kernel on.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "ActivationCache",
    "HookFn",
    "HookPoint",
    "NameFilter",
    "embed_positions",
    "hook_points",
    "hooks",
    "pin_hook_points",
    "run_with_cache",
    "through_heads",
]

HookFn = Callable[[Tensor, "HookPoint"], Tensor | None]
"""``fn(activation, hook) -> None`` (only reads) or a tensor of the activation's shape (replaces it)."""

NameFilter = str | Sequence[str] | Callable[[str], bool] | None
"""Which hook points: a name, a glob (``"blocks.*.attn.hook_pattern"``), a list of those, a predicate on the
name, or ``None`` (every one)."""


class HookPoint(nn.Module):
    """An identity on one activation, where hooks can read or replace it.

    ``name`` is its TransformerLens name once :func:`hook_points` named it; ``fns`` the hooks it runs, in
    the order added (:meth:`add_hook`). With none the call returns its input unchanged and at once (it
    does not go through ``nn.Module``'s call machinery: add hooks here, not with ``register_forward_hook``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.name = ""
        self.fns: list[HookFn] = []

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x) if self.fns else x

    def forward(self, x: Tensor) -> Tensor:
        for fn in list(self.fns):
            out = fn(x, self)
            if out is not None:
                if not isinstance(out, Tensor) or out.shape != x.shape:
                    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                    raise ValueError(
                        f"the hook on {self.name or 'a hook point'} returned {got}; return None (to read) "
                        f"or a tensor of the activation's shape {tuple(x.shape)} (to replace it)"
                    )
                x = out
        return x

    def add_hook(self, fn: HookFn) -> Callable[[], None]:
        """Run ``fn`` on this activation from now on; returns the function that removes it."""
        if not callable(fn):
            raise TypeError(f"a hook must be callable as fn(activation, hook), got {type(fn).__name__}")
        self.fns.append(fn)

        def remove() -> None:
            if fn in self.fns:
                self.fns.remove(fn)

        return remove

    def extra_repr(self) -> str:
        return self.name


def pin_hook_points(root: nn.Module) -> None:
    """Make every hook point under ``root`` a plain instance attribute of its parent as well (still registered as
    a submodule, so the module tree names it): reading ``block.hook_resid_pre`` then skips ``nn.Module``'s
    ``__getattr__`` (about a microsecond each, a dozen per block and pass), so hook points cost nothing measurable."""
    for module in root.modules():
        for name, child in module.named_children():
            if isinstance(child, HookPoint):
                object.__setattr__(module, name, child)


def through_heads(point: HookPoint, x: Tensor) -> Tensor:
    """``x [B, H, T, d]`` through ``point`` in TransformerLens' layout ``[B, T, H, d]`` (free without hooks)."""
    if not point.fns:
        return x
    return point(x.transpose(1, 2)).transpose(1, 2)


def embed_positions(h: Tensor, add: Callable[[Tensor], Tensor], point: HookPoint) -> Tensor:
    """``add(h)``: the embeddings plus their position encoding; with hooks on ``point`` (``hook_pos_embed``)
    the encoding alone, ``add(0)``, goes through them first (the same sum when they change nothing)."""
    if not point.fns:
        return add(h)
    return h + point(add(torch.zeros_like(h)))


_LAYER = re.compile(r"^(?:(.*?)\.)?layers\.(\d+)\.(.*)$")
_SUBLAYER = {"self_attn": "attn", "ff": "mlp"}
_GLOB = re.compile(r"[*?[]")  # what makes a name filter a glob (fnmatch's special characters)


def _tl_names(paths: list[str]) -> list[str]:
    """Module paths of hook points -> TransformerLens names: a stack's ``layers.{i}`` are ``blocks.{i}``
    (``self_attn`` -> ``attn``, ``ff`` -> ``mlp``), its ``hook_norm`` is ``ln_final.hook_out``;
    with several stacks (encoder-decoder) each keeps its attribute as a prefix (``decoder.blocks.0...``)."""
    stacks: list[str] = []
    for path in paths:
        m = _LAYER.match(path)
        if m and (m.group(1) or "") not in stacks:
            stacks.append(m.group(1) or "")
    single = len(stacks) == 1
    root = stacks[0].rpartition(".")[0] if single else ""
    names = []
    for path in paths:
        m = _LAYER.match(path)
        stack = (m.group(1) or "") if m else path.rpartition(".")[0]
        prefix = "" if single or not stack else f"{stack}."
        if m:
            first, _, rest = m.group(3).partition(".")
            inner = f"{_SUBLAYER.get(first, first)}.{rest}" if rest else first
            names.append(f"{prefix}blocks.{m.group(2)}.{inner}")
        elif (stack in stacks and path.endswith(".hook_norm")) or path == "hook_norm":
            names.append(f"{prefix}ln_final.hook_out")
        elif root and path.startswith(root + "."):
            names.append(path[len(root) + 1 :])
        else:
            names.append(path)
    return names


def _matcher(names: NameFilter) -> Callable[[str], bool]:
    if names is None:
        return lambda name: True
    if callable(names):
        return names
    patterns = [names] if isinstance(names, str) else list(names)
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"names: expected hook names, globs or a predicate, got {type(p).__name__} {p!r}")
    exact = {p for p in patterns if not _GLOB.search(p)}  # plain names: a set lookup, not a glob match each
    globs = [p for p in patterns if p not in exact]
    return lambda name: name in exact or any(fnmatch.fnmatchcase(name, p) for p in globs)


def hook_points(model: nn.Module, names: NameFilter = None) -> dict[str, HookPoint]:
    """The hook points of ``model`` by TransformerLens name (in the order of the module tree), those
    ``names`` picks; each gets its ``name``. A name or glob that picks none is an error that lists them."""
    found = [(path, m) for path, m in model.named_modules() if isinstance(m, HookPoint)]
    if not found:
        raise ValueError(f"{type(model).__name__} has no hook points (attnkit models and nn blocks have them)")
    points: dict[str, HookPoint] = {}
    for name, (_, point) in zip(_tl_names([p for p, _ in found]), found):
        if point.name != name:  # named once (nn.Module's __setattr__ costs a microsecond or more a call)
            point.name = name
        points[name] = point
    keep = _matcher(names)
    if names is not None and not callable(names):
        for pattern in [names] if isinstance(names, str) else names:
            if pattern not in points and not any(fnmatch.fnmatchcase(n, pattern) for n in points):
                raise ValueError(f"no hook point is named {pattern!r}; {_some_names(points)}")
    return {name: point for name, point in points.items() if keep(name)}


def _some_names(points: Mapping[str, Any]) -> str:
    shown = [n for n in points if n.startswith(("hook_", "blocks.0.", "ln_final", "encoder.blocks.0."))]
    return f"the model's hook points include {', '.join(shown[:40])} (blocks.0 shown; one per block)"


@contextmanager
def hooks(
    model: nn.Module, fns: Mapping[str, HookFn] | Sequence[tuple[NameFilter, HookFn]]
) -> Iterator[dict[str, HookPoint]]:
    """Add hooks for the duration of the block: ``{name or glob: fn}`` or ``[(filter, fn), ...]``; every
    forward pass inside (generation included) runs them. Yields the hook points used; they are removed on
    exit, also after an error."""
    pairs = list(fns.items()) if isinstance(fns, Mapping) else list(fns)
    removers: list[Callable[[], None]] = []
    used: dict[str, HookPoint] = {}
    try:
        for names, fn in pairs:
            for name, point in hook_points(model, names).items():
                removers.append(point.add_hook(fn))
                used[name] = point
        yield used
    finally:
        for remove in reversed(removers):
            remove()


class ActivationCache(Mapping[str, Tensor]):
    """The activations of one run by hook name, in the order the pass reached them (detached unless
    ``grad``); ``logits``: what the model returned."""

    def __init__(self, activations: dict[str, Tensor], logits: Any) -> None:
        self._activations = activations
        self.logits = logits

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._activations[name]
        except KeyError:
            raise KeyError(f"{name!r} was not cached; {_some_names(self._activations)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._activations)

    def __len__(self) -> int:
        return len(self._activations)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} activations)"


def run_with_cache(
    model: nn.Module, *args: Any, names: NameFilter = None, grad: bool = False, **kwargs: Any
) -> ActivationCache:
    """``model(*args, **kwargs)`` once, keeping every activation ``names`` picks (all by default).

    Returns an :class:`ActivationCache`: ``cache["blocks.0.hook_resid_post"]``, ``cache.logits`` (the
    model's output). Without ``grad`` the pass runs under ``torch.no_grad()``. A hook point reached more than
    once in the pass (e.g. an encoder-decoder's decoder called per step) keeps its last value."""
    store: dict[str, Tensor] = {}

    def keep(x: Tensor, hook: HookPoint) -> None:
        store[hook.name] = x if grad else x.detach()

    points = hook_points(model, names)
    removers = [point.add_hook(keep) for point in points.values()]
    try:
        with torch.set_grad_enabled(grad):
            out = model(*args, **kwargs)
    finally:
        for remove in removers:
            remove()
    return ActivationCache(store, out)  # in the order the pass reached them
