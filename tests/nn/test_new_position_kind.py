"""A positional encoding is one new file in ``attnkit/nn/positions/`` and nothing else: the models and
every task's config take it (docs/development.md, "Adding a positional encoding").

Checked on a copy of the package with that one file added, in a fresh interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import attnkit

HALVED = '''
"""``"halved"``: the sinusoidal encoding at half amplitude."""

from torch import Tensor

from attnkit.nn.positional import SinusoidalPositionalEncoding
from attnkit.nn.positions.base import POSITIONS


@POSITIONS.register("halved")
class HalvedSinusoidal(SinusoidalPositionalEncoding):
    def add(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        return x + 0.5 * (self(x, offset, positions) - x)
'''

CHECK = textwrap.dedent(
    """
    import torch
    import attnkit
    from attnkit.models import LanguageModel, LanguageModelConfig
    from attnkit.nn import POSITIONS
    from attnkit.tasks import build_config

    assert attnkit.__file__.startswith(sys.argv[1]), attnkit.__file__
    assert "halved" in POSITIONS
    for task in ("reverse", "classify", "translate", "lm"):
        cfg = build_config(task, overrides={"model.positional": "halved"})
        assert cfg.model.positional == "halved", task
    schema = LanguageModelConfig.model_json_schema()["properties"]["positional"]
    assert "halved" in str(schema), schema
    torch.manual_seed(0)
    base = dict(vocab_size=11, d_model=16, num_heads=2, num_layers=1, dim_feedforward=32, max_len=8)
    halved = LanguageModel(LanguageModelConfig(**base, positional="halved"))
    torch.manual_seed(0)
    full = LanguageModel(LanguageModelConfig(**base, positional="sinusoidal"))
    ids = torch.randint(11, (2, 8))
    loss = halved(ids).logsumexp(-1).mean()
    loss.backward()
    assert not torch.equal(halved(ids), full(ids))  # the new kind is the one used
    print("ok")
    """
)


def test_a_new_position_kind_is_one_file(tmp_path: Path) -> None:
    package = Path(attnkit.__file__).parent
    copy = tmp_path / "attnkit"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "nn" / "positions" / "halved.py").write_text(HALVED)
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + CHECK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_without_the_file_the_kind_is_refused(tmp_path: Path) -> None:
    """The other side: the check above would pass if any name were accepted."""
    code = "from attnkit.tasks import build_config\nbuild_config('lm', overrides={'model.positional': 'halved'})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "model.positional" in done.stderr and "'sinusoidal'" in done.stderr
