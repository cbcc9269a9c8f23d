"""A conversation with a model whose real window is smaller than the registry says: the scenario of the
learned-window tests and of `bench/small_window.py`.

The chat model is `gpt-4o` (128,000 tokens in the shipped registry) served by a fake endpoint whose real
window is 6,000 tokens: it refuses a longer prompt with OpenAI's `context_length_exceeded` ("refuse"), or
drops its oldest messages and reports the smaller usage as Ollama does ("cut"). The user states facts in
the first turns, chats on with messages of about 270 tokens, and at the end asks for each fact; the
figures say how many turns were answered, how many prompts the endpoint refused or cut, and how many of
the facts were in the prompt the model received when it was asked for them.

The third endpoint has no window of its own ("unlimited") and counts tokens as a real tokenizer varies
(code and non-Latin text cost more a character than prose); the user chats with messages of very
different kinds and sizes (`varied`): no window must be learned from its usage.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bot.app import Application
from bot.context.silent_cut import ResidualSpread
from tests.compaction.helpers import fact_keeping_summary, is_summary_request, request_text
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI, Reply, message_text
from tests.fakes.recording_channel import RecordingChannel

MODEL = "gpt-4o"
WINDOW_TOKENS = 6000
# The facts stated in the first turns, and the question asked for each at the end.
FACTS = (
    ("FACT-01 locker code is KX-4471", "What is my locker code (FACT-01)?", "KX-4471"),
    ("FACT-02 sister name is MARGOT", "What is my sister's name (FACT-02)?", "MARGOT"),
    ("FACT-03 wifi password is TANGERINE-88", "What is the wifi password (FACT-03)?", "TANGERINE-88"),
    ("FACT-04 dentist day is THURSDAY", "Which day is the dentist (FACT-04)?", "THURSDAY"),
)
# About 270 tokens a message (the fake counts 4 characters a token).
MESSAGE_CHARS = 1080
CHATTER = "Some ordinary chatter about the weather, the garden, the train timetable and weekend plans. "
FAILURE_WORDS = ("too long for the model", "Something went wrong", "could not reach")
Behaviour = Literal["refuse", "cut", "unlimited"]
PROSE = (
    "The committee met on Tuesday to discuss the new cycling lanes, and after a long debate about parking, "
    "deliveries and the school run, it agreed to try them for six months on the two busiest streets. "
)
CODE = """def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
"""
RUSSIAN = "Вчера мы ездили на дачу, собирали яблоки и варили варенье до позднего вечера. "
CHINESE = "今天下午我们去公园散步，看到很多人在湖边钓鱼，天气非常好。"
# A paste laid out with runs of one character: rules and deep indentation (a tokenizer's cheapest text).
LAYOUT = "=" * 72 + "\n" + "".join(f"{' ' * 24}- step {number}: {'.' * 40} done\n" for number in range(12))


@dataclass(frozen=True)
class SmallWindowRun:
    """What a run of the scenario showed."""

    turns: int
    answered: int
    refusals: int
    cuts: int
    # What the endpoint refused or cut once the bot had learned its window (none, when it plans for it).
    refused_or_cut_after_learning: int
    facts_asked: int
    facts_in_prompt: int
    largest_prompt_tokens: int
    learned_window: int | None
    notices: list[str]
    # What the silent-cut judgement relied on at the end: the residuals' spread, the shortfalls and the slack.
    spread: ResidualSpread
    # The estimator's characters a token for the model at the end (the fake counts 4, besides the framing).
    chars_per_token: float


class _Model:
    """The fake model's responder: summaries keep every fact; an answer is short; what it received is kept."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.largest = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        if is_summary_request(request):
            return fact_keeping_summary(request)
        text = request_text(request)
        self.received.append(text)
        self.largest = max(self.largest, len(text) // 4)
        last = message_text(request["messages"][-1].get("content"))
        return Reply(text="Noted: " + last[:40])


def padded(text: str) -> str:
    return (text + " " + CHATTER * (MESSAGE_CHARS // len(CHATTER) + 1))[:MESSAGE_CHARS]


def varied(number: int) -> str:
    """Message `number` of a chat whose messages differ in kind and size: short, long prose, code, Russian,
    Chinese, a layout of rules and indentation, a mix; each kind from one to four times its base length."""
    times = 1 + number % 4
    kinds = (
        "ok, thanks!",
        PROSE * 3 * times,
        "Can you review this?\n```python\n" + CODE * times + "```",
        RUSSIAN * 2 * times,
        CHINESE * 3 * times,
        LAYOUT * 2 * times,
        f"{CHINESE} {PROSE} {RUSSIAN} {CODE}" * times,
    )
    return f"Turn {number}. {kinds[number % len(kinds)]}"


def prepare_workspace(workspace: Path) -> None:
    preferences = workspace / "preferences"
    preferences.mkdir(parents=True, exist_ok=True)
    # The knowledge graph is off: its share is planned all the same, and it is measured elsewhere.
    config = {"llm": {"model": MODEL}, "rag": {"enabled": False}, "memory": {"embeddingsModel": None}}
    (preferences / "runtime-config.json").write_text(json.dumps(config))


async def run_small_window(workspace: Path, fake: FakeOpenAI, behaviour: Behaviour, turns: int) -> SmallWindowRun:
    """`turns` messages in one chat (the facts first, the questions last) against a `behaviour` endpoint."""
    prepare_workspace(workspace)
    model = _Model()
    fake.set_responder(model)
    if behaviour == "unlimited":
        fake.token_count = "mixed"
    else:
        fake.window_tokens = WINDOW_TOKENS
        fake.window_behaviour = behaviour
    channel = RecordingChannel()
    services = Application(env_for(workspace, fake))
    answered = facts_in_prompt = 0
    misses_when_learned: int | None = None

    def misses() -> int:
        return fake.refusals + fake.cuts

    def note_learning() -> None:
        nonlocal misses_when_learned
        if misses_when_learned is None and services.models.lookup(MODEL).learned is not None:
            misses_when_learned = misses()

    try:
        chatter_turns = max(0, turns - 2 * len(FACTS))
        messages = [padded(f"Please remember this: {fact}.") for fact, _, _ in FACTS]
        chatter = varied if behaviour == "unlimited" else lambda number: padded(f"Turn {number}.")
        messages += [chatter(number) for number in range(chatter_turns)]
        for text in messages:
            if not _failed(await _say(services, channel, text)):
                answered += 1
            note_learning()
        for _, question, value in FACTS:
            received_before = len(model.received)
            if not _failed(await _say(services, channel, question)):
                answered += 1
            prompts = model.received[received_before:]
            facts_in_prompt += bool(prompts) and value in prompts[-1]
        learned = services.models.lookup(MODEL).learned
        return SmallWindowRun(
            turns=len(messages) + len(FACTS),
            answered=answered,
            refusals=fake.refusals,
            cuts=fake.cuts,
            refused_or_cut_after_learning=misses() - (misses() if misses_when_learned is None else misses_when_learned),
            facts_asked=len(FACTS),
            facts_in_prompt=facts_in_prompt,
            largest_prompt_tokens=model.largest,
            learned_window=learned.tokens if learned is not None else None,
            notices=list(services.notices.pending().values()),
            spread=services.planner.silent_cuts.spread(MODEL),
            chars_per_token=services.planner.estimator.ratio_for(MODEL),
        )
    finally:
        await services.stop()


async def _say(services: Application, channel: RecordingChannel, text: str) -> str:
    before = len(channel.sent["1"])
    await services.router.accept(channel.message("1", text), channel)
    return (await channel.wait_for("1", before + 1, timeout=60.0))[-1]


def _failed(reply: str) -> bool:
    return any(words in reply for words in FAILURE_WORDS) or not re.match(r"Noted: ", reply)
