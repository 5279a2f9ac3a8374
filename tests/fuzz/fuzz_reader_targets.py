"""Fuzz targets of the readers of user files: csv / tsv / jsonl tables, tab-separated pairs, text
corpora and input files, and .npz / .pt feature files. Each gets well-formed-looking files with
junk in them, raw bytes, and valid files truncated or bit-flipped."""

from __future__ import annotations

import csv
import io
import json
import warnings
from typing import Any

import numpy as np
import torch
from fuzz_core import MUTATIONS, Assets, expect_user_error, mutate, target
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnkit.api import predict_file
from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import load_item_features, read_test_sets
from attnkit.data.classify.splits import load_table
from attnkit.data.readers.arrays import read_sets
from attnkit.data.readers.lines import numbered_inputs
from attnkit.data.readers.pairs import read_pair_rows
from attnkit.data.readers.tables import read_column, read_table
from attnkit.data.readers.text_files import iter_documents, read_corpus

# ------------------------------------------------------------------------------------------ encodings
ENCODING = st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1", "cp1252", "bad-tail"])


def encode(text: str, encoding: str) -> bytes:
    if encoding == "bad-tail":  # UTF-8 with a stray byte that is not
        return text.encode("utf-8") + b"\xff\xfe\xc3"
    return text.encode(encoding, errors="replace")


# A field as people get them wrong: empty, padded, quoted, multi-line, control characters, numbers.
_FIELDS = [
    "", " ", "0", "1", "2", "-1", "01", "1.5", "10", "pos", "neg", "\x00", '"', '"a', "a\nb", "\r", "\ufeff", "\t",
    ",", "text", "label", "group", "NaN", "null", "true", "99999999999999999999",
]  # fmt: skip
FIELD = st.one_of(st.text(max_size=8), st.sampled_from(_FIELDS), st.integers(-3, 3).map(str))
COLUMN = st.sampled_from(["text", "label", "group", " text ", "Text", "", "x", "label "]) | st.text(max_size=4)

# ---------------------------------------------------------------------------------------------- tables


@st.composite
def delimited(draw: st.DrawFn, delimiter: str) -> bytes:
    header = draw(st.lists(COLUMN, max_size=4) | st.just(["text", "label", "group"]) | st.just(["label", "text"]))
    rows = draw(st.lists(st.lists(FIELD, max_size=4), max_size=8))
    if draw(st.booleans()):
        out = io.StringIO()
        writer = csv.writer(out, delimiter=delimiter, lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"])))
        writer.writerows([header, *rows] if header or draw(st.booleans()) else rows)
        text = out.getvalue()
    else:  # written by hand: unbalanced quotes, stray delimiters
        text = "\n".join(delimiter.join(row) for row in [header, *rows])
    return encode(text, draw(ENCODING))


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6) | FIELD,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=5,
)


@st.composite
def jsonl(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 9))
        if kind < 6:
            keys = draw(st.lists(st.sampled_from(["text", "label", "group"]) | st.text(max_size=4), max_size=4))
            lines.append(json.dumps({k: draw(JSON_VALUE | FIELD) for k in keys}, ensure_ascii=draw(st.booleans())))
        elif kind < 8:
            lines.append(json.dumps(draw(JSON_VALUE)))
        else:
            lines.append(draw(st.text(max_size=12)))
    return encode(draw(st.sampled_from(["\n", "\r\n", "\n\n"])).join(lines), draw(ENCODING))


GOOD_TABLE = {
    ".csv": b'text,label,group\nfine film,pos,a\n"a, b",neg,b\ngood,pos,c\nbad,neg,d\nok,pos,e\nmeh,neg,f\n',
    ".tsv": b"text\tlabel\tgroup\nfine film\t1\ta\nbad\t0\tb\ngood\t1\tc\nworse\t0\td\nok\t1\te\nmeh\t0\tf\n",
    ".jsonl": b'{"text": "fine", "label": 1, "group": "a"}\n{"text": "bad", "label": 0, "group": "b"}\n'
    b'{"text": "good", "label": 1, "group": "c"}\n{"text": "worse", "label": 0, "group": "d"}\n',
}
TABLE = st.one_of(
    st.tuples(st.just(".csv"), delimited(",")),
    st.tuples(st.just(".tsv"), delimited("\t")),
    st.tuples(st.just(".jsonl"), jsonl()),
    st.tuples(st.sampled_from(sorted(GOOD_TABLE)), st.binary(max_size=64)),
    st.sampled_from(sorted(GOOD_TABLE)).flatmap(
        lambda suffix: st.tuples(st.just(suffix), MUTATIONS.map(lambda m: mutate(GOOD_TABLE[suffix], m)))
    ),
)


