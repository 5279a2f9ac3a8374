"""Every task on the user's own files: `attnkit test RUN --data FILE`, `attnkit predict RUN --file IN
--out OUT`, separate validation/test files, group-aware splits, and the anomaly task's standardisation
of raw features. Each task is trained once, tiny, on small generated files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
from attnkit.data.anomaly.config import AnomalyDataConfig
from attnkit.data.anomaly.features import load_item_features
from attnkit.data.classify.splits import load_table
from attnkit.data.readers.text_files import read_corpus
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.module import PairsDataModule
from attnkit.tasks import load_run
from attnkit.tasks.lm import generate_text
from attnkit.tasks.translate import translate_texts
from attnkit.text.tokenizers import BOS_ID, EOS_ID
from cli_inprocess import cli_in_process, cli_ok

FAST = {"trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False, "trainer.max_epochs": 1}


def _metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "metrics.json").read_text())["metrics"]


def _cli_metrics(*args: str) -> dict[str, float]:
    out = cli_ok("test", *args).stdout
    return {key: float(value) for key, value in (line.split() for line in out.splitlines())}


def _json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- reverse
@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reverse")
    data = {"data.train_size": 2000, "data.val_size": 64, "data.test_size": 128, "data.seq_len": 8}
    return attnkit.train("reverse", output_dir=str(out), name="tiny", **FAST, **data, **{"optim.warmup": 10}).run_dir


def test_reverse_test_data_scores_a_file_like_the_test_split(reverse_run: Path, tmp_path: Path):
    run = load_run(reverse_run)
    dm = run.task.build_datamodule(run.config)
    dm.setup("test")
    inputs = dm.splits["test"].tensors[0]
    path = tmp_path / "sequences.txt"
    path.write_text("".join(" ".join(map(str, row)) + "\n" for row in inputs.tolist()))
    scored = _cli_metrics(str(reverse_run), "--data", str(path), "--out", str(tmp_path / "m" / "metrics.json"))
    assert scored["test/acc"] == pytest.approx(_metrics(reverse_run)["test/acc"], abs=1e-4)
    written = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert written["test/acc"] == pytest.approx(scored["test/acc"], abs=1e-4)
    # a file whose labels are not the reversed inputs would score otherwise: reversing is the label
    assert attnkit.evaluate(reverse_run, path)["test/acc"] == pytest.approx(written["test/acc"], abs=1e-6)

    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 3 4 5 6 7 8\n1 2 3\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: .* 8 symbols, got 3"):
        attnkit.evaluate(reverse_run, bad)


def test_reverse_predict_file_writes_json_lines(reverse_run: Path, tmp_path: Path):
    path = tmp_path / "in.txt"
    path.write_text("1 2 3 4 5 6 7 8\n\n0 0 1 1 2 2 3 3\n9 8 7 6 5 4 3 2\n")
    out = tmp_path / "out.jsonl"
    cli_ok("predict", str(reverse_run), "--file", str(path), "--out", str(out), "--batch-size", "2")
    records = _json_lines(out)
    assert [r["line"] for r in records] == [1, 3, 4]  # blank lines are skipped, line numbers kept
    module = load_run(reverse_run).module
    for record in records:
        x = torch.tensor([[int(s) for s in record["input"].split()]])
        with torch.no_grad():
            probs = module(x).softmax(-1)[0]
        assert record["prediction"] == " ".join(str(int(s)) for s in probs.argmax(-1))
        assert record["probability"] == pytest.approx(float(probs.max(-1).values.mean()), rel=1e-5)
    assert load_run(reverse_run).task.predict(module, ["1 2 3 4 5 6 7 8"]) == [records[0]["prediction"]]
    with pytest.raises(ValueError, match="feature vectors"):
        list(attnkit.predict_file(reverse_run, path, standardized=True))


# ---------------------------------------------------------------------------------------------- anomaly
ANOMALY = {
    **FAST,
    "trainer.max_epochs": 4,
    "data.train_sets": 2000,
    "data.val_sets": 100,
    "data.test_sets": 400,
    "model.d_model": 64,
    "model.dim_feedforward": 128,
    "optim.warmup": 20,
}


@pytest.fixture(scope="module")
def anomaly_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Digits (raw pixel intensities 0..16, standardised by the run with its training mean/std)."""
    return attnkit.train("anomaly", output_dir=str(tmp_path_factory.mktemp("anomaly")), name="d", **ANOMALY).run_dir


