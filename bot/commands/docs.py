"""`/docs`: the documents this chat sent the bot to read; `/docs forget ID` removes one from the graph."""

from __future__ import annotations

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.rag.uploads import DocumentReader, describe, plural


def register_docs_command(registry: CommandRegistry, documents: DocumentReader) -> None:
    async def handle(request: CommandRequest) -> str:
        session_id = request.inbound.session_id
        action, _, rest = request.args.strip().partition(" ")
        if action.lower() == "forget":
            upload_id = rest.strip()
            if not upload_id:
                return "Which document? /docs forget ID (the ids are in /docs)."
            forgotten = await documents.forget(session_id, upload_id)
            if forgotten is None:
                return f"No document {upload_id} in this chat."
            return f"Forgotten: {forgotten.name} ({plural(len(forgotten.parts), 'part')} removed from my memory)."
        if action:
            return "Usage: /docs, or /docs forget ID."
        return describe(await documents.listed(session_id))

    registry.register(Command("docs", "documents you sent me to read; /docs forget ID removes one", handle))
