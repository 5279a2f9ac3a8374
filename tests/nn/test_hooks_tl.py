"""Equal to TransformerLens: a random GPT-2 and a random Llama (every parameter perturbed), built locally with
transformers, read by attnkit's importer and by TransformerLens' bridge (offline): every activation both
name agrees within 1e-4, and zeroing one head's output gives the same logits in both."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import Tensor

from attnkit.interop import load_pretrained
from attnkit.nn.hooks import HookPoint, hook_points, hooks, run_with_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
from interop_parity import perturb

VOCAB = 64


def _build(kind: str, folder: Path) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(5)
    if kind == "gpt2":
        hf: torch.nn.Module = GPT2LMHeadModel(
            GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=1)
        )
    else:
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                             bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)  # fmt: skip
        hf = LlamaForCausalLM(config)
    perturb(hf, seed=5)
    hf.save_pretrained(folder)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t2"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, bos_token="t0", eos_token="t1", unk_token="t2").save_pretrained(
        folder
    )
    return hf.eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_every_activation_equals_transformer_lens(kind: str, tmp_path: Path) -> None:
    from transformer_lens.model_bridge import TransformerBridge

    hf = _build(kind, tmp_path)
    bridge = TransformerBridge.boot_transformers(str(tmp_path), hf_model=hf)
    ours = load_pretrained(tmp_path).model.eval()
    ids = torch.randint(0, VOCAB, (2, 10), generator=torch.Generator().manual_seed(0))
    tl_logits, tl = bridge.run_with_cache(ids)
    cache = run_with_cache(ours, ids)
    compared = [name for name in cache if name in tl]
    expected = {"hook_embed", "blocks.1.attn.hook_pattern", "blocks.0.mlp.hook_post", "ln_final.hook_out"}
    expected |= {"blocks.1.attn.hook_rot_q", "blocks.0.mlp.hook_pre_linear"} if kind == "llama" else {"hook_pos_embed"}
    assert expected <= set(compared) and len(compared) >= 29
    for name in compared:
        theirs, mine = tl[name], cache[name]
        assert theirs.shape == mine.shape, name
        keep = theirs > -1e30 if name.endswith("hook_attn_scores") else torch.ones_like(theirs, dtype=torch.bool)
        torch.testing.assert_close(mine[keep], theirs[keep], atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(cache.logits, tl_logits, atol=1e-4, rtol=1e-4)

    def zero_head(z: Tensor, hook: object) -> Tensor:
        z = z.clone()
        z[:, :, 1] = 0.0
        return z

    with torch.no_grad(), hooks(ours, {"blocks.0.attn.hook_z": zero_head}):
        patched = ours(ids)
    theirs_patched = bridge.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    assert not torch.allclose(patched, cache.logits, atol=1e-3)
    torch.testing.assert_close(patched, theirs_patched, atol=1e-4, rtol=1e-4)
    assert isinstance(hook_points(ours)["blocks.0.attn.hook_z"], HookPoint)
