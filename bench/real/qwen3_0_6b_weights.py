"""Random weights at Qwen3-0.6B's real sizes, made by transformers itself (bench/real/qwen3-0_6b.ts calls this).

The config is Qwen3-0.6B's config.json (28 layers, hidden 1024, 16 query / 8 KV heads of 128, FFN 3072, vocabulary
151,936, tied embeddings); the weights are transformers' own initialisation (`Qwen3ForCausalLM(config)`, seeded), saved
in bfloat16 as the released checkpoint is. No download: the sizes are what matter for time and memory, not the values.

    /work/main/.venv/bin/python bench/real/qwen3_0_6b_weights.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

QWEN3_0_6B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def main(out: Path) -> None:
    torch.manual_seed(0)
    config = Qwen3Config(**QWEN3_0_6B)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    (out / "made-by.json").write_text(json.dumps({"transformers_init_seed": 0, "parameters": params}) + "\n")
    print(f"wrote {out} ({params} parameters)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
