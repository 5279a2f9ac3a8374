"""Look inside, live: the attention explorer (``attnkit explore RUN``, and :func:`explore` in notebooks).

- :mod:`~attnkit.viz.explorer.payload`: what the page receives for one input (attention packed compactly,
  masks, next-token tables), as pure functions.
- :mod:`~attnkit.viz.explorer.views`: :func:`load_explorer` and the views of each kind of model (and a run's
  weight snapshots: :meth:`Explorer.use_snapshot`).
- :mod:`~attnkit.viz.explorer.interpret`: a decoder's interpretability views (logit lens, attribution, patching,
  heads switched off), read from :mod:`attnkit.models`' techniques.
- :mod:`~attnkit.viz.explorer.page`: the page (HTML, script and style shipped with the package) and
  :func:`explore`, the same page inline in Jupyter with the data embedded.
- :mod:`~attnkit.viz.explorer.app`: the local web app ``attnkit explore`` serves (FastAPI).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnkit.viz.explorer.views import DecoderExplorer, EncoderExplorer, Explorer, RunExplorer, load_explorer

__all__ = ["DecoderExplorer", "EncoderExplorer", "Explorer", "RunExplorer", "load_explorer"]


def __getattr__(name: str) -> Any:
    # Lazy, to keep a heavy stack off the start-up path, not to hide a cycle (the views import nothing of
    # this package but its payload): the views load models (interop, the models, the tasks' runs), and
    # `import attnkit.viz`, whose `explore` lives in this package's page, must not pay for them.
    if name in __all__:
        import attnkit.viz.explorer.views as views

        return getattr(views, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
