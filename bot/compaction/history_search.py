"""`search_history`: keyword search over a chat's full archive, including what was compacted away.

Every message stays in `sessions/archive/{id}.jsonl`; compaction only shortens the live session. The
tool finds messages that contain every word of the query (case-insensitive; when none has them all,
those with the most), newest first, each with the messages around it, within a bounded output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, Field

from bot.domain.message import Message, Role
from bot.tools.registry import Tool, ToolContext

TOOL_NAME = "search_history"
TOOL_DESCRIPTION = (
    "Search the full history of this chat, including older messages that were summarized away from "
    "the conversation. Keyword search (case-insensitive); returns the matching messages with the "
    "messages around them, newest first. Use it when the user refers to something said earlier that "
    "is not in the conversation or its summary."
)
# Characters shown of each message around a match; the match is centred in the window.
SNIPPET_CHARS = 400
_LABELS = {Role.USER: "User", Role.ASSISTANT: "Assistant", Role.SYSTEM: "System", Role.TOOL: "Tool"}


class SearchHistoryArguments(BaseModel):
    query: str = Field(min_length=1, max_length=300, description="Words to look for, e.g. 'locker code'.")
    max_results: int | None = Field(None, ge=1, le=50, description="How many matches to return at most.")


@dataclass(frozen=True)
class HistoryMatch:
    index: int
    message: Message
    hits: int


def _terms(query: str) -> list[str]:
    return [term for term in re.findall(r"\w[\w.@:/+-]*", query.lower()) if term]


def _searchable(message: Message) -> str:
    calls = " ".join(f"{call.name} {call.arguments}" for call in message.tool_calls or [])
    return f"{message.content} {calls}".lower()


def find_matches(messages: list[Message], query: str) -> list[HistoryMatch]:
    """Messages with all the query's words, else those with the most of them; newest first."""
    terms = _terms(query)
    if not terms:
        return []
    scored = []
    for index, message in enumerate(messages):
        text = _searchable(message)
        hits = sum(1 for term in terms if term in text)
        if hits:
            scored.append(HistoryMatch(index, message, hits))
    if not scored:
        return []
    best = max(match.hits for match in scored)
    return sorted((m for m in scored if m.hits == best), key=lambda m: m.index, reverse=True)


def _snippet(message: Message, terms: list[str]) -> str:
    text = message.content.replace("\n", " ")
    for call in message.tool_calls or []:
        text += f" [called {call.name}({call.arguments})]"
    if len(text) <= SNIPPET_CHARS:
        return text
    lowered = text.lower()
    positions = [lowered.find(term) for term in terms if term in lowered]
    centre = min(positions) if positions else 0
    start = max(0, min(centre - SNIPPET_CHARS // 3, len(text) - SNIPPET_CHARS))
    piece = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


def format_matches(
    messages: list[Message], matches: list[HistoryMatch], query: str, *, limit: int, context: int, max_chars: int
) -> str:
    if not matches:
        return f'No message in this chat\'s history matches "{query}".'
    terms = _terms(query)
    header = f'{len(matches)} message(s) match "{query}"; newest first:'
    parts = [header]
    used = len(header)
    shown = 0
    for match in matches[:limit]:
        lines = [f"--- {match.message.timestamp.strftime('%Y-%m-%d %H:%M')} (message {match.index + 1}) ---"]
        for index in range(max(0, match.index - context), min(len(messages), match.index + context + 1)):
            message = messages[index]
            marker = ">> " if index == match.index else "   "
            label = _LABELS[message.role] + (f" ({message.name})" if message.role is Role.TOOL and message.name else "")
            lines.append(f"{marker}{label}: {_snippet(message, terms)}")
        block = "\n".join(lines)
        if shown and used + len(block) + 1 > max_chars:
            break
        parts.append(block[: max_chars - used - 1] if not shown else block)
        used += len(block) + 1
        shown += 1
    if shown < len(matches):
        parts.append(f"({len(matches) - shown} more not shown; use more specific words to narrow the search.)")
    return "\n".join(parts)


class ArchiveReader(Protocol):
    """Where a chat's whole history is read (`SessionService.read_archive`)."""

    async def read_archive(self, session_id: str) -> list[Message]: ...


class HistorySearch:
    """Searches one chat's archive."""

    def __init__(self, archive: ArchiveReader) -> None:
        self._archive = archive

    async def search(self, session_id: str, query: str, *, limit: int, context: int, max_chars: int) -> str:
        messages = await self._archive.read_archive(session_id)
        matches = find_matches(messages, query)
        return format_matches(messages, matches, query, limit=limit, context=context, max_chars=max_chars)


def search_history_tool(search: HistorySearch) -> Tool[SearchHistoryArguments]:
    """The `search_history` tool for the registry; it searches the calling chat's archive only."""

    async def handler(arguments: SearchHistoryArguments, context: ToolContext) -> str:
        config = context.config.compaction
        limit = min(arguments.max_results or config.history_search_max_results, config.history_search_max_results)
        return await search.search(
            context.session_id,
            arguments.query,
            limit=limit,
            context=config.history_search_context_messages,
            max_chars=config.history_search_max_chars,
        )

    return Tool(TOOL_NAME, TOOL_DESCRIPTION, SearchHistoryArguments, handler)