@target("readers.table", st.tuples(TABLE, COLUMN, st.sampled_from([None, "group", "text", "x"])), examples=300)
def check_table(assets: Assets, example: tuple[tuple[str, bytes], str, str | None]) -> None:
    (suffix, data), column, group = example
    with assets.scratch() as folder:
        path = folder / f"data{suffix}"
        path.write_bytes(data)
        expect_user_error(lambda: read_table(path), path)
        expect_user_error(lambda: read_column(path, column), path)
        expect_user_error(lambda: load_table(path, group_column=group), path)


# ---------------------------------------------------------------------------------------------- pairs
@st.composite
def pair_lines(draw: st.DrawFn) -> bytes:
    lines = ["\t".join(draw(st.lists(FIELD, max_size=4))) for _ in range(draw(st.integers(0, 8)))]
    return encode(draw(st.sampled_from(["\n", "\r\n", "\r"])).join(lines), draw(ENCODING))


GOOD_PAIRS = b"Go.\tVe.\tCC-BY a\nHi.\tHola.\tCC-BY b\nRun!\tCorre.\tCC-BY c\n"
PAIRS = st.one_of(pair_lines(), st.binary(max_size=64), MUTATIONS.map(lambda m: mutate(GOOD_PAIRS, m)))


@target("readers.pairs", st.tuples(PAIRS, st.booleans(), st.sampled_from([None, 0, 1, 2, 3])), examples=300)
def check_pairs(assets: Assets, example: tuple[bytes, bool, int | None]) -> None:
    data, skip, group = example
    with assets.scratch() as folder:
        path = folder / "pairs.txt"
        path.write_bytes(data)
        with warnings.catch_warnings():  # skip_bad_lines=True warns of the lines it skipped
            warnings.simplefilter("ignore")
            expect_user_error(lambda: read_pair_rows(path, skip_bad_lines=skip, group_column=group), path)


# ----------------------------------------------------------------------------------------------- text
TEXT = st.one_of(
    st.lists(FIELD | st.sampled_from(["\n", "\n\n", " \n", "\r\n\r\n"]), max_size=12).flatmap(
        lambda parts: ENCODING.map(lambda enc: encode("".join(parts), enc))
    ),
    st.binary(max_size=64),
    MUTATIONS.map(lambda m: mutate("first doc\nline two\n\nsecond doc ünï\r\n\r\nthird\n".encode(), m)),
)


@target("readers.text", st.tuples(TEXT, st.sampled_from(["blank_line", "line"]), st.integers(1, 16)), examples=300)
def check_text(assets: Assets, example: tuple[bytes, str, int]) -> None:
    data, split_on, chunk = example
    with assets.scratch() as folder:
        path = folder / "corpus.txt"
        path.write_bytes(data)
        docs = expect_user_error(lambda: read_corpus(path, split_on), path)
        streamed = expect_user_error(lambda: list(iter_documents([path], split_on, chunk_bytes=chunk)), path)
        if docs is not None and streamed is not None:  # reading in small chunks gives the same documents
            assert streamed == docs, (streamed, docs)
        expect_user_error(lambda: numbered_inputs(path), path)


# ----------------------------------------------------------------------------------------- npz and pt
DTYPES = ["float32", "float64", "float16", "int64", "int32", "int8", "uint8", "uint64", "bool", "complex64", "<U2"]
ARRAY_KEYS = st.sampled_from(
    ["features", "labels", "train_features", "train_labels", "val_features", "val_labels", "test_features",
     "test_labels", "sets", "targets", "groups"]
) | st.text(min_size=1, max_size=4)  # fmt: skip
ANY_ARRAY = hnp.arrays(
    st.sampled_from(DTYPES).map(np.dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
)


@st.composite
def feature_arrays(draw: st.DrawFn) -> dict[str, Any]:
    """A features file that looks right (items of a few classes, groups, maybe fixed splits or sets),
    then with keys dropped or replaced by junk."""
    n, d = draw(st.integers(0, 30)), draw(st.sampled_from([1, 1, 2, 3, 4, 0]))
    values = st.floats(-1e3, 1e3, width=32)
    x = draw(hnp.arrays(np.float32, (n, d), elements=values))
    if x.size and draw(st.integers(0, 9)) == 0:
        x.flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    y = draw(hnp.arrays(np.int64, (n,), elements=st.integers(-2, 3) | st.just(2**62)))
    arrays: dict[str, Any] = {"features": x, "labels": y}
    if draw(st.booleans()):
        arrays["groups"] = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, 5)))
    layout = draw(st.sampled_from(["pool", "splits", "sets"]))
    if layout == "splits":
        splits = draw(st.sets(st.sampled_from(["train", "val", "test"])))
        arrays = {f"{split}_{k}": v for split in sorted(splits) for k, v in arrays.items()}
    elif layout == "sets":
        s, m = draw(st.integers(0, 4)), draw(st.integers(0, 4))
        arrays = {"sets": draw(hnp.arrays(np.float32, (s, m, d), elements=values))}
        arrays["targets"] = draw(hnp.arrays(np.int64, (s,), elements=st.integers(-1, 4)))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        key = draw(ARRAY_KEYS)
        if draw(st.booleans()):
            arrays.pop(key, None)
        else:
            arrays[key] = draw(ANY_ARRAY)
    return arrays


