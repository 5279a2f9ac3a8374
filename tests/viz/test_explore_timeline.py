"""The explorer's training timeline: a run trained with ``trainer.snapshot_every_n_steps`` lists its weight snapshots
in ``/api/info``, every view (``/api/view`` and the interpretability views) takes ``"snapshot"`` (a step) and shows
that snapshot's weights exactly, ``null`` gives the trained weights back bit for bit, and a step the run does not
have is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

import attnkit
from attnkit.tasks import load_model
from attnkit.training.snapshots import load_snapshot, read_snapshot_index
from attnkit.viz.explorer import DecoderExplorer, load_explorer
from attnkit.viz.explorer.app import create_explore_app

LOCAL = "http://127.0.0.1"
TEXT = "the cat sat"
TINY = {
    "trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False, "trainer.loggers": ["csv"],
    "trainer.batch_size": 16, "data.builtin_documents": 40,
    "model.max_len": 32, "model.d_model": 32, "model.num_layers": 2, "model.num_heads": 2,
    "model.dim_feedforward": 64, "trainer.max_epochs": 1, "trainer.snapshot_every_n_steps": 2,
}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(attnkit.train("lm", output_dir=str(tmp_path_factory.mktemp("snap")), name="s", **TINY).run_dir)


@pytest.fixture(scope="module")
def client(run: Path) -> Iterator[TestClient]:
    explorer = load_explorer(run)
    assert isinstance(explorer, DecoderExplorer)
    with TestClient(create_explore_app(explorer), base_url=LOCAL) as c:
        yield c


def post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def logits_of(run: Path, step: int | None, text: str) -> torch.Tensor:
    """The model's last-position logits, with the weights of snapshot ``step`` (None: the trained ones)."""
    pretrained = load_model(run)
    if step is not None:
        [entry] = [e for e in read_snapshot_index(run) if e["step"] == step]
        load_snapshot(pretrained.model, run, entry)
    with torch.no_grad():
        return pretrained.model(torch.tensor([pretrained.encode_prompt(text)]))[0, -1]


def test_views_show_each_snapshot_and_null_gives_the_trained_weights_back(client: TestClient, run: Path) -> None:
    steps = [e["step"] for e in read_snapshot_index(run)]
    assert len(steps) >= 3 and steps[0] == 0
    info = client.get("/api/info").json()
    assert [s["step"] for s in info["snapshots"]] == steps and info["snapshots"][0]["loss"] is not None
    trained = post(client, "/api/view", {"text": TEXT, "position": -1})
    first = post(client, "/api/view", {"text": TEXT, "position": -1, "snapshot": 0})
    assert first["input"]["snapshot"] == 0 and trained["input"]["snapshot"] is None
    want = logits_of(run, 0, TEXT).topk(10)
    assert first["next"]["ids"][0] == want.indices.tolist()
    assert torch.allclose(torch.tensor(first["next"]["logits"][0]), want.values, atol=1e-3)
    assert first["next"]["logits"] != trained["next"]["logits"]
    lens = post(client, "/api/lens", {"text": TEXT, "snapshot": steps[1]})
    assert lens["top_ids"][-1][-1] == int(logits_of(run, steps[1], TEXT).argmax())
    again = post(client, "/api/view", {"text": TEXT, "position": -1})  # the trained weights, bit for bit
    assert again["next"] == trained["next"] and again["blocks"] == trained["blocks"]
    assert again["next"]["ids"][0][0] == int(logits_of(run, None, TEXT).argmax())


@pytest.mark.parametrize("snapshot", [1, -2, "0", True, 10**6])
def test_a_step_the_run_does_not_have_is_400(client: TestClient, snapshot: Any) -> None:
    for path in ("/api/view", "/api/ablation"):
        response = client.post(path, json={"text": TEXT, "snapshot": snapshot})
        assert response.status_code == 400, response.text
        assert "snapshot must be one of the run's snapshot steps [0, 2" in response.json()["detail"]


def test_a_model_without_snapshots_says_so(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from chat_models import build_chat_model

    explorer = load_explorer(build_chat_model(tmp_path / "m"))
    assert explorer.info()["snapshots"] == []
    with pytest.raises(ValueError, match="snapshot: this run has no weight snapshots"):
        explorer.view(TEXT, snapshot=0)
