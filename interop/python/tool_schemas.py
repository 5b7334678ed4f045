"""transformers' `get_json_schema` on Python tools: the judge of envtrain's tool definitions (`Tool.make`).

Each function here is the Python twin of a tool in interop/test/ToolSchema.test.ts: the built-ins as TRL's
environment classes write them (bound methods, Google-style docstrings), and tools that exercise every type
`get_json_schema` maps (Literal, Enum, defaults, Optional, unions, lists, tuples, dicts, Any, `(choices: [...])`,
descriptions wrapped over several lines). Prints `{name: json.dumps(schema, ensure_ascii=False)}`: the exact text
a chat template's `tojson` writes into the prompt.
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from typing import Any, Literal, Optional, TypedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers.utils import get_json_schema  # noqa: E402

from catch_tools import CatchTools  # noqa: E402


class CatchEnv(CatchTools):
    """The Catch tools exactly as the TRL test and the TRL benchmark hand them to TRL (catch_tools.py)."""


class EchoEnv:
    def echo(self, message: str) -> str:
        """
        Echo the message back from the environment.

        Args:
            message: The message to echo

        Returns:
            The echoed message.
        """


class SudokuEnv:
    def place(self, row: int, col: int, number: int) -> str:
        """
        Place a number on the Sudoku board.

        Args:
            row: Row number (1-9).
            col: Column number (1-9).
            number: Number to place (1-9).

        Returns:
            The result of the move and updated board state.
        """


class WordleEnv:
    def guess(self, guess: str) -> str:
        """
        Make a guess in the Wordle environment.

        Args:
            guess: The guessed word, formatted as '[abcde]'

        Returns:
            The feedback message from the environment.
        """


def configure(
    name: str,
    level: int = 3,
    ratio: float = 0.5,
    verbose: bool = False,
    mode: Literal["fast", "slow"] = "fast",
    unit: str = "c",
) -> str:
    """
    Configure the run; every parameter but the name has a default.

    Args:
        name: The run's name (unicode is fine: température °C, 日本語, 🎯).
        level: How hard to try, from 1 to 5. The description
            wraps over two lines.
        ratio: A fraction between 0 and 1.
        verbose: Print more.
        mode: How to run.
        unit: The temperature unit. (choices: ["c", "f"])

    Returns:
        A confirmation.
    """


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Size(Enum):
    SMALL = 1
    LARGE = 2


def mixed(
    choice: Literal["two", 1, 3],
    code: int | str,
    many: list[int] | str,
    flag: bool | int | None,
    color: Color,
    size: Size,
    maybe: Optional[Literal["a", "b"]] = None,
    label: Optional[str] = None,
    anything: Any = None,
) -> str:
    """
    Unions, literals, enums and optional values.

    Args:
        choice: A literal of mixed types.
        code: An integer or a string.
        many: A list of integers, or one string.
        flag: A boolean, an integer or null.
        color: A colour.
        size: A size.
        maybe: One of two letters, or null.
        label: A label, or null.
        anything: Any JSON value.

    Returns:
        What happened.
    """


def collections(
    tags: list[str],
    grid: list[list[int]],
    items: list[dict[str, int]],
    lookup: dict[str, list[str]],
    scores: dict[str, float],
    extra: dict[str, Any],
    point: tuple[int, str],
    plain: list[Any],
    mapping: dict,
) -> str:
    """
    Arrays, tuples and objects, nested.

    Args:
        tags: Some tags.
        grid: Rows of integers.
        items: Objects of integer values.
        lookup: Lists of strings by key.
        scores: Numbers by key.
        extra: Anything by key.
        point: An integer and a string.
        plain: A list of anything.
        mapping: An object of anything.

    Returns:
        A summary.
    """


class Point(TypedDict):
    x: int
    y: int


def nested(point: Point) -> str:
    """
    A parameter that is an object with its own fields.

    Args:
        point: A point.
    """


TOOLS = {
    "move": CatchEnv().move,
    "stay": CatchEnv().stay,
    "echo": EchoEnv().echo,
    "place": SudokuEnv().place,
    "guess": WordleEnv().guess,
    "configure": configure,
    "mixed": mixed,
    "collections": collections,
}


def main() -> None:
    out = {name: json.dumps(get_json_schema(f), ensure_ascii=False) for name, f in TOOLS.items()}
    # An object parameter with fields of its own (a TypedDict, a dataclass, a pydantic model) has no schema here.
    try:
        get_json_schema(nested)
        out["nested"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["nested"] = type(e).__name__
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
