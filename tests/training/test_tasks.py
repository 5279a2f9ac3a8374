"""The anomaly and classify tasks end to end, on built-in data and on small generated files."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnkit
from attnkit.tasks import load_run
from cli_inprocess import cli_in_process, cli_ok

FAST = {"trainer.threads": 1, "trainer.progress_bar": False}


def test_anomaly_digits_learns_and_is_permutation_equivariant(tmp_path: Path):
    result = attnkit.train(
        "anomaly",
        output_dir=str(tmp_path),
        name="digits",
        **FAST,
        **{"data.train_sets": 2000, "data.val_sets": 200, "data.test_sets": 400, "trainer.max_epochs": 4},
        **{"model.d_model": 64, "model.dim_feedforward": 128, "optim.warmup": 20},
    )
    assert result.metrics["test/acc"] > 0.5  # chance is 1/10
    model = result.model.eval()
    x = torch.randn(2, 10, 64)
    perm = torch.randperm(10)
    with torch.no_grad():
        assert torch.allclose(model(x)[:, perm], model(x[:, perm]), atol=1e-5)
    out = cli_ok("predict", str(result.run_dir), "0", "3").stdout.splitlines()
    assert len(out) == 2 and out[0].startswith("set 0: odd one out at ")


def test_anomaly_on_user_feature_file(tmp_path: Path):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(5, 16)) * 3
    labels = np.repeat(np.arange(5), 60)
    features = centers[labels] + rng.normal(size=(300, 16))
    path = tmp_path / "items.npz"
    np.savez(path, features=features.astype(np.float32), labels=labels)
    result = attnkit.train(
        "anomaly",
        output_dir=str(tmp_path),
        name="npz",
        **FAST,
        **{"data.source": str(path), "data.set_size": 6, "data.train_sets": 2000, "data.val_sets": 100},
        **{
            "data.test_sets": 200,
            "trainer.max_epochs": 3,
            "model.d_model": 32,
            "model.dim_feedforward": 64,
            "optim.warmup": 10,
        },
    )
    assert result.metrics["test/acc"] > 0.8  # well-separated clusters: easy
    sets = torch.from_numpy(features[:6].astype(np.float32))[None]  # raw: predict standardises like the run
    torch.save({"sets": sets}, tmp_path / "sets.pt")
    out = cli_ok("predict", str(result.run_dir), str(tmp_path / "sets.pt")).stdout
    assert "sets.pt[0]: odd one out at" in out


def test_anomaly_bad_feature_file_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "bad.npz"
    np.savez(path, feats=np.zeros((10, 3)))
    proc = cli_in_process("train", "anomaly", f"data.source={path}", "--output_dir", str(tmp_path))
    assert proc.returncode == 2
    assert "bad.npz" in proc.stderr and "features" in proc.stderr


def _write_csv(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    good = ["great", "wonderful", "superb", "loved"]
    bad = ["awful", "boring", "terrible", "hated"]
    filler = ["the", "film", "was", "plot", "actors", "and", "really", "quite"]
    lines = ["text,label"]
    for i in range(n):
        label = "pos" if i % 2 else "neg"
        words = list(rng.choice(filler, 6)) + list(rng.choice(good if label == "pos" else bad, 2))
        rng.shuffle(words)
        lines.append(f"{' '.join(words)},{label}")
    path.write_text("\n".join(lines) + "\n")


def test_classify_csv_file_learns_and_predicts(tmp_path: Path):
    path = tmp_path / "reviews.csv"
    _write_csv(path, 600, 0)
    result = attnkit.train(
        "classify",
        output_dir=str(tmp_path),
        name="csv",
        **FAST,
        **{"data.source": str(path), "data.min_freq": 1, "trainer.max_epochs": 4, "optim.warmup": 10},
    )
    assert result.metrics["test/acc"] >= 0.9
    artifacts = load_run(result.run_dir).hparams["artifacts"]
    assert artifacts["label_names"] == ["neg", "pos"]
    out = cli_ok("predict", str(result.run_dir), "a wonderful superb film", "boring and awful").stdout.splitlines()
    assert out[0].startswith("pos\t") and out[1].startswith("neg\t")
    metrics = json.loads((result.run_dir / "metrics.json").read_text())["metrics"]
    tested = cli_ok("test", str(result.run_dir)).stdout
    assert f"{metrics['test/acc']:.4f}" in tested


def test_classify_imdb_folder(tmp_path: Path):
    root = tmp_path / "aclImdb"
    rng = np.random.default_rng(1)
    for split in ("train", "test"):
        for label, words in (("pos", ["great", "fine"]), ("neg", ["awful", "dull"])):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(40):
                body = " ".join(rng.choice(["movie", "the", "a", "story", *words], 12))
                (folder / f"{i}_{7 if label == 'pos' else 2}.txt").write_text(f"{body}<br /><br />{body}")
    result = attnkit.train(
        "classify",
        output_dir=str(tmp_path),
        name="imdb",
        **FAST,
        **{"data.source": str(root), "data.min_freq": 1, "trainer.max_epochs": 15, "trainer.batch_size": 16},
        **{"optim.warmup": 10, "optim.lr": 3e-3},
    )
    assert result.metrics["test/acc"] >= 0.9


def test_classify_malformed_file_names_file_and_line(tmp_path: Path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "fine", "label": "pos"}\n{"text": "oops", "label": \n')
    proc = cli_in_process("train", "classify", f"data.source={path}", "--output_dir", str(tmp_path))
    assert proc.returncode == 2
    assert "broken.jsonl:2" in proc.stderr


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_classifier_padding_never_leaks_into_the_pool(pooling):
    from attnkit.models import ClassifierConfig, SequenceClassifier

    model = SequenceClassifier(
        ClassifierConfig(
            vocab_size=50,
            num_classes=3,
            d_model=16,
            num_heads=2,
            num_layers=2,
            dim_feedforward=32,
            dropout=0.0,
            pooling=pooling,
        )
    ).eval()
    ids = torch.randint(2, 50, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 5:] = False
    other = ids.clone()
    other[0, 5:] = torch.randint(2, 50, (4,))  # change only padded positions
    with torch.no_grad():
        assert torch.allclose(model(ids, mask), model(other, mask), atol=1e-6)
        assert torch.allclose(model(ids, mask)[0], model(ids[:1, :5], mask[:1, :5])[0], atol=1e-5)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 50\)"):
        model(torch.full((1, 3), 50))
    with pytest.raises(ValueError, match="at most max_len=512"):
        model(torch.ones(1, 600, dtype=torch.long))
