"""`/status` and `/context` through Telegram: one plan, the same real figures, the tokens actually sent."""

from __future__ import annotations

import re

from bot.compaction.service import CompactionService
from bot.domain.message import Message
from bot.pipeline.systems.auto_compaction import AutoCompactionSystem
from tests.channels.telegram_harness import OWNER, RunningBot
from tests.commands.test_conversation_commands import ask
from tests.fakes.bot_fixtures import BotFactory
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

STATUS_CONTEXT = re.compile(r"^Context: ~(\d+) tokens of (\d+) \((\d+)%\)", re.MULTILINE)
CONTEXT_TOKENS = re.compile(r"^Tokens: ~([\d,]+) of ([\d,]+) \(compaction threshold", re.MULTILINE)
CONTEXT_BAR = re.compile(r"^[█░]{30} (\d+)%$", re.MULTILINE)
# The chat app shows the lines without their indent.
CONTEXT_PART = re.compile(r"^ *(.+?): ~([\d,]+) / ([\d,]+)", re.MULTILINE)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def figures(status: str, context: str) -> tuple[int, int, int]:
    """(tokens, threshold, percent) as `/status` says them, after checking that `/context` says the same."""
    in_status, in_context, bar = (
        STATUS_CONTEXT.search(status),
        CONTEXT_TOKENS.search(context),
        CONTEXT_BAR.search(context),
    )
    assert in_status and in_context and bar, (status, context)
    tokens, threshold, percent = (int(group) for group in in_status.groups())
    assert (number(in_context.group(1)), number(in_context.group(2)), int(bar.group(1))) == (tokens, threshold, percent)
    return tokens, threshold, percent


def compaction_of(bot: RunningBot) -> CompactionService:
    return next(s.compaction for s in bot.app.runner.systems if isinstance(s, AutoCompactionSystem))


async def test_a_two_message_chat_shows_its_real_small_share_the_same_in_status_and_context(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    fake_openai.script("Hello! How can I help?")
    assert await ask(fake_telegram, OWNER, "hello there") == "Hello! How can I help?"

    status = await ask(fake_telegram, OWNER, "/status")
    context = await ask(fake_telegram, OWNER, "/context")

    tokens, threshold, percent = figures(status, context)
    # The request the model was sent, counted as the bot counts, plus the reply now in the conversation.
    request = fake_openai.last_chat_request()
    estimator = compaction_of(bot).planner.estimator
    model = str(request["model"])
    sent = estimator.payload(request["messages"], request.get("tools"), model)
    reply = estimator.message(Message.assistant("Hello! How can I help?"), model)
    assert abs(tokens - (sent + reply)) <= max(10, (sent + reply) // 50), (tokens, sent, reply)
    # Real use, not the shares set aside for the prompt parts (they add up to 45% of the threshold).
    assert percent == round(100 * tokens / threshold) and percent < 10
    parts = {name: (number(used), number(given)) for name, used, given in CONTEXT_PART.findall(context)}
    assert sum(used for used, _ in parts.values()) == tokens
    assert parts["persona and instructions"][0] > 0 and parts["tool schemas"][0] > 0
    assert 0 < parts["history"][0] < parts["history"][1]
    assert "measured when the next message is answered" not in context


async def test_before_any_message_both_show_the_conversation_and_say_the_prompt_is_not_measured(
    start: BotFactory, fake_telegram: FakeTelegram
) -> None:
    await start()
    status = await ask(fake_telegram, OWNER, "/status")
    context = await ask(fake_telegram, OWNER, "/context")
    tokens, _, _ = figures(status, context)
    parts = {name: number(used) for name, used, _ in CONTEXT_PART.findall(context)}
    assert parts == {"tool schemas": tokens, "history": 0, "summary": 0}
    assert "system prompt not measured yet" in status
    assert "persona, instructions, memory and RAG: measured when the next message is answered" in context


async def test_memory_md_shows_in_its_part_once_a_message_was_answered(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    bot = await start()
    long_term = bot.workspace / "memory" / "MEMORY.md"
    long_term.write_text("# About me\n\n- I live in Lisbon and I cycle to work.\n" * 5)
    fake_openai.script("Noted.")
    await ask(fake_telegram, OWNER, "where do I live?")
    assert "I live in Lisbon" in str(fake_openai.last_chat_request()["messages"][0]["content"])

    context = await ask(fake_telegram, OWNER, "/context")
    parts = {name: (number(used), number(given)) for name, used, given in CONTEXT_PART.findall(context)}
    estimator = compaction_of(bot).planner.estimator
    assert parts["MEMORY.md"][0] >= estimator.text(long_term.read_text())
    assert parts["MEMORY.md"][1] == parts["memory pack"][1] == parts["daily notes"][1]  # one memory share
    figures(await ask(fake_telegram, OWNER, "/status"), context)


async def test_a_persona_over_its_share_is_sent_cut_and_shown_cut(
    start: BotFactory, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    # A 2,000-token threshold gives the persona and instructions 200 tokens; the persona alone has ~860.
    bot = await start({"compaction": {"maxContextTokens": 2000}})
    persona = bot.workspace / "preferences" / "system-prompt.md"
    persona.write_text("You are a careful assistant who explains every step.\n" * 60)
    fake_openai.script("Fine.")
    await ask(fake_telegram, OWNER, "hi")
    sent = str(fake_openai.last_chat_request()["messages"][0]["content"])
    assert "base cut here: it exceeded its share of the context" in sent

    status = await ask(fake_telegram, OWNER, "/status")
    context = await ask(fake_telegram, OWNER, "/context")
    figures(status, context)
    used, given = next((u, g) for name, u, g in CONTEXT_PART.findall(context) if name == "persona and instructions")
    # What the request carried: the persona cut to the share, and the cut markers of the parts after it.
    assert number(given) == 200 and number(used) >= 190
    assert "persona and instructions: ~" + used + " / 200 (cut to its share)" in context
