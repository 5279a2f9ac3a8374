"""The explorer's page: its files (shipped in the package, nothing fetched from elsewhere), the
self-contained HTML of one view, and :func:`explore`, the page inline in a notebook."""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["ASSETS", "ExploreView", "asset", "explore", "standalone_html"]

ASSETS = ("index.html", "explore.js", "interpret.js", "explore.css")  # interpret.js: served pages only


def asset(name: str) -> str:
    """The text of the page's file ``name`` (one of :data:`ASSETS`)."""
    if name not in ASSETS:
        raise ValueError(f"no explorer file {name!r}; there are {ASSETS}")
    return resources.files("attnkit.viz.explorer").joinpath("static", name).read_text(encoding="utf-8")


def _cut(page: str, name: str, inner: str) -> str:
    start, end = page.index(f"<!--{name}-->") + len(name) + 7, page.index(f"<!--/{name}-->")
    return page[:start] + inner + page[end:]


def standalone_html(payload: dict[str, Any], state: dict[str, Any] | None = None) -> str:
    """One HTML file showing ``payload`` (an :meth:`Explorer.view`) with its script, style and data inside:
    it opens offline, without a server. ``state``: the page's initial layer, head, position, view..."""
    data = {**payload, "state": {"text": payload.get("input", {}).get("text", ""), **(state or {})}}
    page = asset("index.html")
    page = _cut(page, "STYLE", f"<style>{asset('explore.css')}</style>")
    page = _cut(page, "SCRIPT", "<script>" + asset("explore.js").replace("</script", "<\\/script") + "</script>")
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return _cut(page, "DATA", f'<script id="explore-data" type="application/json">{blob}</script>')


class ExploreView:
    """The explorer page of one input, for a notebook (:meth:`_repr_html_`: the page in an ``iframe``, its
    data embedded; no server) or a file (:meth:`save`)."""

    def __init__(self, payload: dict[str, Any], state: dict[str, Any], height: int) -> None:
        self.payload = payload
        self.state = state
        self.height = height

    def html(self) -> str:
        """The self-contained page (:func:`standalone_html`)."""
        return standalone_html(self.payload, self.state)

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (an HTML file that opens offline); returns the path."""
        out = Path(path)
        out.write_text(self.html(), encoding="utf-8")
        return out

    def _repr_html_(self) -> str:
        return (
            f'<iframe class="attnkit-explore" srcdoc="{html.escape(self.html(), quote=True)}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #dde" title="attnkit explore"></iframe>'
        )


def explore(
    model: Any,
    text: str,
    *,
    layer: int = 0,
    head: int = 0,
    view: str = "head",
    steps: int = 0,
    temperature: float = 0.0,
    seed: int = 0,
    height: int = 640,
) -> ExploreView:
    """The explorer's views of ``text`` inline in Jupyter: the same page as ``attnkit explore``, with the data
    embedded (no server; to type other inputs, call it again or run ``attnkit explore``).

    ``model``: a run folder or checkpoint, an attnkit or Hugging Face model folder, a loaded
    :class:`~attnkit.interop.Pretrained` or :class:`~attnkit.tasks.LoadedRun`, or an explorer of
    :func:`~attnkit.viz.explorer.load_explorer` (loads once for many calls). ``layer`` / ``head``
    (from 0) and ``view`` (``"head"``, ``"matrix"`` or ``"model"``) choose what shows first; a
    decoder generates ``steps`` tokens after ``text`` (greedy at ``temperature=0``, else sampled with
    ``seed``). ``height``: of the frame, in pixels."""
    if view not in ("head", "matrix", "model"):
        raise ValueError(f"view must be 'head', 'matrix' or 'model', got {view!r}")
    # Lazy, to keep a heavy stack off the start-up path (no import cycle: the views do not import this
    # module): loading a model needs interop, the models and the tasks' runs, which `import attnkit.viz`
    # (this function is `attnkit.viz.explore`) must not import.
    from attnkit.viz.explorer.views import load_explorer

    explorer = load_explorer(model)
    payload = explorer.view(text, steps=steps, temperature=temperature, seed=seed)
    block = payload["blocks"][0]
    for name, value, size in (("layer", layer, block["layers"]), ("head", head, block["heads"])):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
            raise ValueError(f"{name} must be an int in [0, {size}), got {value!r}")
    mode = "sample" if temperature > 0 else "greedy"
    return ExploreView(payload, {"layer": layer, "head": head, "view": view, "mode": mode, "seed": seed}, height)
