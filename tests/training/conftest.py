import shutil
from pathlib import Path

import pytest
from cli_helpers import TINY_REVERSE, run_cli


@pytest.fixture(scope="session")
def _tiny_reverse_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny reverse run through the real CLI, trained once per session (about 14 s)."""
    out = tmp_path_factory.mktemp("tiny-reverse-template")
    run_cli("train", "reverse", "--output_dir", str(out), "name=tiny", *TINY_REVERSE)
    return out / "reverse" / "tiny"


@pytest.fixture
def tiny_reverse_run(_tiny_reverse_template: Path, tmp_path: Path) -> Path:
    """A copy of the session's tiny reverse run folder, for this test alone to read and change (a run folder
    names no absolute path: commands on the copy read and write the copy)."""
    run = tmp_path / "reverse" / "tiny"
    shutil.copytree(_tiny_reverse_template, run)
    return run
