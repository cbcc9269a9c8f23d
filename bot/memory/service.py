"""`MemoryService`: the memory facade the pipeline, the commands and the tools use.

It keeps one `MemoryScope` per memory root (the owner's, and one per chat or person that has its own:
`bot.memory.audience` says which a chat uses), each with its item store, indexes and lock, built on
first use. It builds the `# Memory` prompt section (MEMORY.md, then the structured pack, or the daily
notes when the pack is empty) and records finished turns (daily note + structured items).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TypeVar

from bot.access.policy import sees_owner_memory
from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.domain.conversation import Incremental
from bot.domain.memory import LiveConversation, MemoryItem, MemoryPack, MemoryQuery, TurnMemoryEvent
from bot.domain.message import Message, Role
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedder, Embedders
from bot.memory.audience import memory_scope_for, owner_memory_key, shared_long_term
from bot.memory.budget import TextBudget
from bot.memory.daily_notes import USER_TEXT_LIMIT, one_line
from bot.memory.embeddings import (
    Vector,
)
from bot.memory.extraction import MemoryCandidate, RuleBasedExtractor
from bot.memory.indexing import VectorIndexing
from bot.memory.legacy_context import read_daily_notes, render_daily_notes
from bot.memory.lexical_index import tokenize
from bot.memory.llm_extraction import LlmMemoryExtractor
from bot.memory.long_term import LongTermMemory
from bot.memory.long_term_pieces import (
    LongTermIndex,
    LongTermPrompt,
    LongTermUse,
    long_term_prompt,
    whole_long_term,
)
from bot.memory.paths import memory_paths_for
from bot.memory.prompt_pack import MemoryPromptPackService, offered_order
from bot.memory.retrieval import (
    LEXICAL_CANDIDATES,
    VECTOR_CANDIDATES,
    RetrievalResult,
    dense_query_text,
    names_in,
)
from bot.memory.scopes import INLINE_WORK_MAX_ITEMS, MemoryScope, MemoryScopes
from bot.memory.write_service import MemoryWriteService, WriteReport
from bot.notices import OwnerNotices
from bot.settings import MemoryConfig
from bot.storage.durability import DeferredSync
from bot.workspace import MemoryPaths, Workspace

log = logging.getLogger(__name__)

# Given the ids of the session messages behind forgotten items.
ForgetListener = Callable[[list[str]], Awaitable[object]]
T = TypeVar("T")

MEMORY_HEADER = "# Memory"
LONG_TERM_HEADER = "## Long-term Memory"
# Leads the items the owner shared, where a chat that does not see the owner's memory is shown them.
SHARED_ITEMS_LINE = "Shared by the owner:"
# However small the budget, MEMORY.md may use this much of it (its head and a visible cut marker).
LONG_TERM_MIN_TOKENS = 64
SHARE_MARGIN = 0.02
# Below this share of the prompt for MEMORY.md, none of it is reached by relevance: its head is cut visibly.
LONG_TERM_RELEVANCE_MIN_TOKENS = 128
# A MEMORY.md longer than this is split and indexed in memory's thread, not on the event loop.
LONG_TERM_INLINE_CHARS = 20_000


@dataclass(frozen=True)
class MemoryPrompt:
    """The `# Memory` section for one turn, in two parts, and the pack behind it (None when unused).

    `stable` is MEMORY.md, the same from message to message (it leads the prompt, a prefix the
    provider can cache); `turn` is what was retrieved for this message (the pack, or the daily notes),
    which goes just before it. Each starts with the `# Memory` header when it has content.
    """

    stable: str
    turn: str
    pack: MemoryPack | None
    # How much of MEMORY.md the prompt holds (None: there is no MEMORY.md).
    long_term: LongTermUse | None = None

    @property
    def shows_pack(self) -> bool:
        """Whether `turn` is the structured pack (else it is the daily notes standing in)."""
        return self.pack is not None and not self.pack.empty

    @property
    def text(self) -> str:
        """Both parts as one `# Memory` section."""
        sections = [part.removeprefix(MEMORY_HEADER).strip("\n") for part in (self.stable, self.turn) if part]
        return "\n\n".join([MEMORY_HEADER, *sections]) if sections else ""


class MemoryService:
    """One entry point to every memory layer, for any chat."""

    def __init__(
        self,
        workspace: Workspace,
        clock: Clock,
        llm: LlmClient,
        estimator: TokenEstimator | None = None,
        embedders: Embedders | None = None,
        deferred: DeferredSync | None = None,
        notices: OwnerNotices | None = None,
        allowed_users: Callable[[], list[int]] | None = None,
    ) -> None:
        """`deferred`: where the appends the archive can stand in for (daily-note lines, new items) leave
        their fsync; without one, every write is durable before it returns. `notices`: the owner is told
        there when MEMORY.md first outgrows its share of the prompt. `allowed_users`: the current
        `access.allowedUsers`, whose first id is the owner (see `bot.memory.audience`); without it no
        Telegram chat is the owner's."""
        self._workspace = workspace
        self._notices = notices
        self._allowed_users = allowed_users or list
        self._deferred = deferred
        self._clock = clock
        self._llm = llm
        self._estimator = estimator or TokenEstimator()
        self._scopes = MemoryScopes(workspace, clock.zone, deferred)
        self._indexing = VectorIndexing(self._scopes)
        self._rules = RuleBasedExtractor()
        self._embedders = embedders or Embedders(llm)
        self._pack = MemoryPromptPackService(self._estimator, clock.zone)
        self._forget_listeners: list[ForgetListener] = []
        # What memory leaves out because the live conversation shows it anyway, kept as a chat grows.
        self._live: Incremental[_LiveIds] = Incremental(_LiveIds, _with_id)
        self._live_user_texts: Incremental[set[str]] = Incremental(set, _with_note_user_text)

    async def off_loop_if_large(self, scope: MemoryScope, function: Callable[..., T], *args: object) -> T:
        """Run a read of the scope in memory's thread, or inline while the scope is small."""
        return await self._scopes.off_loop_if_large(scope, function, *args)

    # -- scopes -----------------------------------------------------------------------------------

    def paths_for(self, config: MemoryConfig, session_id: str) -> MemoryPaths:
        """The folders of the memory a chat (or a person, by `person_memory_key`) reads and writes."""
        return memory_paths_for(
            self._workspace, memory_scope_for(config, session_id, self._allowed_users()), session_id
        )

    def sees_owner_memory(self, config: MemoryConfig, session_id: str) -> bool:
        """Whether a turn in this chat may be given the owner's private memory."""
        return sees_owner_memory(session_id, self._allowed_users(), config.owner_memory_everywhere)

    async def shared_by_owner(self, config: MemoryConfig, session_id: str) -> str:
        """What the owner shared with everyone (the `## Shared` sections of their MEMORY.md and the items
        they marked shared), for a chat that does not see the owner's memory itself; "" otherwise."""
        owner = self._owner_scope_for(config, session_id)
        if owner is None:
            return ""
        sections = shared_long_term(await self._read_long_term(owner))
        lines = [f"- {item.content}" for item in await self._shared_items(owner)]
        shared_items = "\n".join([SHARED_ITEMS_LINE, *lines]) if lines else ""
        return "\n\n".join(part for part in (sections, shared_items) if part)

    def _owner_scope_for(self, config: MemoryConfig, session_id: str) -> MemoryScope | None:
        """The owner's memory, where a chat that does not see it takes what the owner shared; None for a
        chat that sees the owner's memory itself (or when there is no owner to share)."""
        if self.sees_owner_memory(config, session_id):
            return None
        key = owner_memory_key(config, self._allowed_users())
        if config.scope == "global":
            paths = self._workspace.memory
        elif key is not None:
            paths = self.paths_for(config, key)
        else:
            return None
        return None if paths == self.paths_for(config, session_id) else self._scope_at(paths)

    async def _shared_items(self, owner: MemoryScope) -> list[MemoryItem]:
        try:
            async with self.fresh(owner):
                return owner.store.shared()
        except OSError as error:
            log.warning("[Memory] Could not read the shared items of %s: %s", owner.paths.items_dir, error)
            return []

    async def scope(self, config: MemoryConfig, session_id: str) -> MemoryScope:
        """The chat's memory scope (created on first use; `fresh` reads its files)."""
        return self._scope_at(self.paths_for(config, session_id))

    def scopes_on_disk(self) -> list[MemoryScope]:
        """Every memory root in the workspace: the global one, each chat's and each person's (whatever the scope)."""
        return self._scopes.on_disk()

    def _scope_at(self, paths: MemoryPaths) -> MemoryScope:
        return self._scopes.at(paths)

    def fresh(self, scope: MemoryScope, requested: float | None = None) -> AbstractAsyncContextManager[MemoryScope]:
        """Hold the scope's lock with its items re-read from any file that changed on disk (`MemoryScopes.fresh`)."""
        return self._scopes.fresh(scope, requested)

    def embedder(self, config: MemoryConfig) -> Embedder | None:
        """The bundled offline model (`"local"`), the endpoint's embedding model, or None: lexical only."""
        return self._embedders.get(config.embeddings_model)

    async def query_vector(self, scope: MemoryScope, config: MemoryConfig, text: str) -> Vector | None:
        """The message's embedding, or None when the scope's vectors come from another embedder (or none)."""
        embedder = self.embedder(config)
        if embedder is None or not text.strip() or scope.vectors.embedder_name != embedder.name:
            return None
        names = names_in(text)
        speakers = (
            await self.off_loop_if_large(scope, scope.store.speakers_among, names) if names and scope.loaded else set()
        )
        return await self._indexing.state(scope).embed_query(embedder, dense_query_text(text, speakers))

    def index_vectors(self, scope: MemoryScope, config: MemoryConfig) -> None:
        """Make sure every active item of the scope gets a vector, in the background, when the bot is idle
        (`bot.memory.indexing`). Retrieval meanwhile uses whatever vectors there are, and BM25 for the rest."""
        embedder = self.embedder(config)
        if embedder is not None:
            self._indexing.start(scope, embedder)

    def follow_replies(self, replies_waiting: Callable[[], bool]) -> None:
        """`replies_waiting`: whether any message is waiting for its reply or being answered; the items'
        vectors are made only once it has been False for a moment."""
        self._indexing.follow_replies(replies_waiting)

    def warm_up(self, config: MemoryConfig) -> None:
        """At start, in the background: read every memory scope's items and bring their vectors up to date,
        so the first message finds its memory ready instead of loading it."""
        if not config.enabled:
            return
        for scope in self.scopes_on_disk():
            self._indexing.warm_up(scope, self.embedder(config))

    async def settle(self) -> None:
        """Make every pending vector now and wait until no scope is embedding (tests, benchmarks)."""
        await self._indexing.settle()

    async def close(self) -> None:
        """Stop background embedding and close the scopes' files."""
        await self._indexing.close()
        await self._scopes.close()

    # -- the prompt -------------------------------------------------------------------------------

    async def build_prompt(
        self,
        config: MemoryConfig,
        session_id: str,
        text: str,
        live: list[Message] | None = None,
        share_tokens: int | None = None,
        model: str | None = None,
        active_skill: str | None = None,
    ) -> MemoryPrompt:
        """The `# Memory` section for a message to `session_id`; empty text when there is no memory.

        `live` is the conversation the model is sent anyway: memory of it is not shown again (neither its
        items nor its lines of the daily notes). `share_tokens` is what the prompt plan gives the memory
        section: everything here (MEMORY.md, then the pack) is chosen to fit it, counted in the tokens of
        `model` (the chat model, as the plan counts them), so nothing chosen is cut afterwards.
        """
        now = self._clock.now()
        scope = await self.scope(config, session_id)
        live_ids = self._live.over(live or [])
        live_conversation = LiveConversation(live_ids.ids, live_ids.in_order)
        limit = config.max_prompt_budget_tokens
        if share_tokens is not None:
            # The share is a hard cap on the whole section: the header, and the rounding of per-line
            # token estimates against the estimate of the joined text, come out of it first.
            overhead = self._estimator.text(MEMORY_HEADER + "\n\n", model) + math.ceil(SHARE_MARGIN * share_tokens)
            limit = min(limit, share_tokens - overhead)
        budget = TextBudget(limit, self._estimator, model)
        stable = relevant = ""
        # Outside the owner's own chats, the chat's own MEMORY.md and what the owner shared (see `shared_by_owner`).
        own = await self._read_long_term(scope)
        shared = await self.shared_by_owner(config, session_id)
        long_term = "\n\n".join(part for part in (own.strip("\n"), shared) if part) if shared else own
        use: LongTermUse | None = None
        if long_term:
            # MEMORY.md may not take the whole share: scored items keep the rest. Beyond its share, its beginning
            # leads and the pieces relevant to the message come from the rest.
            cap = max(int(budget.remaining * config.long_term_max_share), min(budget.remaining, LONG_TERM_MIN_TOKENS))
            if budget.cost(long_term) <= cap:
                fitted = whole_long_term(long_term)
            elif cap < LONG_TERM_RELEVANCE_MIN_TOKENS:
                # Too little room to reach anything by relevance: its head, cut visibly.
                kept, _ = TextBudget(cap, self._estimator, model).take(long_term)
                fitted = LongTermPrompt(kept, "", LongTermUse(len(long_term), len(kept)))
            else:
                fitted = long_term_prompt(
                    await self._long_term_index(scope, long_term), text, cap, config.long_term_relevant_share,
                    self._estimator, model,
                )  # fmt: skip
            # Charged with its header, and the relevant parts with the blank line that joins them to the pack.
            shown = f"{LONG_TERM_HEADER}\n{fitted.head}"
            relevant_cost = budget.cost(f"\n\n{fitted.relevant}") if fitted.relevant else 0
            budget.remaining = max(budget.remaining - budget.cost(shown) - relevant_cost, 0)
            stable = f"{MEMORY_HEADER}\n\n{shown}"
            relevant, use = fitted.relevant, fitted.use
            if self.sees_owner_memory(config, session_id):  # the owner's MEMORY.md, not a group's
                self._tell_about_long_term(scope, use)
        scope.long_term_use = use
        try:
            pack = await self._build_pack(
                scope, config, session_id, text, now, live_conversation, budget.remaining, model, active_skill
            )
        except Exception:
            # One broken piece of the structured memory must not cost the rest: the notes stand in.
            log.exception("[Memory] The memory pack could not be built; the daily notes stand in")
            pack = None
        sections: list[str] = [relevant] if relevant else []
        if pack is not None and not pack.empty:
            sections.append(pack.rendered)
        elif config.legacy_daily_notes_enabled and budget.remaining > 0:
            notes = await read_daily_notes(scope.notes, now.date(), config.recent_days)
            live_texts = self._live_user_texts.over(live or [])
            sections += render_daily_notes(notes.without(live_texts, scope.note_lines), budget)
        turn = "\n\n".join([MEMORY_HEADER, *sections]) if sections else ""
        return MemoryPrompt(stable, turn, pack, use)

    async def _long_term_index(self, scope: MemoryScope, text: str) -> LongTermIndex:
        """MEMORY.md's pieces and their index, made again only when the file changed (in a thread when large)."""
        index = scope.long_term_index
        if index is None or index.text != text:
            if len(text) > LONG_TERM_INLINE_CHARS:
                index = await self._scopes.in_thread(LongTermIndex, text)
            else:
                index = LongTermIndex(text)
            scope.long_term_index = index
        return index

    def _tell_about_long_term(self, scope: MemoryScope, use: LongTermUse) -> None:
        """The owner is told once when MEMORY.md outgrows its share; again only after it fitted meanwhile."""
        if self._notices is None:
            return
        key = f"memory-md-over-share:{scope.paths.long_term_file}"
        if use.whole:
            self._notices.settle(key)
            return
        self._notices.tell_once(
            key,
            f"MEMORY.md ({use.total_chars:,} characters) has outgrown its share of the prompt. Nothing in it is "
            f"lost: its first {use.head_chars:,} characters go with every message, and the parts further down "
            "that a message is about are brought in with it. Keep what must always be in view near the top; "
            "/status shows how much of it is in the prompt.",
        )

    @staticmethod
    async def _dense_ahead(scope: MemoryScope, vector_task: asyncio.Future[Vector | None]) -> None:
        """The dense candidates of the message, computed while the lexical ones are read (the vector
        index keeps the answer for the scoring that follows; the scope's lock is held meanwhile)."""
        vector = await asyncio.shield(vector_task)  # a cancel here must not cancel the vector itself
        if vector is not None:
            await asyncio.to_thread(scope.vectors.relevance, vector, VECTOR_CANDIDATES)

    async def _read_ahead(
        self, scope: MemoryScope, text: str, vector_task: asyncio.Future[Vector | None], arrived: float
    ) -> Vector | None:
        """The message's vector, with the facts its scoring reads (and, past a small memory, its dense
        candidates) read meanwhile under the scope's lock, which is not held waiting for the vector."""
        dense_task: asyncio.Future[None] | None = None
        async with self.fresh(scope, arrived):
            if len(scope.store) > INLINE_WORK_MAX_ITEMS:
                dense_task = asyncio.ensure_future(self._dense_ahead(scope, vector_task))
            await self.off_loop_if_large(scope, self._prefetch, scope, text)
            if dense_task is not None:
                if not vector_task.done():
                    dense_task.cancel()  # still waiting for the vector: nothing started yet
                with contextlib.suppress(asyncio.CancelledError):
                    await dense_task
        return await vector_task

    @staticmethod
    def _prefetch(scope: MemoryScope, text: str) -> None:
        """Read the facts of the lexical candidates of `text` and of their neighbours ahead of scoring (the
        store keeps them, the lexical index keeps the search), while the message's vector is being made."""
        scope.store.episodic_neighbours(scope.lexical.search(text, LEXICAL_CANDIDATES))

    def _retrieve_and_pack(
        self, scope: MemoryScope, query: MemoryQuery, vector: Vector | None, model: str | None
    ) -> tuple[RetrievalResult, MemoryPack]:
        """Score the candidates, then pack the best (parsing only the items the pack reads)."""
        result = scope.retrieval.retrieve(query, vector)
        offered = offered_order(result.ranked, query)
        pack = self._pack.build(
            offered,
            scope.store.get_many,
            result.candidates,
            query.soft_budget_tokens,
            query.max_budget_tokens,
            model,
        )
        return result, pack

    async def _read_long_term(self, scope: MemoryScope) -> str:
        try:
            return await scope.long_term.for_model()
        except OSError as error:
            log.warning("[Memory] Could not read %s: %s", scope.paths.long_term_file, error)
            return ""

    async def _build_pack(
        self,
        scope: MemoryScope,
        config: MemoryConfig,
        session_id: str,
        text: str,
        now: datetime,
        live: LiveConversation,
        remaining_tokens: int,
        model: str | None,
        active_skill: str | None,
    ) -> MemoryPack | None:
        query = MemoryQuery(
            text=text,
            session_id=session_id,
            now=now,
            working_top_k=config.working_top_k,
            working_days=config.recent_days,
            episodic_top_k=config.episodic_top_k,
            semantic_top_k=config.semantic_top_k,
            procedural_top_k=config.procedural_top_k,
            soft_budget_tokens=min(config.soft_prompt_budget_tokens, remaining_tokens),
            max_budget_tokens=remaining_tokens,
            live=live,
            active_skill=active_skill,
        )
        started = time.perf_counter()
        if not scope.loaded and scope.lock.locked():
            # The start-up read of a large memory is still running: answer now from MEMORY.md and the
            # daily notes rather than keep the first messages after a start waiting for it.
            log.info("[Context] Memory items of %s still loading; the daily notes stand in", scope.paths.root)
            return None
        self._indexing.reply_started()
        self.index_vectors(scope, config)
        # The message's vector is made in a worker thread (the engine runs in C without the GIL) while the
        # files are checked and the facts of the lexical candidates and their neighbours are read; if the
        # vector is there by then, the dense search has run beside that read too (numpy, without the GIL). The
        # scope's lock is never held waiting for the vector: the other chats' turns would queue behind it.
        # Without an embedder there is no vector to wait for, nor a read to do ahead of it: the scoring
        # starts at once.
        vector_task = (
            asyncio.ensure_future(self.query_vector(scope, config, text)) if self.embedder(config) is not None else None
        )
        # Both holds of the lock below see the files as they were when the message came: the scoring after
        # the vector does not check them again (an edit made meanwhile is read for the next message).
        arrived = time.monotonic()
        try:
            vector = await self._read_ahead(scope, text, vector_task, arrived) if vector_task is not None else None
            async with self.fresh(scope, arrived):
                # The pack is built under the lock too: the items it reads are the ones that were scored.
                result, pack = await self.off_loop_if_large(scope, self._retrieve_and_pack, scope, query, vector, model)
        except OSError as error:
            log.warning("[Memory] Could not read the memory items of %s: %s", scope.paths.items_dir, error)
            return None
        finally:
            if vector_task is not None and not vector_task.done():
                vector_task.cancel()
        pack = dataclasses.replace(
            pack,
            diagnostics=dataclasses.replace(
                pack.diagnostics,
                embeddings_used=result.used_vectors,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            ),
        )
        for scored in pack.items:
            scope.accessed[scored.item.id] = now
        scope.last_pack = pack
        log.info("[Context] Memory pack: %s", pack.diagnostics.describe())
        return pack

    # -- writing ----------------------------------------------------------------------------------

    async def append_daily_note(self, config: MemoryConfig, event: TurnMemoryEvent) -> str:
        scope = await self.scope(config, event.memory_key or event.session_id)
        return await scope.notes.append(event.timestamp, event.user_text, event.assistant_text)

    async def record_turn(
        self, config: MemoryConfig, event: TurnMemoryEvent, previous_assistant_text: str = "", model: str = ""
    ) -> WriteReport:
        """The structured write of a finished turn: the episodic item and what extraction found."""
        candidates = await self._extract(config, event, previous_assistant_text, model)
        if event.speaker:
            candidates = [attributed(candidate, event.speaker) for candidate in candidates]
        scope = await self.scope(config, event.memory_key or event.session_id)
        async with self.fresh(scope):
            report = scope.writer.record_turn(event, candidates, config)
        await scope.store.flush(durable=False)
        self.index_vectors(scope, config)
        return report

    async def retract_turn(self, config: MemoryConfig, event: TurnMemoryEvent, days: list[date]) -> WriteReport:
        """Take back what `append_daily_note` and `record_turn` wrote for `event`, an exchange /retry or
        /undo dropped: its daily-note line (looked for in `days`) and the items made or reinforced by it."""
        scope = await self.scope(config, event.memory_key or event.session_id)
        references = [ref for ref in (event.user_message_id, event.assistant_message_id) if ref]
        note_removed = await scope.notes.remove_exchange(days, event.user_text, event.assistant_text)
        async with self.fresh(scope):
            report = scope.writer.retract(references)
        await scope.store.flush()
        log.info(
            "[Memory] Took back a dropped exchange of %s: note line %s, %d items removed, %d weakened",
            event.session_id,
            "removed" if note_removed else "not found",
            len(report.added),
            len(report.reinforced),
        )
        return report

    async def record_missing_turns(
        self, config: MemoryConfig, session_id: str, turns: list[tuple[Message, Message]]
    ) -> int:
        """Record the (user, assistant) turns no item refers to yet; returns how many were recorded.

        Before a compaction takes messages out of the live session, this makes sure each of them
        reached structured memory (a turn may have been missed while memory was off or a write failed).
        """
        scope = await self.scope(config, session_id)
        recorded = 0
        async with self.fresh(scope):
            missing = [(user, answer) for user, answer in turns if not scope.store.is_referenced(user.id)]
            for user, answer in missing:
                event = TurnMemoryEvent(
                    session_id,
                    user.content,
                    answer.content,
                    user.timestamp.astimezone(self._clock.zone),
                    user.id,
                    answer.id,
                )
                extracted = self._rules.extract(event, code_aware=config.code_aware_extraction_enabled)
                scope.writer.record_turn(event, extracted, config)
                recorded += 1
        await scope.store.flush()
        if recorded:
            log.info("[Memory] Recorded %d turns of %s before compaction", recorded, session_id)
        return recorded

    async def _extract(
        self, config: MemoryConfig, event: TurnMemoryEvent, previous_assistant_text: str, model: str
    ) -> list[MemoryCandidate]:
        code_aware = config.code_aware_extraction_enabled
        if config.llm_extraction_enabled and model:
            extracted = await LlmMemoryExtractor(self._llm, model).extract(event)
            if extracted is not None:
                procedures = self._rules.extract(
                    dataclasses.replace(event, user_text=""),
                    code_aware=code_aware,
                    previous_assistant_text=previous_assistant_text,
                )
                return extracted + procedures
        return self._rules.extract(event, code_aware=code_aware, previous_assistant_text=previous_assistant_text)

    # -- reading for tools, commands and /status --------------------------------------------------

    async def search(
        self, config: MemoryConfig, session_id: str, text: str, limit: int, *, shared: bool = False
    ) -> list[tuple[MemoryItem, float]]:
        """The chat's items matching `text` (the newest when it is empty), best first; with `shared`, then
        the items the owner shared that have a word of `text` (all of them for an empty text), in a chat
        that does not see the owner's memory itself."""
        scope = await self.scope(config, session_id)
        vector = await self.query_vector(scope, config, text)
        async with self.fresh(scope):
            if not text.strip():
                found = [(item, 0.0) for item in scope.store.recently_updated(limit)]
            else:
                found = await self.off_loop_if_large(scope, scope.retrieval.search, text, limit, vector)
        owner = self._owner_scope_for(config, session_id) if shared else None
        if owner is None or len(found) >= limit:
            return found
        terms = set(tokenize(text))
        matching = [
            item for item in await self._shared_items(owner) if not terms or terms & set(tokenize(item.content))
        ]
        return found + [(item, 0.0) for item in matching[: limit - len(found)]]

    async def change(self, config: MemoryConfig, session_id: str, edit: Callable[[MemoryWriteService], T]) -> T:
        """Run one explicit change (tools, `/memory`) under the scope's lock, then write it durably."""
        scope = await self.scope(config, session_id)
        async with self.fresh(scope):
            # A forget looks through every exchange: at 100,000 items, seconds the event loop must not wait.
            result = await self.off_loop_if_large(scope, edit, scope.writer)
        await scope.store.flush()
        return result

    def on_forget(self, listener: ForgetListener) -> None:
        """Told the message ids behind everything forgotten, so other stores (the knowledge graph)
        forget what came from those messages too."""
        self._forget_listeners.append(listener)

    async def forget(self, config: MemoryConfig, session_id: str, item_id: str) -> MemoryItem:
        """Forget one item (and the recorded exchanges containing it) here and in every listener."""
        removed = await self.change(config, session_id, lambda writer: writer.forget(item_id))
        message_ids = sorted({reference for item in removed for reference in item.references})
        for listener in self._forget_listeners:
            try:
                await listener(message_ids)
            except Exception:
                log.exception("[Memory] Forgot %s here, but another store could not forget it", item_id)
        return removed[0]

    async def long_term(self, config: MemoryConfig, session_id: str) -> LongTermMemory:
        return (await self.scope(config, session_id)).long_term

    async def status(self, config: MemoryConfig, session_id: str) -> MemoryStatus:
        """What `/status` shows of the chat's memory."""
        scope = await self.scope(config, session_id)
        embedder = self.embedder(config)
        if embedder is not None:
            # Stored vectors not taken up yet (`python -m bot status` never starts the bot), or being read:
            # they count, whenever `/status` is asked.
            try:
                await self._indexing.read_stored(scope, embedder)
            except (OSError, sqlite3.Error) as error:
                log.warning("[Memory] Item vectors of %s could not be read: %s", scope.paths.root, error)
        async with self.fresh(scope):
            counts = scope.store.count_by_layer()
            vectors = scope.vectors.coverage
            skipped = scope.store.skipped_lines
        long_term = await self._read_long_term(scope)
        today = (await read_daily_notes(scope.notes, self._clock.now().date(), 0)).today
        return MemoryStatus(
            root=scope.paths.root,
            long_term_chars=len(long_term),
            long_term_use=scope.long_term_use,
            items_per_layer={layer.value: count for layer, count in counts.items()},
            today_note_lines=len(today.splitlines()) if today else 0,
            last_pack=scope.last_pack,
            vectors=vectors,
            embedder=scope.vectors.embedder_name,
            skipped_lines=skipped,
        )

    def now(self) -> datetime:
        return self._clock.now()


