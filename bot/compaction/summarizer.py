"""`Summarizer`: turns the old part of a conversation into a structured checkpoint summary.

The summary is a checkpoint in fixed sections (Goal, Constraints & Preferences, Progress, Key Decisions,
Conversation Dynamics, Next Steps, Critical Context). With a previous summary the model is asked to
UPDATE it, merging the new messages in, so facts from the first compaction survive the tenth. The
summary model is configurable (a cheaper one is fine), called with a low temperature, a bounded output
and a timeout. What it returns is validated (length, sections) and cut to the size cap; anything
else raises `SummaryFailed` so the caller can fall back to plain truncation.

Old messages that do not fit the summary model's own window are summarized in chunks, oldest first,
each chunk UPDATE-merged into the summary so far.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass

from bot.context.budget import ContextBudget
from bot.context.planner import ContextPlanner
from bot.domain.conversation import SUMMARY_HEADER
from bot.domain.message import Message, Role
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.errors import LlmError
from bot.llm.models import ModelRegistry
from bot.llm.wire import WireSize
from bot.settings import CompactionConfig

log = logging.getLogger(__name__)

SECTIONS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "## Key Decisions",
    "## Conversation Dynamics",
    "## Next Steps",
    "## Critical Context",
)
# A valid summary has at least this many of the sections (a model may merge or skip an empty one).
MIN_SECTIONS = 3
CAP_MARKER = "[… summary cut to its size cap]"

CHECKPOINT_PROMPT = """You are a conversation summarizer. Read the conversation below and produce a structured \
summary. Follow the EXACT format. Do NOT continue the conversation. Output ONLY the summary.

TARGET LENGTH: at most {words} words. Prioritize precision over completeness. Keep every fact the user \
stated about themselves or asked to be remembered (names, numbers, codes, dates, preferences) verbatim.

## Format

## Goal
[What the user is trying to accomplish — 1-2 sentences]

## Constraints & Preferences
- [Requirements, preferences, technical constraints mentioned]

## Progress
### Done
- [x] [Completed items with key details]

### In Progress
- [ ] [Current work items]

## Key Decisions
- **[Decision]**: [Brief rationale — what was chosen and why]

## Conversation Dynamics
- [User tone, frustration points, behavioral preferences expressed]
- [Communication style, recurring references, explicit instructions about assistant behavior]

## Next Steps
1. [Ordered list of what comes next]

## Critical Context
- [Facts, names, numbers, file paths, error messages, identifiers — anything needed to continue]
"""

UPDATE_PROMPT = """You are updating a conversation summary. The existing summary and NEW conversation messages \
are provided below.

TARGET LENGTH: at most {words} words. If the summary would exceed this, prioritize:
1. Facts the user stated or asked to be remembered (keep them verbatim)
2. Recent progress and decisions
3. Critical context (names, numbers, file paths, errors)
4. Active constraints and preferences
Drop older completed items from "Done" if needed to stay within target.

RULES:
1. PRESERVE all existing information unless explicitly superseded or space-constrained
2. ADD new progress, decisions, and context from the new messages
3. MOVE items from "In Progress" to "Done" when completed
4. UPDATE "Next Steps" based on what was accomplished
5. UPDATE "Conversation Dynamics" with any new tone/preference signals
6. PRESERVE exact names, numbers, file paths, function names, error messages
7. Use the SAME format as the existing summary (sections: {sections})

