"""A ``tune --workers K`` process: ``python -m attnkit.tuning.worker SPEC.json``."""

import sys

from attnkit.tuning.study import worker_main

if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