def _save_npz(arrays: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _to_torch(value: Any) -> Any:
    try:
        return torch.from_numpy(np.ascontiguousarray(value))
    except TypeError:  # numpy dtypes torch has no tensor of (strings): as a list
        return value.tolist()


def _save_pt(obj: Any) -> bytes:
    out = io.BytesIO()
    torch.save(obj, out)
    return out.getvalue()


GOOD_FEATURES = {"features": np.arange(48, dtype=np.float32).reshape(24, 2), "labels": np.arange(24) % 2}
PT_JUNK = st.none() | st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=3)
NPZ = st.one_of(
    feature_arrays().map(_save_npz),
    st.binary(max_size=64),
    MUTATIONS.map(lambda m: mutate(_save_npz(GOOD_FEATURES), m)),
)
PT = st.one_of(
    feature_arrays().map(lambda arrays: _save_pt({k: _to_torch(v) for k, v in arrays.items()})),
    st.dictionaries(ARRAY_KEYS, PT_JUNK, max_size=3).map(_save_pt),
    st.sampled_from([torch.zeros(2, 3, 4), torch.zeros(3), [1, 2], "features", None, 3]).map(_save_pt),
    st.binary(max_size=64),
    MUTATIONS.map(lambda m: mutate(_save_pt({k: torch.from_numpy(v) for k, v in GOOD_FEATURES.items()}), m)),
)
SET_SIZE = st.integers(2, 5)
GROUP = st.sampled_from([None, None, "groups", "features", "nope"])


def _check_features(assets: Assets, suffix: str, data: bytes, set_size: int, group: str | None) -> None:
    with assets.scratch() as folder:
        path = folder / f"features{suffix}"
        path.write_bytes(data)
        cfg = AnomalyDataConfig(source=str(path), set_size=set_size, group_column=group, val_sets=3, test_sets=3)
        with warnings.catch_warnings():  # torch.load warns of random bytes that look like an old pickle
            warnings.simplefilter("ignore")
            expect_user_error(lambda: load_item_features(cfg), path)
            expect_user_error(lambda: read_sets(path), path)
            expect_user_error(lambda: read_test_sets(path, set_size=set_size, num_sets=3, seed=0), path)


@target("readers.npz", st.tuples(NPZ, SET_SIZE, GROUP), examples=250)
def check_npz(assets: Assets, example: tuple[bytes, int, str | None]) -> None:
    _check_features(assets, ".npz", *example)


@target("readers.pt", st.tuples(PT, SET_SIZE, GROUP), examples=250)
def check_pt(assets: Assets, example: tuple[bytes, int, str | None]) -> None:
    _check_features(assets, ".pt", *example)


__all__ = ["NPZ", "PAIRS", "PT", "TABLE", "TEXT"]


# ------------------------------------------------------------------------ a run's inputs from a file
_SYMBOL = st.integers(-2, 12) | st.sampled_from([10**30, "1.5", "x", "", "٣"]).map(str)
SEQUENCES = st.lists(st.lists(_SYMBOL.map(str), max_size=6).map(" ".join), max_size=5).map(
    lambda lines: "\n".join(lines).encode()
)


@target("readers.predict_file", st.tuples(SEQUENCES | TEXT, st.integers(1, 4)), examples=150)
def check_predict_file(assets: Assets, example: tuple[bytes, int]) -> None:
    """``attnkit predict RUN --file FILE`` of a (reverse) run: lines of symbols, as the run was trained on."""
    data, batch_size = example
    with assets.scratch() as folder:
        path = folder / "inputs.txt"
        path.write_bytes(data)
        expect_user_error(lambda: list(predict_file(assets.run_dir, path, batch_size=batch_size)), path)
