"""`/compact [N] [focus]` and `/context`: compacting by hand, and seeing what the context holds."""

from __future__ import annotations

from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.compaction.events import CompactionMethod, CompactionStatus
from bot.compaction.service import CompactionService
from bot.context.plan import BUILT_PARTS, ContextPlan, PromptPart
from bot.domain.conversation import split_summary
from bot.domain.message import Role
from bot.domain.session import AgentSession
from bot.llm.models import window_note
from bot.memory.long_term_pieces import LongTermUse
from bot.memory.service import MemoryService
from bot.runtime_config import RuntimeConfigStore
from bot.sessions.service import SessionService

BAR_WIDTH = 30
LARGEST_MESSAGES_SHOWN = 3


def parse_compact_args(args: str, default_keep: int) -> tuple[int, str | None]:
    """`N` (messages to keep) and the focus: `/compact`, `/compact 4`, `/compact 4 the API`, `/compact the API`."""
    words = args.split(maxsplit=1)
    if words and words[0].isdigit():
        return int(words[0]), (words[1].strip() if len(words) > 1 else None) or None
    return default_keep, args.strip() or None


def usage_bar(used: int, total: int, width: int = BAR_WIDTH) -> str:
    share = 0.0 if total <= 0 else min(1.0, used / total)
    filled = round(share * width)
    return "█" * filled + "░" * (width - filled) + f" {round(100 * used / max(total, 1))}%"


def describe_context(session: AgentSession, plan: ContextPlan, model: str, long_term: LongTermUse | None = None) -> str:
    """The `/context` text: a usage bar, tokens against the threshold, compactions, each part's real use, and
    how much of MEMORY.md the last prompt held (`long_term`)."""
    budget = plan.budget
    prefix, body = split_summary(session.messages)
    lines = [
        "Context usage",
        usage_bar(plan.total_tokens, budget.trigger_tokens),
        f"Tokens: ~{plan.total_tokens:,} of {budget.trigger_tokens:,} (compaction threshold; {model}: "
        f"input {budget.model.max_input_tokens:,}, output {budget.model.max_output_tokens:,})"
        + (f"; {window_note(budget.model)}" if budget.model.learned else ""),
        f"Conversation: ~{plan.message_tokens:,} tokens in {len(session.messages)} messages; "
        f"compacted when over ~{plan.room_for_messages:,}",
        f"Compactions: {session.metadata.compaction_count}" + _last_compaction(session),
        "Largest parts (tokens / share):",
    ]
    # A switched-off part (memory, RAG) takes and is given nothing: not worth a line each.
    shown = [part for part in PromptPart if plan.given(part.share) or plan.used(part)]
    if not plan.prompt_measured:
        shown = [part for part in shown if part not in BUILT_PARTS]
    for part in sorted(shown, key=plan.used, reverse=True):
        lines.append(f"  {part.label}: ~{plan.used(part):,} / {plan.given(part.share):,}{_share_note(plan, part)}")
    if not plan.prompt_measured:
        lines.append("  persona, instructions, memory and RAG: measured when the next message is answered")
    if long_term is not None:
        lines.append(long_term.describe())
    lines.append(f"Reply reserve: {plan.reply_reserve_tokens:,} tokens (the model's output, outside the threshold)")
    largest = sorted(body, key=lambda m: len(m.content), reverse=True)[:LARGEST_MESSAGES_SHOWN]
    if largest:
        lines.append("Largest messages:")
        for message in largest:
            preview = message.content.replace("\n", " ")[:50]
            lines.append(f"  {message.role.value}: {len(message.content):,} chars, {preview!r}")
    if prefix and prefix[0].role is Role.SYSTEM:
        lines.append(f"Summary: {len(prefix[0].content):,} chars (first message of the session)")
    return "\n".join(lines)


def _share_note(plan: ContextPlan, part: PromptPart) -> str:
    """Says when a part shares its share with others (memory), and when it was cut to it."""
    notes = []
    if sum(1 for other in PromptPart if other.share == part.share) > 1:
        notes.append(f"{part.share} share, ~{plan.share_used(part.share):,} used in all")
    if plan.cut(part):
        notes.append("cut to its share")
    return f" ({'; '.join(notes)})" if notes else ""


def _last_compaction(session: AgentSession) -> str:
    events = session.metadata.compaction_events
    if not events:
        return ""
    last = events[-1]
    what = f"removed {last.get('removed', 0)}, kept {last.get('kept', 0)}"
    if last.get("status") == CompactionStatus.FAILED.value:
        what = "failed"
    return f" (last: {last.get('reason')}, {last.get('method', '')} {what})".replace("  ", " ")


def register_compaction_commands(
    registry: CommandRegistry,
    sessions: SessionService,
    compaction: CompactionService,
    config_store: RuntimeConfigStore,
    memory: MemoryService | None = None,
) -> None:
    async def compact(request: CommandRequest) -> str:
        config = await config_store.current()
        keep, focus = parse_compact_args(request.args, config.compaction.keep_last_messages)
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        model = config.llm.model
        async with sessions.lock_for(session.id):
            event = await compaction.compact(session, model, config, keep_messages=keep, focus=focus)
        if event is None:
            _, body = split_summary(session.messages)
            return f"Nothing to compact: the conversation has {len(body)} messages and the last {keep} are kept."
        if event.status is CompactionStatus.FAILED:
            return f"Compaction failed ({event.error}). The conversation is unchanged."
        how = (
            "with an LLM summary" if event.method is CompactionMethod.SUMMARY else "by truncation (the summary failed)"
        )
        return (
            f"Compacted {how}: removed {event.removed} messages, kept {event.kept}. "
            f"Context ~{event.tokens_before:,} → ~{event.tokens_after:,} tokens."
            + (f" Focus: {focus}." if focus else "")
        )

    async def context(request: CommandRequest) -> str:
        config = await config_store.current()
        inbound = request.inbound
        session = await sessions.get_or_create(inbound.channel_type, inbound.chat_id)
        model = config.llm.model
        long_term = None
        if memory is not None and config.memory.enabled:
            long_term = (await memory.status(config.memory, session.id)).long_term_use
        return describe_context(session, compaction.planner.plan(session, model, config), model, long_term)

    registry.register(
        Command("compact", "summarize all but the last N messages (optional focus)", compact, "[N] [focus]")
    )
    registry.register(Command("context", "context usage: tokens, threshold, compactions, largest parts", context))