def test_anomaly_test_data_standardises_raw_features_like_the_run(anomaly_run: Path, tmp_path: Path):
    run = load_run(anomaly_run)
    artifacts = run.hparams["artifacts"]
    raw = load_item_features(AnomalyDataConfig(**{**artifacts["config"], "standardize": False}))
    mean, std = torch.tensor(artifacts["mean"]), torch.tensor(artifacts["std"])
    assert raw.test_x.min() >= 0 and raw.test_x.max() > 10  # raw digit intensities, not z-scores
    np.savez(tmp_path / "raw.npz", features=raw.test_x.numpy(), labels=raw.test_y.numpy())
    np.savez(tmp_path / "std.npz", features=((raw.test_x - mean) / std).numpy(), labels=raw.test_y.numpy())
    expected = _metrics(anomaly_run)["test/acc"]  # the same items and seed: the run's own test sets
    assert expected > 0.5  # chance is 1/10
    assert attnkit.evaluate(anomaly_run, tmp_path / "raw.npz")["test/acc"] == pytest.approx(expected, abs=1e-6)
    by_hand = _cli_metrics(str(anomaly_run), "--data", str(tmp_path / "std.npz"), "--standardized")
    assert by_hand["test/acc"] == pytest.approx(expected, abs=1e-4)
    unscaled = attnkit.evaluate(anomaly_run, tmp_path / "raw.npz", standardized=True)["test/acc"]
    assert unscaled < expected - 0.05  # raw features read as if standardised: what the issue measured


def test_anomaly_predict_raw_equals_standardised_by_hand(anomaly_run: Path, tmp_path: Path):
    artifacts = load_run(anomaly_run).hparams["artifacts"]
    raw = load_item_features(AnomalyDataConfig(**{**artifacts["config"], "standardize": False}))
    items = raw.test_x[:50].reshape(5, 10, 64)  # 5 sets of 10 raw items
    mean, std = torch.tensor(artifacts["mean"]), torch.tensor(artifacts["std"])
    torch.save({"sets": items, "targets": torch.zeros(5, dtype=torch.long)}, tmp_path / "raw.pt")
    np.savez(tmp_path / "std.npz", sets=((items - mean) / std).numpy())
    cli_ok("predict", str(anomaly_run), "--file", str(tmp_path / "raw.pt"), "--out", str(tmp_path / "a.jsonl"))
    a = _json_lines(tmp_path / "a.jsonl")
    b = list(attnkit.predict_file(anomaly_run, tmp_path / "std.npz", standardized=True, batch_size=2))
    assert [r["set"] for r in a] == list(range(5)) and all(r["target"] == 0 for r in a)
    assert [r["odd_position"] for r in a] == [r["odd_position"] for r in b]
    assert [r["probability"] for r in a] == pytest.approx([r["probability"] for r in b], rel=1e-5)
    # the readable form of `predict RUN sets.pt` standardises too
    run = load_run(anomaly_run)
    raw_lines = run.task.predict(run.module, [str(tmp_path / "raw.pt")])
    assert [int(line.split(" at ")[1].split()[0]) for line in raw_lines] == [r["odd_position"] for r in a]


def test_anomaly_groups_never_straddle_splits(tmp_path: Path):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 100)
    groups = rng.integers(0, 40, 400)  # e.g. the recording each item comes from
    path = tmp_path / "items.npz"
    np.savez(path, features=rng.normal(size=(400, 8)).astype(np.float32), labels=labels, groups=groups)
    cfg = AnomalyDataConfig(source=str(path), set_size=4, group_column="groups", val_fraction=0.2, test_fraction=0.2)
    features = load_item_features(cfg)
    seen = [set(groups[getattr(features, f"{split}_index").numpy()]) for split in ("train", "val", "test")]
    assert all(seen) and not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    assert sum(len(getattr(features, f"{s}_y")) for s in ("train", "val", "test")) == 400
    with pytest.raises(ValueError, match="'grp' names no array"):
        load_item_features(AnomalyDataConfig(source=str(path), group_column="grp"))