@dataclass(frozen=True)
class MemoryStatus:
    """The memory of one chat's scope at a glance."""

    root: Path
    long_term_chars: int
    items_per_layer: dict[str, int]
    today_note_lines: int
    last_pack: MemoryPack | None
    # How much of MEMORY.md the last prompt held (None before the first message since the start).
    long_term_use: LongTermUse | None = None
    # (items with a vector, active items) and the embedder that made them (None: lexical only).
    vectors: tuple[int, int] = (0, 0)
    embedder: str | None = None
    # Lines of the item files that are not valid items (kept in the files, left out of memory).
    skipped_lines: int = 0


def attributed(candidate: MemoryCandidate, speaker: str) -> MemoryCandidate:
    """`candidate` as said by `speaker`: "Name: content", and its slot the speaker's own ("Name: lives in")."""
    prefix = f"{speaker}: "
    content = candidate.content if candidate.content.startswith(prefix) else prefix + candidate.content
    key = None if candidate.key is None else prefix + candidate.key
    return dataclasses.replace(candidate, content=content, key=key)


@dataclass
class _LiveIds:
    ids: set[str] = field(default_factory=set)
    in_order: list[str] = field(default_factory=list)


def _with_id(live: _LiveIds, message: Message) -> _LiveIds:
    live.ids.add(message.id)
    live.in_order.append(message.id)
    return live


def _with_note_user_text(texts: set[str], message: Message) -> set[str]:
    """A user message's text as its daily-note line holds it."""
    if message.role is Role.USER:
        texts.add(one_line(message.content, USER_TEXT_LIMIT))
    return texts
