"""Look inside, live: the attention explorer (``attnkit explore RUN``, and :func:`explore` in notebooks).

- :mod:`~attnkit.viz.explorer.payload`: what the page receives for one input (attention packed compactly,
  masks, next-token tables), as pure functions.
- :mod:`~attnkit.viz.explorer.views`: :func:`load_explorer` and the views of each kind of model.
- :mod:`~attnkit.viz.explorer.page`: the page (HTML, script and style shipped with the package) and
  :func:`explore`, the same page inline in Jupyter with the data embedded.
- :mod:`~attnkit.viz.explorer.app`: the local web app ``attnkit explore`` serves (FastAPI).
"""

from attnkit.viz.explorer.views import DecoderExplorer, EncoderExplorer, Explorer, RunExplorer, load_explorer

__all__ = ["DecoderExplorer", "EncoderExplorer", "Explorer", "RunExplorer", "load_explorer"]
