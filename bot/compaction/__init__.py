"""Keeping the prompt inside the model's context without silently losing what matters.

Modules, in the order a compaction uses them (the token estimate and the budget are in `bot.context`):

- `cut_point`: where to cut, always between whole turns.
- `summarizer`: the structured checkpoint summary (create, or UPDATE the previous one), validated.
- `service`: `CompactionService`, which runs a compaction, keeps the `CompactionEvent`s (`events`),
  hands compacted messages to a `PreCompactionSink` (structured memory) first, and offers
  `shrink_for_retry` for payload-too-large recovery.
- `history_search`: the `search_history` tool over the chat's full archive.

The `compaction` section of runtime-config (defaults in `config/runtime-config.json`):

- `enabled` (true): automatic compaction before the model call (AutoCompactionSystem, 18).
- `maxContextTokens` (50000), `inputWindowShare` (0.8), `safetyMarginShare` (0.05): the threshold is
  the smallest of maxContextTokens, inputWindowShare × maxInputTokens, and maxInputTokens −
  maxOutputTokens − safetyMarginShare × maxInputTokens (limits from models.json).
- `keepLastMessages` (20): `/compact` keeps this many messages by default; automatic compaction keeps
  at most this many.
- `budgetShares` (system 0.10, memory 0.15, rag 0.10, tools 0.10, summary 0.15, recent 0.40): each
  prompt part's share of the threshold, adding up to at most 1. The system prompt, memory and RAG
  parts are planned at their share before they are built (a disabled part at 0).
- `keepRecentRatio` (0.5): a compaction keeps verbatim at most this ratio of the `recent` share, and
  leaves the conversation (summary and recent part, half each) at most this ratio of the room the
  other parts leave it, so it has room to grow before the next compaction.
- `summaryModel` (null): the model for summaries; null means `llm.balancedModel`, then the chat model.
- `summaryTemperature` (0.3), `summaryMaxTokens` (1200, never above the summary model's
  maxOutputTokens), `summaryTimeoutSeconds` (20.0): the summary call; a failure, a timeout or an
  answer that is not a summary falls back to truncation.
- `summaryMaxChars` (6000): size cap of the stored summary (also capped by the `summary` share);
  longer is cut at a line, with a marker. `summaryMinChars` (150): a shorter answer is not a summary.
- `summaryInputMessageChars` (2000): each message is cut to this many characters for the summarizer.
- `recoveryAttempts` (2): payload-too-large recovery: harder compactions before giving up.
- `silentCutRatio` (0.85): for a request with no earlier one of its chat to compare with, reported prompt tokens
  under this share of what the provider usually reports of the estimate mean a silent cut.
- `historySearchMaxResults` (8), `historySearchContextMessages` (1), `historySearchMaxChars` (4000):
  `search_history`'s matches at most, messages shown around each, and its output bound.
- `keptEvents` (20): CompactionEvents kept in the session's metadata (`compactionEvents`).

Session metadata written here: `summary` (the latest summary text, also the first message
`[Conversation summary]\\n…`), `compactionCount`, `compactionEvents`, `usageAtLastCompaction` (so one
usage report triggers at most one compaction) and `messagesDroppedWithoutSummary` (truncation fallback).
"""
