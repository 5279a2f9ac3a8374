"""A ``tune --workers K`` process: ``python -m attnkit.tuning.worker SPEC.json``.

The process shows the study's progress messages (``attnkit.tuning.progress``) as the ``tune``
process does: INFO on its standard output, errors on its standard error.
"""

import logging
import sys

from attnkit.tuning.loop import worker_main


class _ByLevel(logging.Handler):
    """The message alone: INFO and below to stdout, WARNING and above to stderr, flushed at once."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def show_progress() -> None:
    """Show the messages of the ``attnkit.tuning.progress`` logger on this process's stdout / stderr."""
    logger = logging.getLogger("attnkit.tuning.progress")
    logger.addHandler(_ByLevel())
    logger.setLevel(logging.INFO)
    logger.propagate = False


if __name__ == "__main__":
    show_progress()
    sys.exit(worker_main(sys.argv[1]))
