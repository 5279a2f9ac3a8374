"""Fuzzing the readers of user files: csv / tsv / jsonl, pairs, text corpora and input files, .npz and
.pt features (derandomized; tools/fuzz.py runs the targets longer), and the inputs it found."""

from __future__ import annotations

from pathlib import Path

import fuzz_reader_targets  # noqa: F401  (registers the targets)
import numpy as np
import pytest
from fuzz_core import Assets, Target, check_user_error, run_target, targets

from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import load_item_features
from attnkit.data.classify.splits import load_table
from attnkit.data.readers.tables import read_column, read_table


@pytest.mark.parametrize("target", targets("readers."), ids=lambda t: t.name)
def test_fuzz(target: Target, fuzz_assets: Assets):
    assert run_target(target, fuzz_assets) > 0


# --------------------------------------------------------------------- inputs the fuzzing found
@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_a_table_that_is_not_utf8_is_an_error_naming_the_file_and_line(tmp_path: Path, suffix: str):
    path = tmp_path / f"reviews{suffix}"
    rows = ['{"text": "fine", "label": 1}', '{"text": "caf\xe9", "label": 0}'] if suffix == ".jsonl" else ["text,label"]
    if suffix != ".jsonl":
        rows += ["fine,1", "caf\xe9,0"]
    path.write_bytes("\n".join(rows).replace(",", "\t" if suffix == ".tsv" else ",").encode("latin-1"))
    line = 2 if suffix == ".jsonl" else 3
    for read in (lambda: read_table(path), lambda: read_column(path, "label")):
        with pytest.raises(ValueError, match=rf"reviews{suffix}:{line}: not UTF-8 \(byte 0xe9.*iconv") as err:
            read()
        check_user_error(err.value, (str(path),))  # raised by attnkit (was the codec's UnicodeDecodeError)


def test_too_few_groups_name_the_table_and_its_group_column(tmp_path: Path):
    path = tmp_path / "reviews.csv"
    path.write_text("text,label,group\n" + "".join(f"t{i},{i % 2},same\n" for i in range(8)), encoding="utf-8")
    with pytest.raises(ValueError, match=r"reviews.csv \(groups of column 'group'\) has 1 group\(s\): too few"):
        load_table(path, group_column="group")


def test_too_few_groups_name_the_features_file(tmp_path: Path):
    path = tmp_path / "items.npz"
    n = 24
    features, labels = np.arange(2 * n, dtype=np.float32).reshape(n, 2), np.arange(n) % 2
    np.savez(path, features=features, labels=labels, groups=np.zeros(n, dtype=np.int64))
    cfg = AnomalyDataConfig(source=str(path), set_size=3, group_column="groups")
    with pytest.raises(ValueError, match=r"items.npz has 1 group\(s\): too few"):
        load_item_features(cfg)
