"""The commands every build has: `/start`, `/help`, `/new`, `/status`."""

from __future__ import annotations

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.commands.status import StatusReporter
from bot.sessions.service import SessionService

INTRODUCTION = (
    "Hi! I'm your personal assistant. I remember our conversations: long-term notes in MEMORY.md, "
    "daily notes, and what we talked about before. Just write to me."
)


def register_basic_commands(registry: CommandRegistry, sessions: SessionService, status: StatusReporter) -> None:
    async def start(request: CommandRequest) -> str:
        return f"{INTRODUCTION}\n\n{registry.help_text()}"

    async def new(request: CommandRequest) -> str:
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        async with sessions.lock_for(session.id):
            removed = await sessions.clear_messages(session)
        return f"Started a new conversation ({removed} messages cleared). Memory files are kept."

    async def show_status(request: CommandRequest) -> str:
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        return await status.report(session)

    registry.register(Command("start", "what this bot is", start))
    registry.register(Command("help", "the commands", start))
    registry.register(Command("new", "start a new conversation (memory stays)", new))
    registry.register(Command("status", "messages, context size, memory, model", show_status))
