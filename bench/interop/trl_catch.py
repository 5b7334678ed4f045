"""TRL's GRPOTrainer with environment_factory on Catch, timed per step (the TRL half of bench/interop/trl-vs-envtrain.ts).

The environment is the seed's Catch (TRL examples/scripts/openenv/catch.py: tools move(direction) / stay(), reward
max(r, 0) once the episode is done) with the game played in this class instead of an OpenSpiel server, so that both
sides see the same ball for the same row: the ball column comes from envtrain's seeded generator (sfc32 seeded
through splitmix32, packages/env/src/internal/prng.ts), ported below, and the rules are OpenSpiel's catch
(10 x 5 grid, paddle starts in column 3 of 5, 9 steps, +1 caught / -1 missed).

    .venv/bin/python bench/interop/trl_catch.py --model DIR --out result.json [--steps 6 ...]

Writes one JSON object: the config as TRL received it, per-step timings and token counts, TRL's own logged metrics,
and the token ids of the first prompts TRL generated from (the driver compares them with envtrain's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "interop" / "python"))
from catch_tools import (  # noqa: E402  (the environment's tools, shared with the interop test)
    CATCH_COLUMNS,
    CATCH_ROWS,
    CatchTools,
    catch_info_state,
    format_observation,
    reward_from_env,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

# ---------------------------------------------------------------------------------------------------------------
# envtrain's seeded generator (packages/env/src/internal/prng.ts), bit for bit
# ---------------------------------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def _imul(a: int, b: int) -> int:
    return (a * b) & M32


def _splitmix32(seed: int):
    state = [seed & M32]

    def next32() -> int:
        state[0] = (state[0] + 0x9E3779B9) & M32
        z = state[0]
        z = _imul(z ^ (z >> 16), 0x85EBCA6B)
        z = _imul(z ^ (z >> 13), 0xC2B2AE35)
        return (z ^ (z >> 16)) & M32

    return next32


class Prng:
    def __init__(self, seed: int) -> None:
        hi = seed // 4294967296
        mix = _splitmix32((seed & M32) ^ _imul(hi & M32, 0x27D4EB2D))
        self.a, self.b, self.c = mix(), mix(), mix()
        self.d = (mix() | 1) & M32
        for _ in range(12):
            self._next32()

    def _next32(self) -> int:
        t = (((self.a + self.b) & M32) + self.d) & M32
        self.d = (self.d + 1) & M32
        self.a = self.b ^ (self.b >> 9)
        self.b = (self.c + ((self.c << 3) & M32)) & M32
        self.c = ((self.c << 21) & M32) | (self.c >> 11)
        self.c = (self.c + t) & M32
        return t

    def int(self, n: int) -> int:
        return int(self._next32() / 4294967296 * n)


# ---------------------------------------------------------------------------------------------------------------
# Catch: OpenSpiel's rules behind TRL's CatchEnv tools (interop/python/catch_tools.py, shared with the interop test)
# ---------------------------------------------------------------------------------------------------------------


class CatchEnv(CatchTools):
    """The seed's CatchEnv: move(direction) / stay(); reward +1 / -1 at the end; errors once the episode is done."""

    def __init__(self) -> None:
        self.ball_row = 0
        self.ball_col = 0
        self.paddle_col = CATCH_COLUMNS // 2
        self.reward = 0.0
        self.done = False

    def _observation(self) -> str:
        return format_observation(catch_info_state(self.ball_row, self.ball_col, self.paddle_col))

    def reset(self, **kwargs) -> str:
        prng = Prng(int(kwargs["seed"]))
        self.ball_row = 0
        self.ball_col = prng.int(CATCH_COLUMNS)
        self.paddle_col = CATCH_COLUMNS // 2
        self.reward = 0.0
        self.done = False
        return self._observation()

    def _act(self, action_id: int) -> str:
        if self.done:
            raise ValueError("Episode is done.")
        self.ball_row += 1
        self.paddle_col = min(max(self.paddle_col + action_id - 1, 0), CATCH_COLUMNS - 1)
        if self.ball_row >= CATCH_ROWS - 1:
            self.done = True
            self.reward = 1.0 if self.ball_col == self.paddle_col else -1.0
        return self._observation()


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--system", required=True, help="the system message (envtrain's Catch recipe)")
    p.add_argument("--user", required=True, help="the user message before the observation")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--prompts", type=int, default=2, help="prompts per optimizer step")
    p.add_argument("--max-completion-length", type=int, default=960)
    p.add_argument("--temperature", type=float, default=0.4)
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--loss-type", default="dapo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output-dir", default="/tmp/envtrain-bench-trl-catch")
    args = p.parse_args()

    import_started = time.perf_counter()
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    import_seconds = time.perf_counter() - import_started
    torch.set_num_threads(args.threads)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    # envtrain's own chat template is Qwen3's format but not byte-equal to a template TRL knows, so TRL's
    # add_response_schema would refuse it ("Unrecognized chat template"). Its tool calls are Qwen3's, so TRL's own
    # Qwen3 response parser is the right one; setting it is what TRL's error message asks for.
    tokenizer.response_template = qwen3_template
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    rows = args.steps * args.prompts
    dataset = Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "system", "content": args.system},
                    {"role": "user", "content": args.user},
                ],
                "seed": args.first_seed + i,
            }
            for i in range(rows)
        ]
    )

    config = GRPOConfig(
        output_dir=args.output_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.num_generations * args.prompts,
        gradient_accumulation_steps=1,
        max_steps=args.steps,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        beta=args.beta,
        loss_type=args.loss_type,
        scale_rewards="group",
        shuffle_dataset=False,
        chat_template_kwargs={"enable_thinking": False},
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_from_env],
        train_dataset=dataset,
        args=config,
        environment_factory=CatchEnv,
    )

    # Instrumentation: rollout time (generation, tools, rewards, advantages), decode time (the model's generate
    # calls), the prompt ids of each step's first turn, and the tokens of each forward + backward.
    current = {"rollout": 0.0, "decode": 0.0, "decode_calls": 0, "trained": 0, "first_prompts": None}

    original_rollout = trainer._generate_and_score_completions

    def timed_rollout(*a, **k):
        t0 = time.perf_counter()
        out = original_rollout(*a, **k)
        current["rollout"] += time.perf_counter() - t0
        return out

    trainer._generate_and_score_completions = timed_rollout

    original_turn = trainer._generate_single_turn

    def timed_turn(prompt_ids, *a, **k):
        if current["first_prompts"] is None:
            current["first_prompts"] = [list(map(int, ids)) for ids in prompt_ids]
        t0 = time.perf_counter()
        out = original_turn(prompt_ids, *a, **k)
        current["decode"] += time.perf_counter() - t0
        current["decode_calls"] += 1
        return out

    trainer._generate_single_turn = timed_turn

    original_loss = trainer.compute_loss

    def counted_loss(model, inputs, *a, **k):
        current["trained"] += int(inputs["prompt_mask"].sum().item() + inputs["completion_mask"].sum().item())
        return original_loss(model, inputs, *a, **k)

    trainer.compute_loss = counted_loss

    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, _args, state, control, **kwargs):
            current.update(
                rollout=0.0, decode=0.0, decode_calls=0, trained=0, first_prompts=None, started=time.perf_counter()
            )

        def on_step_end(self, _args, state, control, **kwargs):
            seconds = time.perf_counter() - current["started"]
            prompts = current["first_prompts"] or []
            unique = []
            for ids in prompts:
                if ids not in unique:
                    unique.append(ids)
            steps.append(
                {
                    "step": state.global_step,
                    "seconds": seconds,
                    "rollout_seconds": current["rollout"],
                    "decode_seconds": current["decode"],
                    "decode_calls": current["decode_calls"],
                    "update_seconds": seconds - current["rollout"],
                    "trained_tokens": current["trained"],
                    "first_turn_prompt_ids": unique,
                }
            )

    trainer.add_callback(StepTimer())

    started = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - started

    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    for s, log in zip(steps, logs, strict=False):
        s["trl_log"] = log
        s["reward"] = log.get("reward")
        s["completion_tokens"] = log["completions/mean_length"] * args.num_generations * args.prompts
        s["prompt_tokens_first_turn"] = sum(len(ids) for ids in s["first_turn_prompt_ids"]) * args.num_generations

    result = {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "device": str(trainer.accelerator.device),
        "import_seconds": import_seconds,
        "train_seconds": train_seconds,
        "chat_template_swapped": trainer.chat_template is not None,
        "tools": [t.__name__ for t in trainer.tools] if getattr(trainer, "tools", None) else None,
        "config": {
            k: v
            for k, v in config.to_dict().items()
            if k
            in {
                "num_generations",
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "generation_batch_size",
                "steps_per_generation",
                "max_steps",
                "learning_rate",
                "lr_scheduler_type",
                "weight_decay",
                "max_grad_norm",
                "adam_beta1",
                "adam_beta2",
                "adam_epsilon",
                "max_completion_length",
                "max_tool_calling_iterations",
                "temperature",
                "top_p",
                "top_k",
                "beta",
                "loss_type",
                "epsilon",
                "scale_rewards",
                "num_iterations",
                "mask_truncated_completions",
                "shuffle_dataset",
                "chat_template_kwargs",
                "bf16",
                "gradient_checkpointing",
                "use_vllm",
                "use_transformers_paged",
                "seed",
                "optim",
            }
        },
        "steps": steps,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"trl: {len(steps)} steps in {train_seconds:.1f} s -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