Output ONLY the updated summary."""

FOCUS_LINE = "\n\nIMPORTANT: Focus the summary on: {focus}"

_ROLE_LABELS = {Role.USER: "User", Role.ASSISTANT: "Assistant", Role.SYSTEM: "System", Role.TOOL: "Tool result"}


class SummaryFailed(Exception):
    """The summary model failed, timed out, or returned something that is not a usable summary."""


@dataclass(frozen=True)
class SummaryRequestPlan:
    """What one summarization needs: the model, its budget, the size cap and the optional focus."""

    model: str
    budget: ContextBudget
    cap_chars: int
    focus: str | None = None


def serialize_for_summary(messages: list[Message], max_chars_per_message: int) -> list[str]:
    """One readable block per message (tool calls and results included, each cut to a bound)."""
    blocks = []
    for message in messages:
        label = _ROLE_LABELS[message.role]
        if message.role is Role.TOOL and message.name:
            label = f"Tool result ({message.name})"
        text = _cut(message.content, max_chars_per_message)
        calls = "".join(
            f"\n[called {call.name}({_cut(call.arguments, max_chars_per_message // 4)})]"
            for call in message.tool_calls or []
        )
        blocks.append(f"**{label}:** {text}{calls}".rstrip())
    return blocks


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " […]"


def strip_header(text: str) -> str:
    """The summary text without the `[Conversation summary]` header line."""
    stripped = text.strip()
    if stripped.startswith(SUMMARY_HEADER):
        stripped = stripped[len(SUMMARY_HEADER) :].lstrip("\n")
    return stripped.strip()


def validate_summary(text: str, min_chars: int, cap_chars: int) -> str:
    """The summary if usable, cut at a line to `cap_chars`; `SummaryFailed` otherwise."""
    summary = strip_header(text)
    if len(summary) < min_chars:
        raise SummaryFailed(f"the summary is too short ({len(summary)} chars)")
    lowered = summary.lower()
    found = sum(1 for section in SECTIONS if section.lower() in lowered)
    if found < MIN_SECTIONS:
        raise SummaryFailed(f"the summary has {found} of the {len(SECTIONS)} sections")
    return cap_summary(summary, cap_chars)


def cap_summary(summary: str, cap_chars: int) -> str:
    """`summary` cut at a line boundary to at most `cap_chars`, with a visible marker when cut."""
    if len(summary) <= cap_chars:
        return summary
    head = summary[: max(0, cap_chars - len(CAP_MARKER) - 1)]
    if "\n" in head:
        head = head[: head.rfind("\n")]
    log.warning("[AutoCompact] Summary of %d chars cut to its cap of %d", len(summary), cap_chars)
    return f"{head}\n{CAP_MARKER}"


class Summarizer:
    """Asks the summary model for a checkpoint summary of old messages."""

    def __init__(self, llm: LlmClient, models: ModelRegistry, planner: ContextPlanner) -> None:
        self._llm = llm
        self._models = models
        self._planner = planner
        self._estimator = planner.estimator

    def plan(self, model: str, config: CompactionConfig, cap_tokens: int, focus: str | None) -> SummaryRequestPlan:
        budget = ContextBudget.for_model(self._models.lookup(model), config)
        cap_chars = min(config.summary_max_chars, int(cap_tokens * self._estimator.ratio_for(model)))
        return SummaryRequestPlan(model, budget, max(cap_chars, config.summary_min_chars + len(CAP_MARKER)), focus)

    async def summarize(
        self, messages: list[Message], previous: str | None, plan: SummaryRequestPlan, config: CompactionConfig
    ) -> tuple[str, int]:
        """The new summary text (no header) and how many model calls it took."""
        blocks = serialize_for_summary(messages, config.summary_input_message_chars)
        summary = previous
        calls = 0
        for chunk in self._chunks(blocks, previous, plan, config):
            summary = await self._call(chunk, summary, plan, config)
            calls += 1
        if summary is None:
            raise SummaryFailed("there was nothing to summarize")
        return summary, calls

    def _system_prompt(self, updating: bool, plan: SummaryRequestPlan) -> str:
        words = max(50, int(plan.cap_chars / 6.5))  # ~6.5 characters per English word with its space
        prompt = (
            UPDATE_PROMPT.format(words=words, sections=", ".join(s.removeprefix("## ") for s in SECTIONS))
            if updating
            else CHECKPOINT_PROMPT.format(words=words)
        )
        if plan.focus:
            prompt += FOCUS_LINE.format(focus=plan.focus)
        return prompt

    def _chunks(
        self, blocks: list[str], previous: str | None, plan: SummaryRequestPlan, config: CompactionConfig
    ) -> list[str]:
        """The serialized messages packed into chunks that each fit the summary model's window."""
        fixed = self._estimator.text(self._system_prompt(True, plan), plan.model)
        # The summary carried into each next chunk may be as large as the cap.
        cap_tokens = math.ceil(plan.cap_chars / self._estimator.ratio_for(plan.model))
        carried = max(self._estimator.text(previous or "", plan.model), cap_tokens)
        room = plan.budget.trigger_tokens - fixed - carried - 64  # framing of the two messages
        if room < 100:
            raise SummaryFailed(f"the summary model {plan.model} has no room for the conversation ({room} tokens)")
        chunks: list[str] = []
        current: list[str] = []
        used = 0
        for block in blocks:
            tokens = self._estimator.text(block, plan.model) + 2
            if tokens > room:
                block = _cut(block, int(room * self._estimator.ratio_for(plan.model) * 0.9))
                tokens = self._estimator.text(block, plan.model) + 2
            if current and used + tokens > room:
                chunks.append("\n\n".join(current))
                current, used = [], 0
            current.append(block)
            used += tokens
        if current:
            chunks.append("\n\n".join(current))
        return chunks

    async def _call(
        self, conversation: str, previous: str | None, plan: SummaryRequestPlan, config: CompactionConfig
    ) -> str:
        updating = previous is not None
        content = (
            f"## Existing Summary\n\n{previous}\n\n## New Conversation\n\n{conversation}" if updating else conversation
        )
        wire = [
            {"role": "system", "content": self._system_prompt(updating, plan)},
            {"role": "user", "content": content},
        ]
        request = ChatRequest(
            model=plan.model,
            messages=wire,
            temperature=config.summary_temperature,
            max_tokens=min(config.summary_max_tokens, plan.budget.model.max_output_tokens),
            timeout_seconds=config.summary_timeout_seconds,
            max_retries=0,
            purpose="compaction",
        )
        try:
            # The client's own timeout covers the HTTP call; this one also bounds connection set-up.
            result = await asyncio.wait_for(self._llm.complete(request), config.summary_timeout_seconds + 1)
        except TimeoutError as error:
            raise SummaryFailed(
                f"the summary model did not answer within {config.summary_timeout_seconds:g}s"
            ) from error
        except LlmError as error:
            raise SummaryFailed(f"the summary model failed ({error.failure.value})") from error
        if result.usage is not None:
            # A summary's prompt is the largest the bot sends: one the endpoint cut teaches its window, and
            # never calibrates the estimate.
            self._planner.observe_usage(
                plan.model, None, WireSize.of(wire), None, result.usage.prompt_tokens, config.silent_cut_ratio
            )
        return validate_summary(result.text, config.summary_min_chars, plan.cap_chars)
