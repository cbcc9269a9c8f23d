"""The memory tools, called directly and by the model through the tool loop."""

from __future__ import annotations

import pytest

from bot.app import Application
from bot.memory.service import MemoryService
from bot.memory.tools import (
    MemoryAddArgs,
    MemoryForgetArgs,
    MemoryIdArgs,
    MemorySearchArgs,
    MemoryTools,
    MemoryUpdateArgs,
    NoArgs,
    UpdateMemoryArgs,
    WriteMemoryArgs,
)
from bot.settings import RuntimeConfig
from bot.shipped import shipped_path
from bot.tools.registry import ToolContext, ToolError
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.recording_channel import RecordingChannel
from tests.memory.helpers import memory_section, read_items, say


@pytest.fixture
def tools(services: Application) -> MemoryTools:
    return MemoryTools(MemoryService(services.workspace, services.clock, services.llm))


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(session_id="test:1", channel_type="test", chat_id="1", config=RuntimeConfig())


async def test_add_search_update_promote_and_forget(
    services: Application, tools: MemoryTools, ctx: ToolContext
) -> None:
    semantic = services.workspace.memory.items_dir / "semantic.jsonl"
    added = await tools.memory_add(MemoryAddArgs(content="The user's sister is called Maria."), ctx)
    assert added.startswith("Remembered as m") and added.endswith("(semantic).")
    again = await tools.memory_add(MemoryAddArgs(content="the user's sister is called maria"), ctx)
    assert "Already known" in again and "confidence now 1.00" in again
    [record] = read_items(semantic)

    found = await tools.memory_search(MemorySearchArgs(query="sister"), ctx)
    assert record["id"] in found and "semantic/fact" in found and "Maria" in found

    updated = await tools.memory_update(MemoryUpdateArgs(id=record["id"], content="The user's sister is Marta."), ctx)
    assert f"{record['id']} is kept as history" in updated
    old, new = read_items(semantic)
    assert old["supersededBy"] == new["id"] and new["content"] == "The user's sister is Marta."
    assert "Maria" not in await tools.memory_search(MemorySearchArgs(query="sister"), ctx)

    episode = await tools.memory_add(MemoryAddArgs(content="We met at the conference.", layer="EPISODIC"), ctx)
    episode_id = episode.split()[2]
    assert "semantic memory" in await tools.memory_promote(MemoryIdArgs(id=episode_id), ctx)
    assert [r["id"] for r in read_items(semantic)][-1] == episode_id

    forgotten = await tools.memory_forget(MemoryForgetArgs(id=new["id"]), ctx)
    assert forgotten == f"Forgotten {new['id']}: The user's sister is Marta."
    with pytest.raises(ToolError, match="no memory item"):
        await tools.memory_forget(MemoryForgetArgs(id=new["id"]), ctx)


async def test_memory_md_tools(services: Application, tools: MemoryTools, ctx: ToolContext) -> None:
    assert await tools.read_memory(NoArgs(), ctx) == "(MEMORY.md is empty)"
    await tools.write_memory(WriteMemoryArgs(content="- Likes hiking"), ctx)
    await tools.write_memory(WriteMemoryArgs(content="- Works at ACME"), ctx)
    assert await tools.read_memory(NoArgs(), ctx) == "- Likes hiking\n- Works at ACME"
    await tools.update_memory(UpdateMemoryArgs(old_text="ACME", new_text="Initech"), ctx)
    written = services.workspace.memory.long_term_file.read_text()
    # The guide a new MEMORY.md starts with stays.
    assert written.startswith("<!--") and written.endswith("-->\n- Likes hiking\n- Works at Initech\n")
    with pytest.raises(ToolError, match=r"not in MEMORY\.md"):
        await tools.update_memory(UpdateMemoryArgs(old_text="ACME", new_text="x"), ctx)


async def test_the_tools_act_on_the_calling_chats_scope_only(services: Application, tools: MemoryTools) -> None:
    config = RuntimeConfig.model_validate({"memory": {"scope": "chat"}})
    chat_a = ToolContext(session_id="test:a", channel_type="test", chat_id="a", config=config)
    chat_b = ToolContext(session_id="test:b", channel_type="test", chat_id="b", config=config)
    await tools.memory_add(MemoryAddArgs(content="The safe combination is 12-34-56."), chat_a)
    await tools.write_memory(WriteMemoryArgs(content="Chat A's notes"), chat_a)
    assert await tools.memory_search(MemorySearchArgs(query="safe combination"), chat_b) == "No memory items match."
    assert await tools.read_memory(NoArgs(), chat_b) == "(MEMORY.md is empty)"
    new_memory_md = (shipped_path("workspace_template") / "memory" / "MEMORY.md").read_text()
    assert services.workspace.memory.long_term_file.read_text() == new_memory_md  # the global one is untouched


async def test_forget_that_i_through_the_model(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    await say(services, channel, "1", "Remember that I like jazz.")
    await say(services, channel, "1", "/new")
    await say(services, channel, "1", "what music do I like?")
    assert "I like jazz." in (memory_section(fake_openai.system_prompts()[-1]) or "")

    fake_openai.script(Reply(tool_calls=[ToolCallSpec("memory_forget", {"query": "like jazz"}, id="c1")]), "Done.")
    assert await say(services, channel, "1", "forget that I like jazz") == "Done."
    tool_result = [m for m in fake_openai.last_chat_request()["messages"] if m["role"] == "tool"][-1]
    assert tool_result["content"].startswith("Forgotten m") and "I like jazz." in tool_result["content"]
    assert all("jazz" not in r["content"] for r in read_items(services.workspace.memory.items_dir / "semantic.jsonl"))

    await say(services, channel, "1", "/new")
    await say(services, channel, "1", "what music do I like?")
    assert "I like jazz." not in (memory_section(fake_openai.system_prompts()[-1]) or "")
