"""The explorer's interpretability views (``/api/lens``, ``/api/attribution``, ``/api/patching``, ``/api/ablation``),
in-process through FastAPI's ``TestClient``: each view's numbers are those of the :mod:`attnkit.models` function
it reads, a switched-off head changes the next-token distribution and switching none changes nothing (bit for bit),
and every bad input is a 400 that names its field, never a 500."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.interop import Pretrained, load_pretrained
from attnkit.models.lens import logit_attribution, logit_lens
from attnkit.models.patching import logit_diff, patch_residual, target_logprob
from attnkit.viz.explorer import DecoderExplorer, load_explorer
from attnkit.viz.explorer.app import create_explore_app
from attnkit.viz.explorer.interpret import ablation_view, lens_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model

LOCAL = "http://127.0.0.1"  # the Guard refuses TestClient's default Host ("testserver") on loopback
TEXT = "The old owl sat on the"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Pretrained:
    torch.manual_seed(0)
    return load_pretrained(build_chat_model(tmp_path_factory.mktemp("llama") / "m"))


@pytest.fixture(scope="module")
def explorer(llama: Pretrained) -> DecoderExplorer:
    out = load_explorer(llama)
    assert isinstance(out, DecoderExplorer)
    return out


@pytest.fixture(scope="module")
def client(explorer: DecoderExplorer) -> Iterator[TestClient]:
    with TestClient(create_explore_app(explorer), base_url=LOCAL) as c:
        yield c


def ids_of(llama: Pretrained, text: str) -> torch.Tensor:
    return torch.tensor([llama.encode_prompt(text)])


def ok(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["server-timing"].startswith("view;dur=")
    return response.json()


def test_the_lens_view_is_the_logit_lens(client: TestClient, llama: Pretrained) -> None:
    out = ok(client, "/api/lens", {"text": TEXT})
    ids = ids_of(llama, TEXT)
    lens = logit_lens(llama.model, ids)
    probs, top = lens.top(1)
    assert out["ids"] == ids[0].tolist() and len(out["tokens"]) == ids.shape[1]
    assert out["rows"] == ["embed", "block 1", "block 2"] and out["hooks"] == lens.names
    assert out["top_ids"] == top[:, 0, :, 0].tolist()
    assert torch.allclose(torch.tensor(out["top_probs"]), probs[:, 0, :, 0], atol=1e-4)
    # the last row is the model's own next-token distribution
    own = llama.model(ids)[0].float().softmax(-1).max(-1)
    assert out["top_ids"][-1] == own.indices.tolist()
    assert torch.allclose(torch.tensor(out["top_probs"][-1]), own.values, atol=1e-4)


def test_the_attribution_view_is_logit_attribution(client: TestClient, llama: Pretrained) -> None:
    ids = ids_of(llama, TEXT)
    top = int(llama.model(ids)[0, -1].argmax())
    out = ok(client, "/api/attribution", {"text": TEXT})  # default: the top next token at the last position
    assert out["target"]["id"] == top and out["position"] == ids.shape[1] - 1
    parts = logit_attribution(llama.model, ids, top)
    assert torch.allclose(torch.tensor(out["heads"]), parts.heads[0, -1], atol=1e-4)
    assert torch.allclose(torch.tensor(out["mlps"]), parts.mlps[0, -1], atol=1e-4)
    whole = sum(map(sum, out["heads"])) + sum(out["mlps"]) + out["embed"] + out["rest"]
    assert whole == pytest.approx(out["total"], abs=1e-2)
    with torch.no_grad():
        assert out["total"] == pytest.approx(float(llama.model(ids)[0, -1, top]), abs=1e-3)
    other = ok(client, "/api/attribution", {"text": TEXT, "target": 7, "position": 1})
    parts = logit_attribution(llama.model, ids, 7)
    assert other["target"]["id"] == 7 and other["position"] == 1
    assert torch.allclose(torch.tensor(other["heads"]), parts.heads[0, 1], atol=1e-4)


def test_the_patching_view_is_patch_residual(client: TestClient, llama: Pretrained) -> None:
    clean, corrupted = "The old owl sat on the", "The old cat sat on the"
    a, b = ids_of(llama, clean), ids_of(llama, corrupted)
    assert a.shape == b.shape
    out = ok(client, "/api/patching", {"clean": clean, "corrupted": corrupted})
    top_a, top_b = int(llama.model(a)[0, -1].argmax()), int(llama.model(b)[0, -1].argmax())
    metric = target_logprob(top_a) if top_a == top_b else logit_diff(top_a, top_b)
    expected = patch_residual(llama.model, a, b, metric)
    assert len(out["scores"]) == 2 and len(out["scores"][0]) == a.shape[1]
    assert torch.allclose(torch.tensor(out["scores"]), expected.scores, atol=1e-3)
    assert out["clean"] == pytest.approx(expected.clean, abs=1e-3)
    # the first block's input differs at the changed token only: patching it there gives the clean run, elsewhere
    # the corrupted one
    [changed] = (a[0] != b[0]).nonzero()[:, 0].tolist()
    assert out["scores"][0] == [pytest.approx(1.0 if i == changed else 0.0, abs=1e-3) for i in range(a.shape[1])]


def test_switched_off_heads_change_the_distribution_and_none_changes_nothing(
    client: TestClient, explorer: DecoderExplorer, llama: Pretrained
) -> None:
    ids = ids_of(llama, TEXT)
    own = llama.model(ids)[0, -1].float().softmax(-1)
    none = ablation_view(explorer, TEXT, [])
    assert none["tv"] == 0.0 and none["base"] == none["ablated"]
    top = own.topk(10)
    assert none["base"]["ids"] == top.indices.tolist()
    assert none["base"]["probs"] == [round(p, 6) for p in top.values.tolist()]  # temperature 1: the model's own
    out = ok(client, "/api/ablation", {"text": TEXT, "heads": [[1, 0], [0, 3], [1, 0]]})
    assert out["heads"] == [[0, 3], [1, 0]] and out["tv"] > 1e-4
    assert out["base"] == none["base"] and out["ablated_of_base"] != none["ablated_of_base"]

    def zero(z: torch.Tensor, hook: Any) -> torch.Tensor:
        z = z.clone()
        z[:, :, 3 if hook.name.startswith("blocks.0.") else 0] = 0
        return z

    from attnkit.nn.hooks import hooks

    with hooks(llama.model, {"blocks.0.attn.hook_z": zero, "blocks.1.attn.hook_z": zero}), torch.no_grad():
        ablated = llama.model(ids)[0, -1].float().softmax(-1)
    assert out["ablated"]["ids"] == ablated.topk(10).indices.tolist()


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/api/lens", {}, 'no "text"'),
        ("/api/lens", {"text": 3}, "text must be a text"),
        ("/api/lens", {"text": "x", "layer": 1}, "unknown field(s) ['layer']"),
        ("/api/lens", {"text": "\ud800"}, "the text: a lone surrogate"),
        ("/api/lens", {"text": "the " * 200}, "past the model's context of 128 tokens"),
        ("/api/attribution", {"text": TEXT, "position": 99}, "position must be an int in [-"),
        ("/api/attribution", {"text": TEXT, "position": True}, "position must be an int"),
        ("/api/attribution", {"text": TEXT, "target": 10**9}, "target must be a token id in [0, "),
        ("/api/attribution", {"text": TEXT, "target": "the old owl"}, "target 'the old owl' is"),
        ("/api/patching", {"clean": TEXT}, 'no "corrupted"'),
        ("/api/patching", {"clean": TEXT, "corrupted": "The"}, "corrupted is 1 tokens and clean"),
        ("/api/patching", {"clean": TEXT, "corrupted": TEXT}, "give the same metric"),
        ("/api/ablation", {"text": TEXT, "heads": [[2, 0]]}, "heads: [2, 0] is not a head of this model"),
        ("/api/ablation", {"text": TEXT, "heads": [[0, 0, 1]]}, "heads must be a list of [layer, head] pairs"),
        ("/api/ablation", {"text": TEXT, "heads": "0,1"}, "heads must be a list of [layer, head] pairs"),
        ("/api/ablation", {"text": TEXT, "heads": [[0, True]]}, "heads must be a list"),
    ],
)
def test_bad_inputs_are_400_naming_the_field(client: TestClient, path: str, body: Any, message: str) -> None:
    # as JSON with ASCII escapes: a lone surrogate travels as "\\ud800"
    response = client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"], response.json()


def test_a_body_that_is_no_object_is_400(client: TestClient) -> None:
    response = client.post("/api/ablation", json=[1, 2])
    assert response.status_code == 400 and "must be a JSON object" in response.json()["detail"]


def test_other_models_say_the_views_read_decoders(client: TestClient) -> None:
    class Encoder:
        kind = "encoder"

    with pytest.raises(ValueError, match="this explorer shows a encoder model: explore a decoder"):
        lens_view(Encoder(), TEXT)  # type: ignore[arg-type]  # a stand-in Explorer
