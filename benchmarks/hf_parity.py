"""Check: Llama, Mistral and Qwen2 checkpoints of a realistic shape, loaded by attnkit and exported back,
compute what Hugging Face ``transformers`` computes (a correctness check, no timing).

Run::

    .venv/bin/python benchmarks/hf_parity.py            # 8 layers, width 512, vocabulary 32000 (~1 minute)
    .venv/bin/python benchmarks/hf_parity.py --quick    # tiny sizes: a smoke test

For each family a random ``...ForCausalLM`` is built locally (nothing downloaded): 8 query heads over
2 key/value heads (grouped-query attention), SwiGLU feed-forward 1408, context 512; Llama with Llama
3.1's ``llama3`` rope scaling (factor 8, original context 128, theta 500000), Mistral with a sliding
window of 64, Qwen2 with its q/k/v biases. Every parameter is then perturbed with seeded noise
(``tests/interop/interop_parity.py``: a fresh init leaves every bias at 0 and every norm weight at 1,
where a dropped bias or a swapped norm weight would not show). It is saved with ``save_pretrained``,
loaded with :func:`attnkit.interop.load_pretrained`, and compared in float32 with transformers' eager attention:
the largest logit difference over 2 × 256 tokens, 32 greedy tokens (attnkit's KV cache against
``generate``), and the logits of the folder :func:`attnkit.interop.export_hf` writes, loaded back by
``AutoModelForCausalLM``. Exits 1 when a difference exceeds ``--tol`` (1e-5) or a token differs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from attnkit.interop import export_hf, load_pretrained

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))
from interop_parity import perturb  # the helper the parity tests use

LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 128,
}


def check(model_type: str, extra: dict, quick: bool, tol: float) -> bool:
    sizes = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, vocab_size=500)
    if not quick:
        sizes = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, vocab_size=32000)
    config = AutoConfig.for_model(
        model_type,
        **sizes,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        **extra,
    )
    ref = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    perturb(ref, seed=sum(map(ord, model_type)))  # q/k/v biases and norm weights included
    ids = torch.randint(3, config.vocab_size, (2, 256))
    with tempfile.TemporaryDirectory() as folder:
        ref.save_pretrained(folder)
        ours = load_pretrained(folder).model
        export_hf(ours, f"{folder}/exported")
        back = AutoModelForCausalLM.from_pretrained(f"{folder}/exported", attn_implementation="eager").eval()
        with torch.no_grad():
            expected = ref(ids).logits
            diff = (ours(ids) - expected).abs().max().item()
            diff_back = (back(ids).logits - expected).abs().max().item()
    prompt = ids[:, :8]
    hf_tokens = ref.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=32,
        do_sample=False,
        pad_token_id=ours.config.pad_id,  # what attnkit writes after a row's end token (here the end id)
        eos_token_id=ours.config.eos_id,
    )
    same = ours.generate(prompt, 32, temperature=0.0).tolist() == hf_tokens.tolist()
    params = sum(p.numel() for p in ours.parameters()) / 1e6
    print(
        f"{model_type:8s} {params:5.1f}M parameters: max |logit diff| {diff:.2e} (2 x 256 tokens), "
        f"32 greedy tokens identical: {same}, exported and reloaded by transformers: max diff {diff_back:.2e}",
        flush=True,
    )
    return diff <= tol and diff_back <= tol and same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--tol", type=float, default=1e-5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    families = [("llama", {"rope_parameters": LLAMA3}), ("mistral", {"sliding_window": 64}), ("qwen2", {})]
    ok = [check(model_type, extra, args.quick, args.tol) for model_type, extra in families]
    if not all(ok):
        print(f"FAILED: a difference above {args.tol} or a different token", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
