"""TRL's own GRPO loss on given per-token logprobs: the judge of envtrain's `Loss.compute` (interop/test/TrlLoss.test.ts).

Reads a JSON list of cases on stdin and writes, for each, the loss, its gradient with respect to the per-token policy
logprobs, the sampler importance-sampling ratio and TRL's loss-side metrics. Nothing of the loss is re-implemented:

- the loss and its metrics are `GRPOTrainer.compute_loss` itself, on a trainer made with `object.__new__` whose
  attributes are set from a real `GRPOConfig` as `GRPOTrainer.__init__` sets them, with a real (single-process)
  `Accelerator`; the model forward (`_get_per_token_logps_and_entropies`) is replaced by one that returns the given
  logprobs as a leaf tensor with `requires_grad`, so `backward()` gives d loss / d logprobs;
- the sampler correction (vLLM importance sampling, every mode) is the block of
  `GRPOTrainer._generate_and_score_completions` that computes it, taken from TRL's installed source text and run on
  the given old and sampling logprobs (it is inline there, not a function of its own).

Everything is float64.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import tempfile
import textwrap
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

torch.set_default_dtype(torch.float64)

IS_START = "# Compute the importance sampling ratio when using vLLM"
IS_END = "# Compute the per-token log probabilities for the reference model"


def importance_sampling_block():
    """TRL's own sampler-correction code, cut out of `_generate_and_score_completions` and compiled."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    # From the start of the marker's line (its indentation included) to the start of the next block's.
    start = source.rindex("\n", 0, source.index(IS_START)) + 1
    end = source.rindex("\n", 0, source.index(IS_END)) + 1
    return compile(textwrap.dedent(source[start:end]), "trl-importance-sampling", "exec")


IS_CODE = importance_sampling_block()


def trainer_for(case: dict, out_dir: str) -> GRPOTrainer:
    args = GRPOConfig(output_dir=out_dir, report_to="none", use_cpu=True, **case["config"])
    trainer = object.__new__(GRPOTrainer)
    # The attributes `_compute_loss` and `get_high_entropy_mask` read, as `GRPOTrainer.__init__` sets them.
    trainer.args = args
    # Made after the config: TrainingArguments resets accelerate's shared state.
    trainer.accelerator = Accelerator(cpu=True)
    trainer.loss_type = args.loss_type
    trainer.beta = args.beta
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.max_completion_length = args.max_completion_length
    trainer.use_vllm = case["samplerCorrection"] is not None
    trainer.vllm_importance_sampling_correction = case["samplerCorrection"] is not None
    trainer.vllm_importance_sampling_mode = args.vllm_importance_sampling_mode
    trainer.vllm_importance_sampling_clip_min = args.vllm_importance_sampling_clip_min
    trainer.vllm_importance_sampling_clip_max = args.vllm_importance_sampling_clip_max
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    trainer.aux_loss_enabled = False
    trainer.entropy_coef = args.entropy_coef
    trainer.use_adaptive_entropy = False
    trainer._entropy_bonus_enabled = args.entropy_coef != 0.0
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    model = torch.nn.Linear(1, 1)
    model.train(case.get("mode", "train") == "train")
    trainer.model = model
    return trainer


def run_case(case: dict, out_dir: str) -> dict:
    rows, length = case["rows"], case["length"]

    def tensor(name):
        return torch.tensor(case[name], dtype=torch.float64).reshape(rows, length)

    logps = tensor("logprobs").clone().requires_grad_(True)
    completion_mask = tensor("completionMask")
    tool_mask = tensor("toolMask")
    entropies = tensor("entropies")
    trainer = trainer_for(case, out_dir)

    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, length, dtype=torch.long),
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor(case["advantages"], dtype=torch.float64),
        "num_items_in_batch": torch.tensor(float(case["numItemsInBatch"])),
    }
    if case.get("oldLogprobs") is not None:
        inputs["old_per_token_logps"] = tensor("oldLogprobs")
    if case.get("refLogprobs") is not None:
        inputs["ref_per_token_logps"] = tensor("refLogprobs")
    ratio = None
    if case["samplerCorrection"] is not None:
        inputs["sampling_per_token_logps"] = tensor("samplerLogprobs")
        scope = {
            "self": trainer,
            "torch": torch,
            "math": math,
            "old_per_token_logps": inputs["old_per_token_logps"],
            "sampling_per_token_logps": inputs["sampling_per_token_logps"],
            "completion_mask": completion_mask,
            "tool_mask": tool_mask,
        }
        exec(IS_CODE, scope)
        ratio = scope["vllm_importance_sampling_ratio"]
        inputs["importance_sampling_ratio"] = ratio

    def forward(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == length
        return logps, entropies, None

    trainer._get_per_token_logps_and_entropies = forward
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    mode = "train" if trainer.model.training else "eval"
    return {
        "loss": loss.item(),
        "gradient": logps.grad.flatten().tolist(),
        "ratio": None if ratio is None else ratio.expand(rows, length).flatten().tolist(),
        "metrics": {k: v[-1] for k, v in trainer._metrics[mode].items()},
    }


def main() -> None:
    cases = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as out_dir:
        json.dump([run_case(case, out_dir) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
