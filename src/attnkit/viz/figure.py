"""The Figure every attnkit plot returns: a matplotlib :class:`~matplotlib.figure.Figure` that Jupyter
shows inline.

attnkit builds its figures without pyplot (no global state, nothing left open), so IPython's inline
backend, which registers its PNG printer only once pyplot figures or ``%matplotlib inline`` switch it
on, would show a bare ``<Figure size ...>``. This subclass renders itself through ``_repr_png_``, the
hook IPython's display formatter asks of any object; everything else (``savefig``, axes, artists) is
matplotlib's own.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure as MatplotlibFigure

__all__ = ["Figure"]


class Figure(MatplotlibFigure):
    """A :class:`matplotlib.figure.Figure` shown inline in Jupyter (as a PNG) without pyplot."""

    def _repr_png_(self) -> bytes:
        """The figure as PNG bytes at its own dpi, cropped to its tight bounding box (as the inline
        backend draws pyplot figures)."""
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=self.dpi, bbox_inches="tight")
        return buffer.getvalue()
