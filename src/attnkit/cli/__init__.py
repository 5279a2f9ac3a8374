"""The ``attnkit`` command line: :func:`main`, a click group.

Every command parses its arguments, calls one function of :mod:`attnkit.api` and prints what it
returns; the library's progress messages (``logging``) are shown by :func:`attnkit.cli.common.show_logs`.
Commands are grouped by concept: runs (``tasks``, ``train``, ``prepare``, ``test``, ``predict``),
generation (``generate``, ``translate``, ``chat``), plots (``plot ...``, ``report``), models (``import``,
``export``), benchmarks (``eval``) and tuning (``tune``). Nothing here imports torch or Lightning at start-up.
"""

from attnkit.cli import chat, evaluation, explore, generation, inspect, models, plots, runs, serve, tuning  # noqa: F401  (each registers its commands)
from attnkit.cli.common import main

__all__ = ["main"]
