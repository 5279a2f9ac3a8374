"""``python -m attnkit.lmeval ...``: lm-evaluation-harness's own command line (``lm_eval ...``, the
same arguments) with attnkit's model registered as ``attnkit``::

    python -m attnkit.lmeval run --model attnkit --model_args pretrained=FOLDER,batch_size=8 --tasks TASKS
"""

from __future__ import annotations

from lm_eval.__main__ import cli_evaluate

import attnkit.lmeval  # noqa: F401  (registers the "attnkit" model)

if __name__ == "__main__":
    cli_evaluate()