# ---------------------------------------------------------------------------------------------- classify
def _write_reviews(path: Path, n: int, seed: int, *, documents: int = 0) -> None:
    rng = np.random.default_rng(seed)
    good, bad = ["great", "wonderful", "superb", "loved"], ["awful", "boring", "terrible", "hated"]
    filler = ["the", "film", "was", "plot", "actors", "and", "really", "quite"]
    lines = ["text,label,doc"]
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = [*rng.choice(filler, 6), *rng.choice(good if label == "pos" else bad, 2)]
        lines.append(f"{' '.join(words)},{label},d{rng.integers(documents) if documents else i}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("classify")
    _write_reviews(out / "train.csv", 300, 0, documents=30)
    _write_reviews(out / "val.csv", 40, 1)
    overrides = {
        "data.source": str(out / "train.csv"),
        "data.val_source": str(out / "val.csv"),
        "data.group_column": "doc",
        "data.min_freq": 1,
        "model.d_model": 32,
        "model.dim_feedforward": 64,
        "optim.warmup": 5,
    }
    return attnkit.train("classify", output_dir=str(out), name="csv", **FAST, **overrides).run_dir


def test_classify_val_source_and_group_column_split_by_document(tmp_path: Path):
    _write_reviews(tmp_path / "train.csv", 300, 0, documents=30)
    _write_reviews(tmp_path / "val.csv", 40, 1)
    splits = load_table(tmp_path / "train.csv", val_path=tmp_path / "val.csv", group_column="doc", seed=3)
    assert len(splits.val_texts) == 40  # the validation file, whole
    docs = {line.split(",")[0]: line.split(",")[2] for line in (tmp_path / "train.csv").read_text().splitlines()[1:]}
    train_docs, test_docs = {docs[t] for t in splits.train_texts}, {docs[t] for t in splits.test_texts}
    assert test_docs and not train_docs & test_docs  # no document has passages on both sides
    assert abs(len(splits.test_texts) - 30) <= 15  # test_fraction 0.1 of 300 passages, in whole documents
    assert 0.3 < np.mean(splits.test_labels) < 0.7  # stratified: both labels
    with pytest.raises(ValueError, match="no column 'source_doc'"):
        load_table(tmp_path / "train.csv", group_column="source_doc")


def test_classify_test_data_and_predict_file(classify_run: Path, tmp_path: Path):
    run = load_run(classify_run)
    dm = run.task.build_datamodule(run.config)
    dm.setup("test")
    names = dm.label_names
    rows = [f"{text},{names[y]}" for text, y in zip(dm.splits.test_texts, dm.splits.test_labels)]
    (tmp_path / "test.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    scored = _cli_metrics(str(classify_run), "--data", str(tmp_path / "test.csv"))
    assert scored["test/acc"] == pytest.approx(_metrics(classify_run)["test/acc"], abs=1e-4)

    texts = ["a wonderful superb film", "boring and awful plot", "loved it"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    cli_ok("predict", str(classify_run), "--file", str(tmp_path / "in.txt"), "--out", str(tmp_path / "o.jsonl"))
    records = _json_lines(tmp_path / "o.jsonl")
    shown = run.task.predict(run.module, texts)
    assert [f"{r['label']}\t{r['probability']:.3f}" for r in records] == shown
    # a table file: its text column, rows numbered from 1
    table = list(attnkit.predict_file(classify_run, tmp_path / "test.csv"))
    assert len(table) == len(rows) and table[0]["row"] == 1 and table[0]["label"] in names
    # a Parquet file: its text column, the same predictions as the CSV's rows
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"label": [r.rsplit(",", 1)[1] for r in rows], "text": dm.splits.test_texts}),
                   tmp_path / "test.parquet")  # fmt: skip
    assert list(attnkit.predict_file(classify_run, tmp_path / "test.parquet")) == table
    (tmp_path / "other.csv").write_text("text,label\nsome text,maybe\n")
    proc = cli_in_process("test", str(classify_run), "--data", str(tmp_path / "other.csv"))
    assert proc.returncode == 2 and "'maybe'" in proc.stderr and "['neg', 'pos']" in proc.stderr


# ---------------------------------------------------------------------------------------------- translate
TRANSLATE = {
    **FAST,
    "data.num_pairs": 600,
    "model.d_model": 32,
    "model.dim_feedforward": 64,
    "model.num_layers": 1,
    "decode.beam_size": 2,
    "optim.warmup": 5,
}


@pytest.fixture(scope="module")
def translate_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return attnkit.train("translate", output_dir=str(tmp_path_factory.mktemp("tr")), name="t", **TRANSLATE).run_dir


