"""PEFT as the judge of envtrain's LoRA adapters (issue 37).

Not a test module: interop/test/Peft.test.ts runs `python interop/python/peft_judge.py COMMAND` with a JSON request
on stdin and compares envtrain's answers with the JSON this prints; test_peft_merge.py imports its model makers.
Commands:

- `make {out, dtype, seed, lora}`: a small Qwen3 base made and saved by transformers (random weights, norm weights
  around 1) in `out/base`, and, if `lora` (PEFT `LoraConfig` keyword arguments) is given, an adapter PEFT makes on it
  with init_lora_weights=False (B is not zero) and saves in `out/adapter`.
- `score {base, adapter, sequences, prompts, max_new_tokens}`: `PeftModel.from_pretrained` of the adapter on the
  base, float32, eval mode: per sequence log p(tokens[i+1] | tokens[..i]), per prompt the greedy continuation of
  `generate`, and the adapter tensors as PEFT holds them (name → flat list).
- `grad {base, adapter, config, prompt_ids, completion_ids, tool_mask, advantages, old_logprobs,
  num_items_in_batch}`: TRL's own `GRPOTrainer.compute_loss` (its real per-token logprob forward, through the PEFT
  model in float64, train mode) on those inputs, `backward()`, and the gradients PEFT's LoRA parameters receive.
  The trainer is built as trl_loss.py builds it, from a real `GRPOConfig` made of `config`.
- `same_weights {a, b}`: whether two model directories load in transformers (each in its stored dtype) to identical
  parameters, with both dtypes.

Runs offline: no model hub is ever contacted.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM  # noqa: E402

VOCAB = 96
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def make_base(out: str, dtype: torch.dtype, tie: bool, seed: int) -> None:
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        eos_token_id=VOCAB - 1,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else 0.08 * noise)
    model.to(dtype).save_pretrained(out)


def make_adapter(base: str, out: str, seed: int = 7, **lora: object) -> None:
    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", init_lora_weights=False, **lora))
    peft_model.save_pretrained(out)


def make(req: dict) -> dict:
    base = os.path.join(req["out"], "base")
    make_base(base, DTYPES[req.get("dtype", "float32")], req.get("tie", True), req["seed"])
    made = {"base": base}
    if req.get("lora") is not None:
        made["adapter"] = os.path.join(req["out"], "adapter")
        make_adapter(base, made["adapter"], seed=req["seed"], **req["lora"])
    return made


def score(req: dict) -> dict:
    base = AutoModelForCausalLM.from_pretrained(req["base"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, req["adapter"]).eval()
    logprobs, greedy = [], []
    with torch.no_grad():
        for seq in req.get("sequences", []):
            ids = torch.tensor([seq])
            logits = model(input_ids=ids).logits.float()
            lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
            logprobs.append(lp.tolist())
        for prompt in req.get("prompts", []):
            ids = torch.tensor([prompt])
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=req["max_new_tokens"],
            )
            greedy.append(out[0, len(prompt):].tolist())
    tensors = {
        name.replace(".default", ""): p.detach().float().flatten().tolist()
        for name, p in model.named_parameters()
        if "lora_" in name
    }
    return {"logprobs": logprobs, "greedy": greedy, "tensors": tensors}


def grad(req: dict) -> dict:
    import tempfile

    from trl.trainer import add_fused_lm_head
    from trl_loss import trainer_for

    base = AutoModelForCausalLM.from_pretrained(req["base"], dtype=torch.float64)
    model = PeftModel.from_pretrained(base, req["adapter"], is_trainable=True).to(torch.float64)
    model.train()
    prompt = torch.tensor(req["prompt_ids"])
    completion = torch.tensor(req["completion_ids"])
    inputs = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": completion,
        "completion_mask": torch.ones(completion.shape, dtype=torch.float64),
        "tool_mask": torch.tensor(req["tool_mask"], dtype=torch.float64),
        "advantages": torch.tensor(req["advantages"], dtype=torch.float64),
        "num_items_in_batch": torch.tensor(float(req["num_items_in_batch"])),
    }
    if req.get("old_logprobs") is not None:
        inputs["old_per_token_logps"] = torch.tensor(req["old_logprobs"], dtype=torch.float64)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = trainer_for({"config": req["config"], "samplerCorrection": None}, out_dir)
        trainer.model = model
        # As GRPOTrainer.__init__ does: the fused LM head that returns per-token logprobs and entropies.
        add_fused_lm_head(
            model.get_base_model(),
            temperature=trainer.args.temperature,
            cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32,
            outputs=("log_probs", "entropy"),
        )
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
    grads = {
        name.replace(".default", ""): p.grad.flatten().tolist()
        for name, p in model.named_parameters()
        if p.requires_grad
    }
    return {"loss": loss.item(), "grads": grads}


def same_weights(req: dict) -> dict:
    a = AutoModelForCausalLM.from_pretrained(req["a"], dtype="auto")
    b = AutoModelForCausalLM.from_pretrained(req["b"], dtype="auto")
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    differ = [n for n in pa if n not in pb or pa[n].dtype != pb[n].dtype or not torch.equal(pa[n], pb[n])]
    return {
        "dtypes": sorted({str(p.dtype) for p in pa.values()} | {str(p.dtype) for p in pb.values()}),
        "parameters": len(pa),
        "differ": differ,
    }


COMMANDS = {"make": make, "score": score, "grad": grad, "same_weights": same_weights}

if __name__ == "__main__":
    request = json.loads(sys.stdin.read())
    names = sys.argv[1:]
    if len(names) == 1:
        result = COMMANDS[names[0]](request)
    else:
        result = {name: COMMANDS[name](request[name]) for name in names}
    json.dump(result, sys.stdout)
