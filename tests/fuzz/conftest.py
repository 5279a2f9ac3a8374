"""The fuzz targets' assets (a tiny trained run, model folders), built once per session."""

from __future__ import annotations

import pytest
from fuzz_core import Assets


@pytest.fixture(scope="session")
def fuzz_assets(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    return Assets(tmp_path_factory.mktemp("fuzz"))