def test_translate_val_and_test_sources_and_groups(tmp_path: Path):
    rows = [f"s{i} a\tt{i} b\tgroup{i % 20}" for i in range(200)]
    (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "val.tsv").write_text("hello\thola\nbye\tadiós\n")
    (tmp_path / "test.tsv").write_text("one\tuno\n")
    cfg = PairsDataConfig(
        source=str(tmp_path / "pairs.tsv"), val_source=str(tmp_path / "val.tsv"), test_source=str(tmp_path / "test.tsv")
    )
    dm = PairsDataModule(cfg)
    dm.setup()
    assert dm.splits.val == [("hello", "hola"), ("bye", "adiós")] and dm.splits.test == [("one", "uno")]
    assert len(dm.splits.train) == 200

    grouped = PairsDataModule(PairsDataConfig(source=str(tmp_path / "pairs.tsv"), group_column=2, val_fraction=0.2))
    grouped.setup()
    group = {f"s{i} a": i % 20 for i in range(200)}
    seen = [{group[s] for s, _ in getattr(grouped.splits, split)} for split in ("train", "val", "test")]
    assert all(seen) and not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    assert len(grouped.splits.val) == 40  # 4 of the 20 groups of 10 pairs
    (tmp_path / "nogroup.tsv").write_text("a\tb\n")
    with pytest.raises(ValueError, match=r"nogroup\.tsv:1: no group in column 2"):
        PairsDataModule(PairsDataConfig(source=str(tmp_path / "nogroup.tsv"), group_column=2)).setup()


def test_translate_test_data_and_predict_file(translate_run: Path, tmp_path: Path):
    run = load_run(translate_run)
    dm = run.task.build_datamodule(run.config)
    dm.setup("test")
    (tmp_path / "test.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in dm.splits.test))
    scored = _cli_metrics(str(translate_run), "--data", str(tmp_path / "test.tsv"))
    for key in ("test/bleu", "test/exact", "test/acc"):
        assert scored[key] == pytest.approx(_metrics(translate_run)[key], abs=1e-3)

    texts = ["twelve", "I have one book.", "three hundred"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    cli_ok("predict", str(translate_run), "--file", str(tmp_path / "in.txt"), "--out", str(tmp_path / "o.jsonl"))
    records = _json_lines(tmp_path / "o.jsonl")
    assert [r["translation"] for r in records] == translate_texts(run.module, texts)
    assert all(r["log_prob"] < 0 for r in records)


# ---------------------------------------------------------------------------------------------- lm
@pytest.fixture(scope="module")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lm")
    docs = [f"the cat number {i} sat on the mat.\nit was {'happy' if i % 2 else 'sad'}." for i in range(60)]
    (out / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    overrides = {
        "data.source": str(out / "corpus.txt"),
        "data.val_fraction": 0.1,
        "data.test_fraction": 0.1,
        "model.d_model": 32,
        "model.num_layers": 1,
        "model.num_heads": 2,
        "model.dim_feedforward": 64,
        "model.max_len": 16,
        "trainer.batch_size": 8,
        "optim.warmup": 5,
    }
    return attnkit.train("lm", output_dir=str(out), name="c", **FAST, **overrides).run_dir


def test_lm_test_data_and_predict_file_perplexity(lm_run: Path, tmp_path: Path):
    run = load_run(lm_run)
    dm = run.task.build_datamodule(run.config)
    dm.setup("test")
    (tmp_path / "held.txt").write_text("\n\n".join(dm.documents["test"]) + "\n")
    assert read_corpus(tmp_path / "held.txt") == list(dm.documents["test"])
    scored = _cli_metrics(str(lm_run), "--data", str(tmp_path / "held.txt"))
    for key in ("test/ppl", "test/bpc", "test/loss"):
        assert scored[key] == pytest.approx(_metrics(lm_run)[key], rel=1e-3)

    texts = ["the cat sat.", "it was happy. the cat number 7 sat on the mat."]  # the second is longer than 16
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    out = cli_ok("predict", str(lm_run), "--file", str(tmp_path / "in.txt"), "--batch-size", "1").stdout
    records = [json.loads(line) for line in out.splitlines()]
    tokenizer = dm.tokenizer
    ids = [BOS_ID, *tokenizer.encode(texts[0]), EOS_ID]  # <bos> text <eos>
    with torch.no_grad():
        logits = run.module.model(torch.tensor([ids[:-1]]))[0]
    nll = float(F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))
    assert records[0]["tokens"] == len(ids) - 1 and records[0]["nll"] == pytest.approx(nll, rel=1e-4)
    assert records[0]["perplexity"] == pytest.approx(math.exp(nll / (len(ids) - 1)), rel=1e-4)
    assert records[1]["tokens"] == len(texts[1]) + 1 and records[1]["perplexity"] > 1
    # arguments still continue a prompt
    (continued,) = generate_text(run.module.model, tokenizer, "the cat", max_new_tokens=200, temperature=0.0)
    assert run.task.predict(run.module, ["the cat"]) == [continued.replace("\\", "\\\\").replace("\n", "\\n")]
