"""transformers and tokenizers as judges of envtrain's model files, tokenizer and chat template.

Not a test module: the TypeScript half of the interop suite (interop/test/Transformers.test.ts,
interop/test/Qwen3Tokenizer.test.ts) runs `python interop/python/hf_judge.py COMMAND` with a JSON request on stdin
and compares envtrain's answers with the JSON this prints. Commands:

- `tokenize {dir, texts}`: ids of each text from AutoTokenizer and from a bare `tokenizers.Tokenizer` on the same
  tokenizer.json, and AutoTokenizer's decoding of those ids (with and without special tokens).
- `render {dir, cases: [{messages, tools?, add_generation_prompt, enable_thinking?}]}`: apply_chat_template's text
  and its token ids.
- `make {out, tokenizer_dir, seed, variants: [{name, tie, dtype, max_shard_size?}]}`: small Qwen3 models made and
  saved by transformers itself (Qwen3Config, Qwen3ForCausalLM, save_pretrained), every weight drawn at random
  (norm weights around 1, not 1, so a misread norm shows), with AutoTokenizer's save of `tokenizer_dir`.
- `score {models: [{dir, sequences, prompts, max_new_tokens}]}`: AutoModelForCausalLM in float32 (a bf16
  checkpoint is upcast exactly): per sequence log p(tokens[i+1] | tokens[..i]), and per prompt the greedy
  continuation of model.generate (stopping at generation_config's EOS ids).

Several commands in one process (torch and transformers take seconds to import): `hf_judge.py make score` reads
`{"make": {...}, "score": {...}}` and prints the results keyed the same way, running the commands in order.

Runs offline: no model hub is ever contacted.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM  # noqa: E402


def tokenize(req: dict) -> dict:
    tok = AutoTokenizer.from_pretrained(req["dir"])
    raw = Tokenizer.from_file(os.path.join(req["dir"], "tokenizer.json"))
    ids = [tok(text, add_special_tokens=False)["input_ids"] for text in req["texts"]]
    return {
        "ids": ids,
        "raw_ids": [raw.encode(text, add_special_tokens=False).ids for text in req["texts"]],
        "decoded": [tok.decode(x, skip_special_tokens=False) for x in ids],
        "decoded_skip": [tok.decode(x, skip_special_tokens=True) for x in ids],
    }


def render(req: dict) -> dict:
    tok = AutoTokenizer.from_pretrained(req["dir"])
    texts, ids = [], []
    for case in req["cases"]:
        kwargs = {"enable_thinking": case["enable_thinking"]} if "enable_thinking" in case else {}
        common = dict(tools=case.get("tools"), add_generation_prompt=case["add_generation_prompt"], **kwargs)
        texts.append(tok.apply_chat_template(case["messages"], tokenize=False, **common))
        out = tok.apply_chat_template(case["messages"], tokenize=True, **common)
        ids.append(list(out["input_ids"] if hasattr(out, "keys") else out))
    return {"texts": texts, "ids": ids}


def make(req: dict) -> dict:
    tok = AutoTokenizer.from_pretrained(req["tokenizer_dir"])
    made = []
    for i, variant in enumerate(req["variants"]):
        config = Qwen3Config(
            vocab_size=req.get("vocab_size", 151936),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=512,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            tie_word_embeddings=variant["tie"],
            bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
            pad_token_id=tok.pad_token_id,
        )
        torch.manual_seed(req["seed"] + i)
        model = Qwen3ForCausalLM(config)
        generator = torch.Generator().manual_seed(req["seed"] + i)
        with torch.no_grad():
            for name, p in model.named_parameters():
                noise = torch.randn(p.shape, generator=generator)
                p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else 0.08 * noise)
        model = model.to(torch.bfloat16 if variant["dtype"] == "bfloat16" else torch.float32)
        out = os.path.join(req["out"], variant["name"])
        extra = {"max_shard_size": variant["max_shard_size"]} if "max_shard_size" in variant else {}
        model.save_pretrained(out, **extra)
        tok.save_pretrained(out)
        made.append({"name": variant["name"], "dir": out, "files": sorted(os.listdir(out))})
    return {"made": made}


def score(req: dict) -> dict:
    results = []
    for m in req["models"]:
        model = AutoModelForCausalLM.from_pretrained(m["dir"], dtype=torch.float32)
        model.eval()
        logprobs, greedy = [], []
        with torch.no_grad():
            for seq in m.get("sequences", []):
                ids = torch.tensor([seq])
                logits = model(ids).logits.float()
                lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
                logprobs.append(lp.tolist())
            for prompt in m.get("prompts", []):
                ids = torch.tensor([prompt])
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=m["max_new_tokens"],
                )
                greedy.append(out[0, len(prompt):].tolist())
        results.append({
            "dir": m["dir"],
            "logprobs": logprobs,
            "greedy": greedy,
            "tied": bool(model.config.tie_word_embeddings),
            "eos_token_id": model.generation_config.eos_token_id,
        })
    return {"models": results}


COMMANDS = {"tokenize": tokenize, "render": render, "make": make, "score": score}

if __name__ == "__main__":
    request = json.loads(sys.stdin.read())
    names = sys.argv[1:]
    if len(names) == 1:
        result = COMMANDS[names[0]](request)
    else:
        result = {name: COMMANDS[name](request[name]) for name in names}
    json.dump(result, sys.stdout, ensure_ascii=False)
