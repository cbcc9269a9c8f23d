"""The tool loop (30) against the fake model scripting tool calls: what is run, stored and sent."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import types
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bot.app import Application
from bot.tools.orphans import INTERRUPTED_RESULT
from bot.tools.registry import Tool, ToolContext
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.fakes.telegram_server import WAIT_SECONDS
from tests.pipeline.test_conversation import say


def configure(services: Application, **tool_loop: object) -> None:
    services.workspace.runtime_config_file.write_text(json.dumps({"toolLoop": tool_loop}))


def call(name: str, arguments: dict[str, object] | str, call_id: str) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, arguments, id=call_id)])


class NapArgs(BaseModel):
    seconds: float
    label: str = ""


def register_nap_tool(services: Application, log: list[str]) -> None:
    async def nap(args: NapArgs, ctx: ToolContext) -> str:
        log.append(f"start {args.label}")
        await asyncio.sleep(args.seconds)
        log.append(f"end {args.label}")
        return f"slept {args.seconds}"

    services.tools.register(Tool("nap", "Sleep a while.", NapArgs, nap))


async def test_a_multi_step_loop_writes_then_reads_a_file(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        call("write_file", {"path": "notes/todo.md", "content": "buy milk\n"}, "call_w"),
        call("read_file", {"path": "notes/todo.md"}, "call_r"),
        "Your list says: buy milk.",
    )
    assert await say(services, channel, "1", "note that I must buy milk") == "Your list says: buy milk."
    assert (services.workspace.root / "notes" / "todo.md").read_text() == "buy milk\n"

    requests = fake_openai.chat_requests()
    assert len(requests) == 3
    assert {tool["function"]["name"] for tool in requests[0]["tools"]} >= {
        "read_file",
        "write_file",
        "append_file",
        "list_dir",
    }
    last = requests[2]["messages"]
    assert last[-4]["role"] == "assistant" and last[-4]["tool_calls"][0]["id"] == "call_w"
    assert last[-3] == {"role": "tool", "content": "Wrote 9 characters to notes/todo.md.", "tool_call_id": "call_w"}
    assert last[-1]["tool_call_id"] == "call_r"
    assert last[-1]["content"] == "[notes/todo.md: lines 1-1 of 1]\nbuy milk"

    session = await services.sessions.get("test:1")
    assert session is not None
    roles = [m.role.value for m in session.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    archived = await services.sessions.read_archive("test:1")
    assert [m.id for m in archived] == [m.id for m in session.messages]
    assert archived[1].tool_calls is not None and archived[1].tool_calls[0].name == "write_file"


async def test_parallel_calls_run_concurrently_and_results_keep_their_order(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    log: list[str] = []
    meeting = asyncio.Barrier(2)

    async def meet(args: NapArgs, ctx: ToolContext) -> str:
        log.append(f"start {args.label}")
        # Passes only once the other call is running too: calls run one after the other never meet.
        async with asyncio.timeout(WAIT_SECONDS):
            await meeting.wait()
        log.append(f"end {args.label}")
        return f"met {args.label}"

    services.tools.register(Tool("meet", "Wait for the other caller.", NapArgs, meet))
    fake_openai.script(
        Reply(
            tool_calls=[
                ToolCallSpec("meet", {"seconds": 0, "label": "a"}, id="call_a"),
                ToolCallSpec("meet", {"seconds": 0, "label": "b"}, id="call_b"),
            ]
        ),
        "both done",
    )
    assert await say(services, channel, "1", "meet twice") == "both done"
    assert log[:2] == ["start a", "start b"]
    sent = fake_openai.last_chat_request()["messages"]
    assert [(m.get("tool_call_id"), m["content"]) for m in sent[-2:]] == [("call_a", "met a"), ("call_b", "met b")]


async def test_invalid_arguments_give_the_model_an_error_it_can_act_on(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        call("read_file", "{not json", "call_1"),
        call("read_file", {"offset": 3}, "call_2"),
        call("no_such_tool", {}, "call_3"),
        "I give up",
    )
    assert await say(services, channel, "1", "read something") == "I give up"
    results = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool"]
    assert results[0].startswith("Error: the arguments are not valid JSON")
    assert results[1] == "Error: invalid arguments for read_file: path: Field required."
    assert results[2].startswith("Error: there is no tool named 'no_such_tool'")


async def test_the_iteration_cap_ends_with_a_clear_message(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure(services, maxIterations=3)
    fake_openai.set_responder(lambda request: call("list_dir", {}, f"call_{len(request['messages'])}"))
    reply = await say(services, channel, "1", "loop forever")
    assert "stopped after 3 rounds of tool calls" in reply
    assert len(fake_openai.chat_requests()) == 3
    session = await services.sessions.get("test:1")
    assert session is not None and session.messages[-1].content == reply


async def test_paths_outside_the_workspace_are_refused(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("top secret")
    os.symlink(secret, services.workspace.root / "link")
    attempts = ["../../etc/passwd", "/etc/passwd", "link", "sessions/test:2.json", "memory/../../outside.txt"]
    fake_openai.script(
        *[call("read_file", {"path": path}, f"call_{n}") for n, path in enumerate(attempts)],
        call("write_file", {"path": "../escape.txt", "content": "x"}, "call_w"),
        "done",
    )
    await say(services, channel, "1", "read the secrets")
    results = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool"]
    assert len(results) == len(attempts) + 1
    for result in results:
        assert result.startswith("Error:") and "top secret" not in result
    assert "leads outside the workspace" in results[0]
    assert "is absolute" in results[1]
    assert "leads outside the workspace" in results[2]
    assert "private to the bot" in results[3]
    assert not (services.workspace.root.parent / "escape.txt").exists()


async def test_old_tool_results_are_pruned_in_what_is_sent(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure(services, toolSoftTrimChars=1000, toolSoftTrimHead=100, toolSoftTrimTail=50, toolHardClearAfter=3,
              keepLastToolResults=1)  # fmt: skip
    big = "\n".join(f"line {n:04d} " + "z" * 40 for n in range(60))  # about 2,900 characters
    (services.workspace.root / "big.txt").write_text(big)
    reads = [call("read_file", {"path": "big.txt"}, f"call_{n}") for n in range(4)]
    fake_openai.script(*reads, "read it four times")
    await say(services, channel, "1", "read big.txt four times")

    tool_results = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool"]
    full = (await services.sessions.get("test:1")).messages[2].content  # type: ignore[union-attr]
    assert tool_results[3] == full  # the newest is protected
    trimmed = f"{full[:100]}\n\n--- trimmed (kept 100 head + 50 tail of {len(full)} chars) ---\n\n{full[-50:]}"
    assert tool_results[1] == tool_results[2] == trimmed
    assert tool_results[0] == "[Tool output cleared — content was processed in earlier turns]"
    # The stored session keeps the results whole; pruning only shapes what is sent.
    session = await services.sessions.get("test:1")
    assert session is not None and all(m.content == full for m in session.messages if m.role.value == "tool")


async def test_a_huge_tool_output_is_evicted_to_a_file_with_a_preview(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    configure(services, evictionChars=2000, evictionPreviewLines=2)
    lines = [f"row {n}" for n in range(1000)]
    (services.workspace.root / "huge.txt").write_text("\n".join(lines))
    fake_openai.script(call("read_file", {"path": "huge.txt", "limit": 1000}, "call_big"), "seen")
    await say(services, channel, "1", "read huge.txt")

    saved = services.workspace.root / "tool_results" / "test:1" / "call_big"
    assert saved.read_text() == "[huge.txt: lines 1-1000 of 1000]\n" + "\n".join(lines)
    result = next(m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool")
    total = len(saved.read_text())
    assert result == (
        f"[Output too large for the conversation: {total} characters, 1001 lines. "
        "Saved to tool_results/test:1/call_big; "
        "read it with read_file(path='tool_results/test:1/call_big', offset=..., limit=...).]\n"
        "[huge.txt: lines 1-1000 of 1000]\nrow 0\n[... 997 lines not shown ...]\nrow 998\nrow 999"
    )


async def test_stop_interrupts_a_run_and_the_orphaned_call_is_closed_before_the_next(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    log: list[str] = []
    register_nap_tool(services, log)
    fake_openai.script(call("nap", {"seconds": 30, "label": "long"}, "call_nap"), "after the stop")
    await services.router.accept(channel.message("1", "take a long nap"), channel)
    await channel_wait_for_log(log, "start long")
    await services.router.accept(channel.message("1", "/stop"), channel)
    assert (await channel.wait_for("1", 1))[0] == "Stopped."
    assert await say(services, channel, "1", "hello again") == "after the stop"

    sent = fake_openai.last_chat_request()["messages"]
    assert sent[-4]["tool_calls"][0]["id"] == "call_nap"
    assert sent[-3] == {"role": "tool", "content": INTERRUPTED_RESULT, "tool_call_id": "call_nap"}
    assert sent[-2]["role"] == "system"  # what was made for this message, just before it
    assert sent[-1] == {"role": "user", "content": "hello again"}
    assert "end long" not in log
    assert "Nothing is running." in await say(services, channel, "1", "/stop")


async def test_messages_sent_during_a_run_are_answered_after_it_in_order(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(Reply(text="first answer", delay=0.4), "second answer", "third answer")
    for text in ["one", "two", "three"]:
        await services.router.accept(channel.message("1", text), channel)
    assert await channel.wait_for("1", 3) == ["first answer", "second answer", "third answer"]
    users = [m["content"] for m in fake_openai.last_chat_request()["messages"] if m["role"] == "user"]
    assert users == ["one", "two", "three"]


async def channel_wait_for_log(log: list[str], entry: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while entry not in log:
            await asyncio.sleep(0.01)


async def test_a_streamed_reply_is_shown_as_it_grows_and_sent_and_stored_once(
    services: Application, fake_openai: FakeOpenAI
) -> None:
    streaming = RecordingChannel(streaming=True)
    fake_openai.script(call("list_dir", {}, "call_ls"), "Here is what I found in your workspace today")
    reply = await say(services, streaming, "1", "what's in my workspace?")
    assert reply == "Here is what I found in your workspace today"
    updates = streaming.stream_updates["1"]
    assert len(updates) > 3 and all(reply.startswith(update) for update in updates)
    assert streaming.sent["1"] == [reply]  # exactly one final message
    assert fake_openai.last_chat_request()["stream"] is True
    session = await services.sessions.get("test:1")
    assert session is not None
    assert [m.content for m in session.messages if m.role.value == "assistant" and not m.tool_calls] == [reply]


async def test_each_model_stream_is_closed_by_the_loop_not_left_to_the_finalizer(
    services: Application, fake_openai: FakeOpenAI
) -> None:
    # An async generator left unfinished is closed later by the event loop's finalizer hook: a
    # thread-safe wake-up and a task of its own. The loop's own generators are closed where it stops.
    finalized: list[str] = []
    firstiter, finalizer = sys.get_asyncgen_hooks()
    assert finalizer is not None

    def record(generator: AsyncGenerator[Any, Any]) -> None:
        assert isinstance(generator, types.AsyncGeneratorType)
        finalized.append(generator.ag_code.co_qualname)
        finalizer(generator)

    channel = RecordingChannel(streaming=True)
    fake_openai.script(call("list_dir", {"path": "."}, "call_l"), "Two answers, two streams.")
    sys.set_asyncgen_hooks(firstiter, record)
    try:
        assert await say(services, channel, "1", "what is in my workspace?") == "Two answers, two streams."
        gc.collect()
        await asyncio.sleep(0)
    finally:
        sys.set_asyncgen_hooks(firstiter, finalizer)
    assert [request.get("stream") for request in fake_openai.chat_requests()] == [True, True]
    assert not [name for name in finalized if name.startswith("LlmClient.")]
