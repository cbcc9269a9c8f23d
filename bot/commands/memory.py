"""`/memory`: the user sees and steers the structured memory from the chat.

`/memory [text]` lists the items matching `text` (the newest without it) with their ids;
`/memory forget ID` removes one from its file and every index; `/memory pin ID` puts one into every
prompt (`/memory unpin ID` undoes it); `/memory share ID`, in the owner's own chat, lets one item of
the owner's memory reach every chat (`/memory unshare ID` undoes it). Under `memory.scope: user` it
acts on the sender's own memory, in a group too: each person sees and steers only what is theirs.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.domain.memory import MemoryItem
from bot.memory.paths import person_memory_key
from bot.memory.service import MemoryService
from bot.memory.tools import describe_item
from bot.memory.write_service import MemoryWriteService, UnknownMemoryItem
from bot.runtime_config import RuntimeConfigStore

LIST_LIMIT = 10
USAGE = "[text] | forget ID | pin ID | unpin ID | share ID | unshare ID"


def register_memory_commands(
    registry: CommandRegistry, memory: MemoryService, config_store: RuntimeConfigStore
) -> None:
    async def handle(request: CommandRequest) -> str:
        config = (await config_store.current()).memory
        if not config.enabled:
            return "Memory is switched off (memory.enabled is false in runtime-config.json)."
        inbound = request.inbound
        session_id = inbound.session_id
        if config.scope == "user" and inbound.is_group:  # a private chat's memory is already the person's
            session_id = person_memory_key(inbound.channel_type, inbound.user_id)
        action, _, rest = request.args.partition(" ")
        item_id = rest.strip()
        now = memory.now()

        async def edit(change: Callable[[MemoryWriteService], MemoryItem]) -> MemoryItem | None:
            try:
                return await memory.change(config, session_id, change)
            except UnknownMemoryItem:
                return None

        if action.lower() in ("forget", "pin", "unpin", "share", "unshare"):
            if not item_id:
                return f"Which item? /memory {action.lower()} ID (the ids are in /memory)."
            if action.lower() == "forget":
                try:
                    forgotten = await memory.forget(config, session_id, item_id)
                except UnknownMemoryItem:
                    return f"No memory item {item_id}."
                return f"Forgotten: {forgotten.content}"
            if action.lower() in ("share", "unshare"):
                if not memory.sees_owner_memory(config, session_id):
                    return "Only the owner shares memory, from their own chat."
                share = action.lower() == "share"
                changed = await edit(lambda writer: writer.share(item_id, now, share))
                if changed is None:
                    return f"No memory item {item_id}."
                return f"Shared with every chat: {changed.content}" if share else f"Not shared: {changed.content}"
            pinned = action.lower() == "pin"
            changed = await edit(lambda writer: writer.pin(item_id, now, pinned))
            if changed is None:
                return f"No memory item {item_id}."
            return f"Pinned: {changed.content}" if pinned else f"Unpinned: {changed.content}"

        query = request.args.strip()
        found = await memory.search(config, session_id, query, LIST_LIMIT, shared=True)
        if not found:
            return f"Nothing in memory matches “{query}”." if query else "The structured memory is empty so far."
        title = f"Memory matching “{query}”:" if query else f"Newest {len(found)} memory items:"
        lines = [title, *(describe_item(item) for item, _ in found)]
        lines.append("Forget one with /memory forget ID, keep one in every prompt with /memory pin ID.")
        return "\n".join(lines)

    registry.register(Command("memory", "see and steer what I remember", handle, USAGE))
