"""StochasticModel: a scripted model whose replies are drawn, so its runs' paths vary.

A real model's run is a random path through the machine; evals measure that
distribution. This model makes one on purpose, reproducibly: each call answers with
one of a turn's replies, drawn with the given weights from a ``random.Random`` seeded
once, so the same seed gives the same draws in the same order::

    model = StochasticModel(
        [
            [(0.9, call_tool("search", q="attrs")), (0.1, say("I don't know."))],
            [(0.8, say("Found it.")), (0.2, call_tool("search", q="attrs docs"))],
        ],
        seed=7,
    )

The turn is the number of assistant replies in the conversation sent; calls past the
last turn answer from the last one (so a turn that may call a tool again makes a
loop of random length). A turn may be one reply (always given), and the whole
script may be a function ``(rng, conversation) -> reply``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeAlias

from agentfsm.providers import ScriptedModel

from .._messages import Message

__all__ = ["StochasticModel"]

Reply: TypeAlias = Message | str | BaseException
#: One turn: a reply, or weighted replies ``[(weight, reply), ...]``.
Turn: TypeAlias = Reply | Sequence[tuple[float, Reply]]
Draw: TypeAlias = Callable[[random.Random, Sequence[Message]], Reply]


def _checked(turns: Sequence[Turn]) -> list[tuple[list[float], list[Reply]]]:
    if not turns:
        raise ValueError("StochasticModel needs at least one turn")
    checked = []
    for index, turn in enumerate(turns):
        if isinstance(turn, Message | str | BaseException):
            checked.append(([1.0], [turn]))
            continue
        pairs = list(turn)
        bad = [p for p in pairs if not (isinstance(p, tuple) and len(p) == 2)]
        if not pairs or bad:
            raise TypeError(
                f"turn {index} is a reply or a list of (weight, reply) pairs, got {turn!r}"
            )
        weights = [w for w, _ in pairs]
        if any(isinstance(w, bool) or not isinstance(w, int | float) or w < 0 for w in weights):
            raise ValueError(f"turn {index}: weights are numbers of at least 0, got {weights}")
        if not sum(weights) > 0:
            raise ValueError(f"turn {index}: the weights add up to 0; give one a weight")
        checked.append((weights, [r for _, r in pairs]))
    return checked


class StochasticModel(ScriptedModel):
    """Answers each call with a reply drawn from its turn (see the module's text).

    ``seed`` seeds the one ``random.Random`` every draw comes from; ``rng`` is it, to
    read or reseed. Everything else is :class:`~agentfsm.providers.ScriptedModel`'s.
    """

    def __init__(
        self,
        turns: Sequence[Turn] | Draw,
        *,
        seed: int | str | None = 0,
        model_name: str = "stochastic",
        stream: bool = False,
        delay: float = 0.0,
    ) -> None:
        self.rng = random.Random(seed)
        draw: Draw = turns if callable(turns) else _drawer(_checked(turns))

        def script(conversation: Sequence[Message]) -> Reply:
            return draw(self.rng, conversation)

        super().__init__(script, model_name=model_name, stream=stream, delay=delay)


def _drawer(turns: list[tuple[list[float], list[Reply]]]) -> Draw:
    def draw(rng: random.Random, conversation: Sequence[Message]) -> Reply:
        turn = sum(1 for m in conversation if m.role == "assistant")
        weights, replies = turns[min(turn, len(turns) - 1)]
        if len(replies) == 1:
            return replies[0]
        return rng.choices(replies, weights)[0]

    return draw
