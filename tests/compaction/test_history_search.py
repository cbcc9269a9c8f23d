"""search_history: finds what was compacted away in the chat's archive, newest first, bounded."""

from __future__ import annotations

import json

from bot.app import Application
from bot.compaction.history_search import TOOL_NAME, find_matches, format_matches
from bot.domain.message import Message, ToolCall
from bot.tools.registry import ToolContext


def archive_messages() -> list[Message]:
    return [
        Message.user("My locker code is 4711, please remember."),
        Message.assistant("Noted: locker code 4711."),
        Message.user("What's the weather?"),
        Message.assistant("Sunny."),
        Message.user("I changed the LOCKER code to 9000."),
        Message.assistant("Updated."),
    ]


def test_messages_with_every_word_match_newest_first_with_context() -> None:
    messages = archive_messages()
    matches = find_matches(messages, "locker code")
    assert [m.index for m in matches] == [4, 1, 0]
    text = format_matches(messages, matches, "locker code", limit=2, context=1, max_chars=4000)
    assert text.startswith('3 message(s) match "locker code"; newest first:')
    assert ">> User: I changed the LOCKER code to 9000." in text
    assert "   Assistant: Updated." in text  # the message after it, for context
    assert text.index("9000") < text.index("Noted: locker code 4711")
    assert text.endswith("(1 more not shown; use more specific words to narrow the search.)")


def test_when_no_message_has_every_word_the_best_partial_matches_are_returned() -> None:
    matches = find_matches(archive_messages(), "weather tomorrow")
    assert [m.index for m in matches] == [2]
    assert find_matches(archive_messages(), "zeppelin") == []


def test_output_stays_within_its_bound_and_long_messages_are_cut_around_the_match() -> None:
    messages = [Message.user("x" * 5000 + " needle " + "y" * 5000) for _ in range(50)]
    text = format_matches(messages, find_matches(messages, "needle"), "needle", limit=50, context=0, max_chars=2000)
    assert len(text) <= 2000
    assert "needle" in text.splitlines()[2]


def test_tool_calls_are_searched_too() -> None:
    call = ToolCall(id="c", name="read_file", arguments='{"path": "secret-plans.md"}')
    messages = [Message.user("read it"), Message.assistant("", tool_calls=[call]), Message.tool_result(call, "ok")]
    assert [m.index for m in find_matches(messages, "secret-plans.md")] == [1]


async def test_the_tool_searches_only_the_calling_chats_archive(services: Application) -> None:
    ours = await services.sessions.get_or_create("test", "1")
    theirs = await services.sessions.get_or_create("test", "2")
    await services.sessions.append_messages(ours, archive_messages())
    await services.sessions.append_messages(theirs, [Message.user("their locker code is 1234")])
    ours.messages.clear()  # compacted away from the live session: only the archive has them
    config = await services.config_store.current()

    async def search(arguments: dict[str, object]) -> str:
        call = ToolCall(id="c", name=TOOL_NAME, arguments=json.dumps(arguments))
        outcome = await services.tools.execute(call, ToolContext("test:1", "test", "1", config))
        assert not outcome.is_error, outcome.content
        return outcome.content

    found = await search({"query": "locker code"})
    assert "4711" in found and "9000" in found and "1234" not in found
    assert "No message in this chat's history matches" in await search({"query": "zeppelin"})
    one = await search({"query": "locker", "max_results": 1})
    assert "9000" in one and "4711" not in one and "2 more not shown" in one
    assert TOOL_NAME in [schema["function"]["name"] for schema in services.tools.schemas()]
