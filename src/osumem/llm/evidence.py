"""Evidence selection by a language model: the prompts and the parsing of answers.

The model is shown the query (the task) and the retrieved steps, numbered by their
memory position exactly as :meth:`osumem.memory.Retrieved.render` lists them
(``[step 12] <text>``, time order), and asked two kinds of question:

* **selection** (one greedy answer): which steps are evidence? The answer is parsed by
  :func:`parse_selection` into the positions it names;
* **relevance** (one yes/no question per step): is step ``p`` evidence? Scored by the
  first answer token's ``P(yes) / (P(yes) + P(no))``.

Both share the same opening (system message, task, memory block), so a local model
reads the context once per query.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from osumem.frozen import Constraints, FrozenConfig, Interval
from osumem.llm.base import LLMClient, Message
from osumem.memory.retrieved import Retrieved

log = logging.getLogger(__name__)

SYSTEM = (
    "You read the memory of a customer-service agent and point out which past steps "
    "are evidence for a task: the steps that carried out what the task asks for."
)
SELECT_QUESTION = (
    "Which memory steps carried out this task? Reply on one line with the step numbers "
    'only, separated by commas, or "none".'
)
RELEVANCE_QUESTION = "Did step {position} carry out part of this task? Reply yes or no."


@dataclass(frozen=True, kw_only=True)
class PromptConfig(FrozenConfig):
    """How the evidence prompts are built and bounded.

    Attributes:
        system: the system message.
        select_question: the question asking for the evidence step numbers.
        relevance_question: the yes/no question; ``{position}`` is the step number.
        max_step_chars: each step text is cut to this many characters (``…`` marks a
            cut), bounding the prompt and so the time per query.
        max_query_chars: the task text is cut likewise.
        max_new_tokens: the longest selection answer generated.
    """

    system: str = SYSTEM
    select_question: str = SELECT_QUESTION
    relevance_question: str = RELEVANCE_QUESTION
    max_step_chars: int = 300
    max_query_chars: int = 800
    max_new_tokens: int = 12

    config_name = "PromptConfig"
    parameter_constraints: ClassVar[Constraints] = {
        "max_step_chars": Interval(int, 1, None),
        "max_query_chars": Interval(int, 1, None),
        "max_new_tokens": Interval(int, 1, None),
    }

    def _cross_check(self) -> list[str]:
        problems = super()._cross_check()
        if not isinstance(self.relevance_question, str) or (
            "{position}" not in self.relevance_question
        ):
            problems.append(
                f"relevance_question must be text containing {{position}}, "
                f"got {self.relevance_question!r}"
            )
        return problems


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def context_block(query: str, retrieved: Retrieved, config: PromptConfig) -> str:
    """The task and the retrieved steps (``Retrieved.render`` format, no header)."""
    steps = tuple(
        dataclasses.replace(s, text=_cut(" ".join(s.text.split()), config.max_step_chars))
        for s in retrieved.steps
    )
    memory = dataclasses.replace(retrieved, steps=steps).render(header=False)
    task = _cut(" ".join(query.split()), config.max_query_chars)
    return f"Task: {task}\n\nMemory steps:\n{memory or '(none)'}\n\n"


def selection_messages(query: str, retrieved: Retrieved, config: PromptConfig) -> list[Message]:
    """The chat asking which retrieved steps are evidence."""
    return [
        Message("system", config.system),
        Message("user", context_block(query, retrieved, config) + config.select_question),
    ]


def relevance_messages(
    query: str, retrieved: Retrieved, position: int, config: PromptConfig
) -> list[Message]:
    """The chat asking whether the step at ``position`` is evidence."""
    return [
        Message("system", config.system),
        Message(
            "user",
            context_block(query, retrieved, config)
            + config.relevance_question.format(position=position),
        ),
    ]


@dataclass(frozen=True)
class Selection:
    """A parsed selection answer.

    Attributes:
        positions: the shown step positions the answer names, in order, each once.
        ok: False when the answer is malformed (names no shown step and is not "none");
            a malformed answer selects nothing.
        unknown: numbers in the answer that name no shown step (ignored).
    """

    positions: tuple[int, ...]
    ok: bool
    unknown: tuple[int, ...] = ()


_NUMBER = re.compile(r"(?<![\w.])[0-9]+(?!\w|\.[0-9])")  # ASCII digits only
_NONE = re.compile(r"^\W*(none|no steps?|nothing)\b", re.IGNORECASE)


def parse_selection(answer: str, shown: Sequence[int]) -> Selection:
    """Parse a selection answer into positions among ``shown``.

    Every free-standing integer (not part of a word such as a flight number ``HAT123``
    or a decimal such as ``1.5``; ``"1. 27."`` reads 1 and 27) is read; integers that are shown positions are selected, others are
    ignored. An answer with no shown position that does not start with "none" is
    malformed: it selects nothing and is logged (never raises).
    """
    shown_set = {int(p) for p in shown}
    picked: list[int] = []
    unknown: list[int] = []
    for m in _NUMBER.finditer(answer):
        value = int(m.group())
        if value in shown_set:
            if value not in picked:
                picked.append(value)
        elif value not in unknown:
            unknown.append(value)
    if picked or _NONE.match(answer):
        return Selection(tuple(picked), True, tuple(unknown))
    log.warning("malformed evidence selection (selects nothing): %r", answer[:200])
    return Selection((), False, tuple(unknown))


@dataclass(frozen=True)
class EvidenceAnswer:
    """What the model said about one retrieved context.

    Attributes:
        answer: the raw selection answer.
        selection: its parse.
        scores: ``position → P(yes)/(P(yes)+P(no))`` for every shown step.
    """

    answer: str
    selection: Selection
    scores: dict[int, float]


def ask_evidence(
    client: LLMClient, query: str, retrieved: Retrieved, config: PromptConfig | None = None
) -> EvidenceAnswer:
    """Ask ``client`` which retrieved steps are evidence for ``query``: the relevance
    scores of every shown step (one batched call) and one selection answer."""
    config = config or PromptConfig()
    shown = sorted(s.position for s in retrieved.steps)
    if not shown:
        return EvidenceAnswer("", Selection((), True), {})
    chats = [relevance_messages(query, retrieved, p, config) for p in shown]
    probs = client.yes_probability(chats)
    answer = client.complete(
        selection_messages(query, retrieved, config), max_tokens=config.max_new_tokens
    )
    return EvidenceAnswer(
        answer, parse_selection(answer, shown), dict(zip(shown, map(float, probs), strict=True))
    )
