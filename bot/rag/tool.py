"""The `rag_query` tool: the model searches the knowledge graph of past conversations on demand."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from bot.rag.service import RagService
from bot.tools.registry import Tool, ToolContext, ToolError


class RagQueryArguments(BaseModel):
    query: str = Field(min_length=1, max_length=2000, description="What to look for, in a sentence or keywords.")
    mode: Literal["naive", "local", "global", "hybrid", "mix"] | None = Field(
        None,
        description="naive: similar passages; local: specific entities; global: broad themes; "
        "hybrid/mix: both. Default: the configured mode.",
    )


def rag_query_tool(rag: RagService) -> Tool[RagQueryArguments]:
    async def run(arguments: RagQueryArguments, context: ToolContext) -> str:
        if not context.config.rag.enabled:
            raise ToolError("the knowledge graph (RAG) is disabled in runtime-config")
        try:
            found = await rag.search(context.config, context.session_id, arguments.query, arguments.mode)
        except Exception as error:
            raise ToolError(f"the knowledge graph could not be searched ({error or type(error).__name__})") from error
        return found or "Nothing relevant was found in past conversations."

    return Tool(
        name="rag_query",
        description=(
            "Search the knowledge graph built from all past conversations (entities, relations and "
            "excerpts with their dates) for what is not in the current context."
        ),
        arguments=RagQueryArguments,
        handler=run,
    )
