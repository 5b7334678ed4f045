"""TextArena's Wordle-v0 from the textarena package as an OpenEnv environment.

Written the way OpenEnv's `envs/textarena_env` serves it: `TextArenaAction{message}`, a `TextArenaObservation{prompt,
messages, current_player_id, legal_players, info}` built from the game's observation (the LLMObservationWrapper's one
cumulative "[GAME] …" string, coalesced into one message), the reward of player 0 (0.0 on reset), the Wordle reward
signals (`wordle.greens`, `wordle.yellows`, `wordle.repetitions`, `wordle.correct`) in `info`, and a
`TextArenaState` whose `raw_state` snapshots TextArena's state (`raw_state.game_state.secret_word` included). `seed` is
forwarded to TextArena's own reset (OpenEnv PR #1148), so a seed fixes the secret word.

Offline word data. TextArena's Wordle reads two NLTK resources and calls `nltk.download` for them (at import and in
`EnglishDictionary`): the `words` corpus (`en-basic`, filtered to 5-letter words the `averaged_perceptron_tagger_eng`
tags NN, is the secret list; `en` joins TextArena's bundled hunspell dictionaries as the valid guesses) and the tagger.
A fresh machine has neither and may not reach NLTK's download host, so this server never downloads: it writes an
NLTK data folder from the word lists the project ships (packages/env/data, derived once from NLTK's data and
TextArena's dictionaries) and points NLTK at it, and replaces `nltk.download` with a check that the resource is there.
- `corpora/words/en-basic`: the 156 secret words, in NLTK's order; the tagger's tag dictionary tags each of them NN,
  so TextArena's own filter keeps exactly those 156 in that order (`random.choice` under a seed picks what it picks
  with NLTK's real data: seed 1234 → "slope", 999 → "cheap", as reported in OpenEnv PR #1127).
- `corpora/words/en`: the 10,879 valid guesses. TextArena accepts a guess found in its hunspell dictionaries or in
  NLTK's `en`; with this file the 5-letter words it accepts are exactly those 10,879 (its hunspell words that are not
  in the list all contain an apostrophe, which the guess pattern `\\[(\\w+)\\]` never captures).

    .venv/bin/python interop/servers/textarena_wordle.py --port 8000
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _serve import max_concurrent_envs, serve  # noqa: E402
from openenv_models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORD_LISTS = ROOT / "packages" / "env" / "data"


def _offline_nltk() -> None:
    """NLTK data written from the shipped word lists; `nltk.download` never touches the network."""
    import nltk

    secrets = [w for w in (WORD_LISTS / "wordle_secret_words.txt").read_text().split() if w]
    valid = [w for w in (WORD_LISTS / "wordle_valid_guesses.txt").read_text().split() if w]
    data = Path(tempfile.mkdtemp(prefix="envtrain-nltk-"))
    (data / "corpora" / "words").mkdir(parents=True)
    (data / "corpora" / "words" / "en-basic").write_text("\n".join(secrets) + "\n")
    (data / "corpora" / "words" / "en").write_text("\n".join(valid) + "\n")
    tagger = data / "taggers" / "averaged_perceptron_tagger_eng"
    tagger.mkdir(parents=True)
    stem = "averaged_perceptron_tagger_eng"
    (tagger / f"{stem}.weights.json").write_text(json.dumps({}))
    (tagger / f"{stem}.tagdict.json").write_text(json.dumps({w: "NN" for w in secrets}))
    (tagger / f"{stem}.classes.json").write_text(json.dumps(["NN"]))
    nltk.data.path.insert(0, str(data))
    resources = {
        "words": "corpora/words",
        "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng/",
    }

    def download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        ids = info_or_id if isinstance(info_or_id, (list, tuple)) else [info_or_id]
        for name in ids:
            nltk.data.find(resources[name])  # LookupError if it is not there: never a download
        return True

    nltk.download = download


_offline_nltk()

import textarena as ta  # noqa: E402
from openenv.core.env_server import Environment, create_app  # noqa: E402


class WordleSignals:
    """The Wordle reward signals of OpenEnv's textarena_env, recomputed per step from the guess and the feedback."""

    def __init__(self) -> None:
        self.seen: Dict[str, int] = {}

    @staticmethod
    def guess_of(message: str) -> str:
        found = re.search(r"\[[A-Za-z]{5}\]", message)
        if found:
            return found.group(0).lower()
        letters = re.sub(r"[^a-z]", "", message.lower())
        return f"[{letters[:5]}]" if len(letters) >= 5 else ""

    @staticmethod
    def marks_of(observation: TextArenaObservation) -> tuple[int, int]:
        text = ""
        for message in reversed(observation.messages):
            if "Feedback:" in message.content:
                text = message.content.strip().split("Feedback:", 1)[1].strip()
                break
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        if len(lines) < 2:
            return 0, 0
        for line in reversed(lines):
            compact = line.replace(" ", "")
            if compact and set(compact) <= set("GYX"):
                return compact.count("G"), compact.count("Y")
        return 0, 0

    def compute(self, message: str, observation: TextArenaObservation) -> Dict[str, float]:
        guess = self.guess_of(message)
        before = self.seen.get(guess, 0) if guess else 0
        greens, yellows = self.marks_of(observation)
        if guess:
            self.seen[guess] = before + 1
        return {
            "wordle.greens": greens / 5.0,
            "wordle.yellows": yellows / 5.0,
            "wordle.repetitions": 1.0 - before,
            "wordle.correct": float(observation.reward or 0.0),
        }


