"""The explorer's payload: attention packed and unpacked, masks, the next-token table and its temperatures,
generation stepping equal to ``generate``, the per-task views, and clear errors for bad inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.interop import Pretrained, load_pretrained
from attnkit.models import LanguageModel, LanguageModelConfig
from attnkit.viz.explorer import DecoderExplorer, EncoderExplorer, RunExplorer, load_explorer
from attnkit.viz.explorer.payload import (
    TEMPERATURES,
    next_token_table,
    pack_attention,
    payload_bytes,
    table_probabilities,
    unpack_attention,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chat_models import build_chat_model


def random_maps(layers: int, heads: int, tq: int, tk: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(heads, tq, tk, generator=g).mul(3).softmax(-1) for _ in range(layers)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Pretrained:
    return load_pretrained(build_chat_model(tmp_path_factory.mktemp("llama") / "m", context=160))


def test_dense_attention_round_trips_to_a_byte():
    maps = random_maps(2, 3, 5, 5)
    labels = list("abcde")
    block = pack_attention(maps, name="self-attention", query_labels=labels, key_labels=labels)
    assert block["k"] == 5 and block["indices"] is None and block["kept"] == 1.0
    back = unpack_attention(block)
    assert back.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(back, torch.stack(maps).numpy(), atol=0.5 / 255 + 1e-6)


def test_over_the_budget_each_row_keeps_its_largest_weights():
    maps = random_maps(3, 2, 6, 40, seed=1)
    labels = [str(i) for i in range(40)]
    block = pack_attention(maps, name="x", query_labels=labels[:6], key_labels=labels, budget=3 * 2 * 6 * 8)
    assert block["k"] == 4  # 8 bytes a row: 4 weights and their 4 one-byte positions
    back = unpack_attention(block)
    full = torch.stack(maps).numpy()
    assert (np.count_nonzero(back, axis=-1) <= 4).all()
    top = np.argsort(-full, axis=-1)[..., :4]
    np.testing.assert_allclose(
        np.take_along_axis(back, top, -1), np.take_along_axis(full, top, -1), atol=0.5 / 255 + 1e-6
    )
    assert 0 < block["kept"] < 1


def test_a_135m_shape_update_fits_in_a_megabyte():
    """30 layers x 9 heads x 128 tokens: the packed attention of every head, under 1 MB as JSON."""
    maps = random_maps(30, 9, 128, 128, seed=2)
    labels = [f"t{i}" for i in range(128)]
    block = pack_attention(maps, name="self-attention", query_labels=labels, key_labels=labels, causal=True)
    size = payload_bytes(block)
    assert size <= 1_000_000, size
    assert 1 < block["k"] < 128
    # with 2-byte positions (more than 256 keys) too
    wide = pack_attention(random_maps(30, 9, 20, 300), name="x", query_labels=labels[:20], key_labels=["k"] * 300)
    assert wide["index_bytes"] == 2 and payload_bytes(wide) <= 1_000_000
    assert unpack_attention(wide).shape == (30, 9, 20, 300)


def test_bad_attention_shapes_and_labels_are_refused():
    with pytest.raises(ValueError, match="no attention maps"):
        pack_attention([], name="x", query_labels=[], key_labels=[])
    with pytest.raises(ValueError, match="3 query / 3 key labels"):
        pack_attention(random_maps(1, 1, 4, 4), name="x", query_labels=list("abc"), key_labels=list("abc"))
    with pytest.raises(ValueError, match="key_mask has 2 entries"):
        pack_attention(random_maps(1, 1, 3, 3), name="x", query_labels=list("abc"), key_labels=list("abc"),
                       key_mask=[True, False])  # fmt: skip


def test_the_next_token_table_reweights_exactly_at_every_temperature():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 2
    table = next_token_table(logits, lambda i: f"<{i}>", k=5)
    assert table["tokens"][0] == [f"<{i}>" for i in table["ids"][0]]
    for position in range(3):
        for t in TEMPERATURES:
            got = table_probabilities(table, position, t)
            if t == 0:
                assert got == [1.0, 0.0, 0.0, 0.0, 0.0]
                assert table["ids"][position][0] == int(logits[position].argmax())
                continue
            want = (logits[position] / t).softmax(-1)[table["ids"][position]].tolist()
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-6)
    with pytest.raises(ValueError, match="not one of the table's"):
        table_probabilities(table, 0, 0.3)


def test_a_decoder_view_marks_causality_and_steps_as_generate(llama: Pretrained):
    explorer = load_explorer(llama)
    assert isinstance(explorer, DecoderExplorer)
    view = explorer.view("The old owl")
    prompt = llama.encode_prompt("The old owl")
    assert view["ids"] == prompt and view["prompt_length"] == len(prompt)
    [block] = view["blocks"]
    assert block["causal"] and (block["layers"], block["heads"]) == (2, 4)
    maps = unpack_attention(block)
    assert np.triu(maps, k=1).max() == 0  # nothing above the diagonal: a causal mask
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=len(prompt) / 255)
    assert len(view["next"]["ids"]) == len(prompt)

    for steps in (1, 5):
        greedy = explorer.view("The old owl", steps=steps)
        new = greedy["ids"][len(prompt) :]
        assert llama.decode(new) == llama.generate("The old owl", max_new_tokens=steps)
        assert len(new) == steps or greedy["finished"]
    sampled = explorer.view("The old owl", steps=6, temperature=1.2, seed=7)
    want = llama.generate("The old owl", 6, temperature=1.2, generator=torch.Generator().manual_seed(7))
    assert llama.decode(sampled["ids"][len(prompt) :]) == want
    assert sampled["ids"] != explorer.view("The old owl", steps=6, temperature=1.2, seed=8)["ids"]


def test_bad_decoder_inputs_say_what_was_wrong(llama: Pretrained):
    explorer = load_explorer(llama)
    with pytest.raises(ValueError, match="steps must be an int"):
        explorer.view("x", steps=-1)
    with pytest.raises(ValueError, match="temperature must be a number"):
        explorer.view("x", temperature=-0.5)
    with pytest.raises(ValueError, match="seed must be an int"):
        explorer.view("x", seed="a")  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(ValueError, match="context of 160 tokens"):
        explorer.view("owl " * 200)
    with pytest.raises(ValueError, match="must be a text"):
        explorer.view(None)  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(FileNotFoundError, match="no model at"):
        load_explorer("/no/such/run")


def test_a_30_by_9_decoder_update_of_128_tokens_is_under_a_megabyte(llama: Pretrained):
    tok = llama.tokenizer
    config = LanguageModelConfig.from_preset(
        "llama", vocab_size=tok.vocab_size, d_model=72, num_layers=30, num_heads=9, num_kv_heads=3,
        dim_feedforward=96, max_len=160, pad_id=0, bos_id=0, eos_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LanguageModel(config).eval()
    explorer = DecoderExplorer(Pretrained(model, "lm", tok, Path("shape")))
    text = " ".join(["the old owl sat on the mat"] * 40)
    ids = llama.encode_prompt(text)[:128]
    view = explorer.view(llama.decode(ids))
    assert 120 <= len(view["tokens"]) <= 160
    [block] = view["blocks"]
    assert (block["layers"], block["heads"]) == (30, 9)
    assert payload_bytes(view) <= 1_000_000


def test_an_encoder_view_marks_padding(tmp_path: Path):
    from transformers import BertConfig, BertModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)  # fmt: skip
    BertModel(config).save_pretrained(tmp_path)
    explorer = load_explorer(tmp_path)
    assert isinstance(explorer, EncoderExplorer)
    view = explorer.view("the cat sat")
    assert view["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    [block] = view["blocks"]
    assert not block["causal"] and block["key_mask"] == [True] * 5
    with pytest.raises(ValueError, match="does not generate"):
        explorer.view("the cat", steps=2)


def test_anomaly_view_names_the_odd_item(anomaly_run: Path):
    explorer = load_explorer(anomaly_run)
    assert isinstance(explorer, RunExplorer) and explorer.kind == "anomaly"
    view = explorer.view("0")
    items = view["items"]
    assert len(items["probabilities"]) == 10 == len(view["blocks"][0]["keys"])
    assert items["predicted"] == int(np.argmax(items["probabilities"]))
    assert items["target"] is not None
    assert unpack_attention(view["blocks"][0]).shape == (2, 4, 10, 10)
    with pytest.raises(ValueError, match="out of range"):
        explorer.view("100000")
    with pytest.raises(ValueError, match="type an input"):
        explorer.view("  ")


def test_classify_view_gives_class_probabilities_and_pooled_attention(classify_run: Path):
    explorer = load_explorer(classify_run)
    view = explorer.view("a wonderful film")
    classes = view["classes"]
    assert abs(sum(classes["probabilities"]) - 1) < 1e-5
    assert classes["predicted"] == int(np.argmax(classes["probabilities"]))
    pooled = np.array(classes["pooled_attention"])
    maps = unpack_attention(view["blocks"][0])
    assert pooled.shape == (*maps.shape[:2], maps.shape[-1])
    want = maps[:, :, 0] if classes["pooling"] == "cls" else maps.mean(axis=2)
    np.testing.assert_allclose(pooled, want, atol=2 / 255)


def test_the_command_line_says_what_is_wrong(tmp_path: Path):
    from click.testing import CliRunner

    from attnkit.cli import main

    result = CliRunner().invoke(main, ["explore", "--help"])
    assert result.exit_code == 0 and "--no-browser" in result.output and "--port" in result.output
    result = CliRunner().invoke(main, ["explore", str(tmp_path / "nothing"), "--no-browser"])
    assert result.exit_code == 2 and "no model at" in result.output


def test_a_large_vocabulary_is_exact_at_every_temperature():
    """49152 logits, as a 135M Llama's: every temperature's normaliser over the whole vocabulary (no tail
    approximated), for chosen positions (negative ones refused) and in chunks of positions."""
    logits = torch.randn(6, 49152, generator=torch.Generator().manual_seed(3)) * 3
    logits[:, :2000] += 4  # a heavy head and a long flat tail: what an approximated tail gets wrong at t = 2
    for positions in ([4], None):
        table = next_token_table(logits, str, k=5, positions=positions)
        assert table["positions"] == (positions or list(range(6)))
        for position in table["positions"]:
            for t in TEMPERATURES[1:]:
                want = (logits[position] / t).softmax(-1)[table["ids"][table["positions"].index(position)]]
                np.testing.assert_allclose(table_probabilities(table, position, t), want.tolist(), rtol=2e-3)
    with pytest.raises(ValueError, match="not one of the table's"):
        table_probabilities(next_token_table(logits, str, positions=[1]), 2, 1.0)
    with pytest.raises(ValueError, match=r"position\(s\) \[6\] out of range"):
        next_token_table(logits, str, positions=[6])


def test_one_layer_is_sent_whole_and_the_forward_pass_is_kept(llama: Pretrained, monkeypatch: pytest.MonkeyPatch):
    explorer = load_explorer(llama)
    full = explorer.view("The old owl")
    calls = []
    forward = explorer.model.forward_with_attention
    monkeypatch.setattr(explorer.model, "forward_with_attention", lambda *a: calls.append(1) or forward(*a))
    everything = unpack_attention(full["blocks"][0])
    for layer in (0, 1):
        view = explorer.view("The old owl", layer=layer, position=-1)
        [block] = view["blocks"]
        assert block["only_layer"] == layer and block["layers"] == 2 and block["k"] == len(view["tokens"])
        np.testing.assert_array_equal(unpack_attention(block)[0], everything[layer])
        last = len(view["tokens"]) - 1
        assert view["next"]["positions"] == [last] and view["next"]["ids"] == [full["next"]["ids"][last]]
    assert explorer.view("The old owl", position=0)["next"]["positions"] == [0]
    assert calls == []  # the same input: no forward pass
    explorer.view("The old owl", steps=1, layer=0)
    assert calls == [1]
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\)"):
        explorer.view("The old owl", layer=2)
    with pytest.raises(ValueError, match="position 99 is out of range"):
        explorer.view("The old owl", position=99)
    with pytest.raises(ValueError, match="position must be an int"):
        explorer.view("The old owl", position="last")  # type: ignore[arg-type]  # a wrong type on purpose


def test_submodules_do_not_shadow_the_public_functions():
    """``attnkit.viz.explore`` and ``attnkit.api.explore`` are functions, whatever has been imported before."""
    import importlib

    import attnkit.api
    import attnkit.viz
    import attnkit.viz.explorer.views as views

    for name in ("attnkit.viz.explorer.page", "attnkit.viz.explorer.app", "attnkit.api.exploring"):
        importlib.import_module(name)
    assert views.load_explorer is load_explorer
    assert callable(attnkit.viz.explore) and attnkit.viz.explore.__module__ == "attnkit.viz.explorer.page"
    assert callable(attnkit.api.explore) and attnkit.api.explore.__module__ == "attnkit.api.exploring"
