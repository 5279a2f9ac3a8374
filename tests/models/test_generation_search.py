"""Greedy decoding and beam search written once (attnkit.models.generation) for both families: beam size 1
is greedy decoding for the language model and the translator, and beam search finds a higher-scoring
continuation than greedy on a language model whose logits make greedy myopic."""

from __future__ import annotations

import pytest
import torch

from attnkit.models.generation import beam_search, greedy_decode, left_pad
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

PROMPTS = [[1, 5, 9], [1, 7, 3, 22, 8, 30, 4], [1], [1, 12, 14, 16, 18]]


def _lm(**kw: object) -> LanguageModel:
    torch.manual_seed(0)
    config = LanguageModelConfig(
        vocab_size=40, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0, **kw
    )  # fmt: skip
    model = LanguageModel(config).eval()
    with torch.no_grad():
        model.token_embedding.weight.mul_(10)
    return model


@pytest.mark.parametrize("max_len", [64, 9])  # 9: the beams slide their window past the context
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_language_model_beam_size_1_is_greedy(max_len: int, length_penalty: float) -> None:
    model = _lm(positional="rotary", max_len=max_len)
    model.config.eos_id = 7  # reached by some rows
    ids, mask = left_pad(PROMPTS, model.config.pad_id)
    greedy = greedy_decode(model, ids, mask, max_len=10)
    beam = beam_search(model, ids, mask, beam_size=1, max_len=10, length_penalty=length_penalty)
    assert beam.token_lists() == greedy.token_lists()
    torch.testing.assert_close(beam.log_probs, greedy.log_probs)
    generated = model.generate(PROMPTS, 10, temperature=0.0)[:, ids.shape[1] :]
    assert generated[:, : greedy.tokens.shape[1]].tolist() == greedy.tokens.tolist()
    assert (
        model.generate(PROMPTS, 10, num_beams=1, temperature=0.0).tolist()
        == model.generate(PROMPTS, 10, temperature=0.0).tolist()
    )
    uncached = greedy_decode(model, ids, mask, max_len=10, use_cache=False)
    assert uncached.token_lists() == greedy.token_lists()


def test_translator_beam_size_1_is_greedy() -> None:
    torch.manual_seed(0)
    config = Seq2SeqConfig(
        src_vocab_size=20, tgt_vocab_size=20, d_model=32, num_heads=4, num_layers=2, dim_feedforward=64, dropout=0.0
    )
    model = Seq2SeqTransformer(config).eval()
    src = torch.randint(3, 20, (5, 7))
    greedy = greedy_decode(model, src, max_len=10)
    beam = beam_search(model, src, beam_size=1, max_len=10)
    assert beam.token_lists() == greedy.token_lists()
    torch.testing.assert_close(beam.log_probs, greedy.log_probs)


def _bigram_lm(next_probs: dict[int, dict[int, float]], vocab: int = 8) -> LanguageModel:
    """A language model whose next token depends on the last one only, with the given probabilities
    (the rest share a tiny remainder): blocks that add nothing, and a head solved for the logits."""
    config = LanguageModelConfig(
        vocab_size=vocab, d_model=vocab + 2, num_heads=1, num_layers=1, dim_feedforward=4, dropout=0.0,
        positional="rotary", tie_weights=False, bias=False, max_len=16,
    )  # fmt: skip
    model = LanguageModel(config).eval()
    logits = torch.full((vocab, vocab), -20.0)
    for prev, probs in next_probs.items():
        for token, p in probs.items():
            logits[prev, token] = torch.tensor(p).log()
    with torch.no_grad():
        for layer in model.decoder.layers:  # each block adds nothing to its input
            layer.self_attn.out_proj.weight.zero_()
            layer.ff.linear2.weight.zero_()
        model.token_embedding.weight.copy_(torch.eye(vocab, vocab + 2))
        normed = model.decoder.norm(model.token_embedding.weight)  # [V, D]: what the head sees after token i
        # the minimum-norm solution through the pseudo-inverse (SVD): lstsq's default CPU driver (gelsy) gave a
        # wrong solution for this under-determined system in about 1 call in 20, at random
        head = torch.linalg.pinv(normed.double()) @ logits.double()  # [D, V]
        model.lm_head.weight.copy_(head.T.float())
        assert torch.allclose(model.lm_head(normed), logits, atol=1e-3), "the head does not give the logits"
    return model


def test_beam_search_beats_myopic_greedy_on_a_language_model() -> None:
    eos = 2
    # greedy takes 3 (0.4) then has only a 0.34 EOS; 4 (0.35) is followed by EOS for sure
    model = _bigram_lm(
        {
            1: {3: 0.4, 4: 0.35, 5: 0.25},
            3: {eos: 0.34, 5: 0.33, 6: 0.33},
            4: {eos: 1.0},
            5: {eos: 1.0},
            6: {eos: 1.0},
        }
    )
    prompt = torch.tensor([[1]])
    greedy = greedy_decode(model, prompt, max_len=4)
    beam = beam_search(model, prompt, beam_size=2, max_len=4, length_penalty=1.0)
    assert greedy.token_lists() == [[3]] and beam.token_lists() == [[4]]
    assert float(beam.log_probs[0]) > float(greedy.log_probs[0])
    torch.testing.assert_close(beam.log_probs, torch.tensor([0.35]).log(), atol=1e-3, rtol=0)
    assert model.generate([[1]], 4, temperature=0.0).tolist() == [[1, 3, eos]]
    assert model.generate([[1]], 4, num_beams=2).tolist() == [[1, 4, eos]]
    with pytest.raises(ValueError, match="num_beams > 1 is beam search"):
        model.generate([[1]], 4, num_beams=2, top_k=3)
