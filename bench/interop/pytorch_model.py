"""The PyTorch half of bench/interop/pytorch-vs-envtrain.ts: a long-lived worker that loads a Qwen3 model directory
with transformers and times, on request, one training step or one greedy generation.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout.

    {"cmd": "load", "model": DIR}
    {"cmd": "train", "threads": N, "batch": B, "seqLen": T, "tokens": [B*T ids]}
        forward (labels = the tokens: mean next-token NLL), backward, clip_grad_norm_(1.0), AdamW step
    {"cmd": "generate", "threads": N, "prompts": [[ids], ...], "maxNewTokens": K}
        model.generate, greedy, KV cache, exactly K new tokens per sequence (same-length prompts, no padding)
    {"cmd": "quit"}

Each timed answer holds wall seconds and process CPU seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

state: dict = {}


def load(model_dir: str) -> dict:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.config.use_cache = True
    state["model"] = model
    state["optimizer"] = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "attn_implementation": model.config._attn_implementation,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "parallel_info": torch.__config__.parallel_info(),
    }


def timed(fn):
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall0, time.process_time() - cpu0


def train(req: dict) -> dict:
    torch.set_num_threads(int(req["threads"]))
    model, optimizer = state["model"], state["optimizer"]
    ids = torch.tensor(req["tokens"], dtype=torch.long).view(int(req["batch"]), int(req["seqLen"]))
    model.train()

    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(out.loss)

    loss, wall, cpu = timed(step)
    return {"loss": loss, "seconds": wall, "cpuSeconds": cpu, "threads": torch.get_num_threads()}


def generate(req: dict) -> dict:
    torch.set_num_threads(int(req["threads"]))
    model = state["model"]
    model.eval()
    ids = torch.tensor(req["prompts"], dtype=torch.long)
    k = int(req["maxNewTokens"])

    def run():
        with torch.inference_mode():
            return model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=k,
                min_new_tokens=k,
                do_sample=False,
                use_cache=True,
                pad_token_id=model.config.pad_token_id,
            )

    out, wall, cpu = timed(run)
    new_tokens = int((out.shape[1] - ids.shape[1]) * out.shape[0])
    return {
        "tokens": new_tokens,
        "seconds": wall,
        "cpuSeconds": cpu,
        "threads": torch.get_num_threads(),
        "first": out[0, ids.shape[1] :].tolist()[:16],
    }


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "quit":
            break
        try:
            if cmd == "load":
                answer = load(req["model"])
            elif cmd == "train":
                answer = train(req)
            elif cmd == "generate":
                answer = generate(req)
            else:
                answer = {"error": f"unknown command {cmd}"}
        except Exception as e:  # reported to the driver, which fails the run
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
