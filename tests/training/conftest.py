from pathlib import Path

import pytest
from cli_helpers import TINY_REVERSE, run_cli


@pytest.fixture
def tiny_reverse_run(tmp_path: Path) -> Path:
    run_cli("train", "reverse", "--output_dir", str(tmp_path), "name=tiny", *TINY_REVERSE)
    return tmp_path / "reverse" / "tiny"