class WordleEnvironment(Environment):
    """TextArena's Wordle-v0 (with its default wrappers), one instance per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    ENV_ID = "Wordle-v0"

    def __init__(self) -> None:
        super().__init__()
        self._game = ta.make(env_id=self.ENV_ID)
        self._game.reset(num_players=1)
        self._signals = WordleSignals()
        self._last_signals: Dict[str, float] = {}
        self._state = TextArenaState(env_id=self.ENV_ID, num_players=1)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> TextArenaObservation:
        # The observation wrapper keeps every message it has seen: start each episode with none.
        layer: Any = self._game
        while layer is not None:
            if hasattr(layer, "full_observations"):
                layer.full_observations = {}
            layer = getattr(layer, "env", None)
        self._game.reset(num_players=1, seed=seed)
        self._signals = WordleSignals()
        self._last_signals = {}
        self._state.episode_id = episode_id if episode_id is not None else str(uuid.uuid4())
        self._state.step_count = 0
        self._state.turn = 0
        self._state.last_reward = 0.0
        self._state.last_info = {}
        self._state.raw_state = self._snapshot()
        observation = self._observe()
        observation.reward = 0.0
        observation.done = False
        return observation

    def step(self, action: TextArenaAction) -> TextArenaObservation:  # type: ignore[override]
        done, info = self._game.step(action.message)
        self._state.step_count += 1
        self._state.turn = getattr(self._game.state, "turn", self._state.turn + 1)
        self._state.last_info = dict(info or {})
        observation = self._observe()
        observation.done = done
        observation.reward = self._reward()
        self._state.last_reward = observation.reward
        self._last_signals = self._signals.compute(action.message, observation)
        observation.info.setdefault("reward_signals", {}).update(self._last_signals)
        observation.metadata.setdefault("reward_signals", {}).update(self._last_signals)
        self._state.last_info = {**self._state.last_info, "reward_signals": self._last_signals}
        self._state.raw_state = self._snapshot()
        return observation

    @property
    def state(self) -> TextArenaState:
        return self._state

    def _observe(self) -> TextArenaObservation:
        player, raw = self._game.get_observation()
        messages = self._coalesce(raw)
        prompts = [m.content for m in messages if m.category == "PROMPT"]
        if not prompts:
            at_start = getattr(self._game.state, "turn", 0) == 0 and messages
            prompts = [messages[0].content] if at_start else [self.ENV_ID]
        roles = getattr(self._game.state, "role_mapping", {}) or {}
        return TextArenaObservation(
            prompt="\n".join(prompts).strip(),
            messages=messages,
            current_player_id=player,
            legal_players=sorted(p for p in roles if isinstance(p, int) and p >= 0),
            info=dict(getattr(self._game.state, "step_info", {})),
            metadata={
                "env_id": self.ENV_ID,
                "turn": getattr(self._game.state, "turn", 0),
                "raw_messages": [m.model_dump() for m in messages],
            },
        )

    @staticmethod
    def _coalesce(raw: Iterable[Any]) -> List[TextArenaMessage]:
        """Consecutive pieces from one sender and category become one message (a string arrives char by char)."""
        out: List[TextArenaMessage] = []
        for entry in raw:
            if isinstance(entry, tuple) and len(entry) == 3:
                sender, content, category = entry
            elif isinstance(entry, tuple) and len(entry) == 2:
                (sender, content), category = entry, "MESSAGE"
            else:
                sender, content, category = -1, str(entry), "MESSAGE"
            sender_id = int(sender) if isinstance(sender, (int, float)) else -1
            name = getattr(category, "name", str(category))
            if out and out[-1].sender_id == sender_id and out[-1].category == name:
                out[-1].content += str(content)
            else:
                out.append(TextArenaMessage(sender_id=sender_id, content=str(content), category=name))
        return out

    def _reward(self) -> float:
        rewards = getattr(self._game.state, "rewards", None)
        if isinstance(rewards, dict):
            player = getattr(self._game.state, "current_player_id", 0)
            if player in rewards:
                return float(rewards[player])
            if 0 in rewards:
                return float(rewards[0])
        return 0.0

    def _snapshot(self) -> Dict[str, Any]:
        st = self._game.state
        snapshot: Dict[str, Any] = {
            "turn": getattr(st, "turn", 0),
            "game_state": getattr(st, "game_state", {}),
            "logs": list(getattr(st, "logs", [])),
            "rewards": getattr(st, "rewards", None),
            "done": getattr(st, "done", False),
            "role_mapping": getattr(st, "role_mapping", {}),
            "game_info": getattr(st, "game_info", {}),
            "step_info": getattr(st, "step_info", {}),
        }
        if self._last_signals:
            snapshot["reward_signals"] = dict(self._last_signals)
        return snapshot


def app() -> Any:
    return create_app(
        WordleEnvironment,
        TextArenaAction,
        TextArenaObservation,
        env_name="textarena_env",
        max_concurrent_envs=max_concurrent_envs(),
    )


if __name__ == "__main__":
    serve(app, "TextArena Wordle-v0 as an OpenEnv server")
