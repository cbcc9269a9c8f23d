"""`MemoryService`: the memory facade the pipeline, the commands and the tools use.

It takes a chat to its memory (`bot.memory.audience` says whose: the owner's, or the chat's or person's
own) and hands the work to the module of each concern: the scopes and their files
(`bot.memory.scopes`), the items' vectors (`bot.memory.indexing`), the `# Memory` section of a prompt
(`bot.memory.prompt_building`), and the writes of finished turns, searches, forgets and `/status` here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import TypeVar

from bot.access.policy import sees_owner_memory
from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.domain.memory import MemoryItem, MemoryLayer, MemoryPack, MemoryQuery, TurnMemoryEvent
from bot.domain.message import Message
from bot.llm.client import LlmClient
from bot.llm.embedders import Embedder, Embedders
from bot.memory.audience import memory_scope_for, owner_memory_key, shared_long_term
from bot.memory.documents import DocumentsInDatabase
from bot.memory.index_database import INDEX_FAILURES
from bot.memory.indexing import VectorIndexing
from bot.memory.legacy_context import read_daily_notes
from bot.memory.lexical_index import tokenize
from bot.memory.long_term import LongTermMemory
from bot.memory.long_term_pieces import (
    LongTermUse,
)
from bot.memory.paths import memory_paths_for
from bot.memory.prompt_building import MemoryPrompt as MemoryPrompt
from bot.memory.prompt_building import MemoryPromptBuilder, PromptAudience, read_long_term
from bot.memory.recording import TurnRecorder
from bot.memory.retrieval import ScoreParts
from bot.memory.scopes import ItemsInDatabase, MemoryScope, MemoryScopes
from bot.memory.write_service import MemoryWriteService, WriteReport
from bot.notices import OwnerNotices
from bot.settings import MemoryConfig
from bot.storage.durability import DeferredSync
from bot.workspace import MemoryPaths, Workspace

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Forgotten:
    """What one forget removed: the items (the one named first, then the exchanges that held it), and the
    ids of the session messages behind them."""

    items: list[MemoryItem]
    message_ids: list[str]


ForgetListener = Callable[[Forgotten], Awaitable[object]]

# Leads the items the owner shared, where a chat that does not see the owner's memory is shown them.
SHARED_ITEMS_LINE = "Shared by the owner:"


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
        documents_in_database: DocumentsInDatabase | None = None,
        items_in_database: ItemsInDatabase | None = None,
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
        self._scopes = MemoryScopes(workspace, clock.zone, deferred, documents_in_database, items_in_database)
        self._indexing = VectorIndexing(self._scopes)
        self._embedders = embedders or Embedders(llm)
        self._prompts = MemoryPromptBuilder(
            clock, self._estimator, self._scopes, self._indexing, self._embedders, notices
        )
        self._recorder = TurnRecorder(clock, llm, self._scopes, self._indexing, self._embedders)
        self._forget_listeners: list[ForgetListener] = []

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
        sections = shared_long_term(await read_long_term(owner))
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

    async def every_scope(self) -> list[MemoryScope]:
        """`scopes_on_disk`, and with `BOT_DATABASE_URL` every scope whose items are in the database."""
        return await self._scopes.everywhere()

    async def let_go(self, paths: MemoryPaths) -> None:
        """Close the memory kept at `paths` and forget it (a chat whose id changed takes its memory elsewhere);
        a later use reads it again from where it is then."""
        await self._scopes.let_go(paths)

    def _scope_at(self, paths: MemoryPaths) -> MemoryScope:
        return self._scopes.at(paths)

    def fresh(self, scope: MemoryScope, requested: float | None = None) -> AbstractAsyncContextManager[MemoryScope]:
        """Hold the scope's lock with its items re-read from any file that changed on disk (`MemoryScopes.fresh`)."""
        return self._scopes.fresh(scope, requested)

    def embedder(self, config: MemoryConfig) -> Embedder | None:
        """The bundled offline model (`"local"`), the endpoint's embedding model, or None: lexical only."""
        return self._embedders.get(config.embeddings_model)

    def index_vectors(self, scope: MemoryScope, config: MemoryConfig) -> None:
        """Make sure every active item of the scope gets a vector, in the background, when the bot is idle
        (`bot.memory.indexing`). Retrieval meanwhile uses whatever vectors there are, and BM25 for the rest."""
        embedder = self.embedder(config)
        if embedder is not None:
            self._indexing.start(scope, embedder)

    def follow_replies(self, replies_waiting: Callable[[], int]) -> None:
        """`replies_waiting`: how many messages are waiting for their reply or being answered; the items'
        vectors are made only once it has been 0 for a moment, and in a burst (more than one) a message
        whose vector would queue behind another's is answered from its words."""
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
        """The `# Memory` section for a message to `session_id` (`MemoryPromptBuilder.build`)."""
        scope = await self.scope(config, session_id)
        # Outside the owner's own chats, the chat's own MEMORY.md and what the owner shared.
        shared = await self.shared_by_owner(config, session_id)
        audience = PromptAudience(session_id, shared, self.sees_owner_memory(config, session_id))
        return await self._prompts.build(scope, config, audience, text, live, share_tokens, model, active_skill)

    # -- writing ----------------------------------------------------------------------------------

    async def append_daily_note(self, config: MemoryConfig, event: TurnMemoryEvent) -> str:
        return await self._recorder.append_daily_note(await self._scope_of(config, event), event)

    async def record_turn(
        self, config: MemoryConfig, event: TurnMemoryEvent, previous_assistant_text: str = "", model: str = ""
    ) -> WriteReport:
        """The structured write of a finished turn: the episodic item and what extraction found."""
        scope = await self._scope_of(config, event)
        return await self._recorder.record_turn(scope, config, event, previous_assistant_text, model)

    async def retract_turn(self, config: MemoryConfig, event: TurnMemoryEvent, days: list[date]) -> WriteReport:
        """Take back what `append_daily_note` and `record_turn` wrote for `event` (`TurnRecorder.retract_turn`)."""
        return await self._recorder.retract_turn(await self._scope_of(config, event), event, days)

    async def record_missing_turns(
        self, config: MemoryConfig, session_id: str, turns: list[tuple[Message, Message]]
    ) -> int:
        """Record the (user, assistant) turns no item refers to yet (`TurnRecorder.record_missing_turns`)."""
        return await self._recorder.record_missing_turns(
            await self.scope(config, session_id), config, session_id, turns
        )

    async def _scope_of(self, config: MemoryConfig, event: TurnMemoryEvent) -> MemoryScope:
        return await self.scope(config, event.memory_key or event.session_id)

    # -- reading for tools, commands and /status --------------------------------------------------

    async def search(
        self, config: MemoryConfig, session_id: str, text: str, limit: int, *, shared: bool = False
    ) -> list[tuple[MemoryItem, float]]:
        """The chat's items matching `text` (the newest when it is empty), best first; with `shared`, then
        the items the owner shared that have a word of `text` (all of them for an empty text), in a chat
        that does not see the owner's memory itself."""
        scope = await self.scope(config, session_id)
        embedder = self.embedder(config)
        vector = None if embedder is None else await self._prompts.query_vector(scope, embedder, text)
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

    async def explain(
        self, config: MemoryConfig, session_id: str, text: str, limit: int
    ) -> list[tuple[MemoryItem, ScoreParts]]:
        """The best `limit` items retrieval would offer a message `text` in this chat, each with its score in
        parts (`MemoryRetrievalService.explain`): the console shows why an item is recalled."""
        scope = await self.scope(config, session_id)
        embedder = self.embedder(config)
        vector = None if embedder is None else await self._prompts.query_vector(scope, embedder, text)
        query = MemoryQuery(
            text=text,
            session_id=session_id,
            now=self._clock.now(),
            working_top_k=config.working_top_k,
            working_days=config.recent_days,
            semantic_top_k=config.semantic_top_k,
        )
        async with self.fresh(scope):
            explained = (await self.off_loop_if_large(scope, scope.retrieval.explain, query, vector))[:limit]
            found = scope.store.get_many(entry.ranked.item_id for entry in explained)
        return [(found[entry.ranked.item_id], entry) for entry in explained if entry.ranked.item_id in found]

    async def newest_items(self, config: MemoryConfig, session_id: str, per_layer: int) -> MemoryListing:
        """The chat's newest `per_layer` active items of each layer, each with the versions it superseded, and
        how many active items each layer holds (the console lists them)."""
        scope = await self.scope(config, session_id)

        def read() -> MemoryListing:
            store = scope.store
            listed = [item for layer in MemoryLayer for item in store.newest_in_layer(layer, per_layer)]
            replaced: dict[str, list[MemoryItem]] = {}
            for older in store.superseded():
                replaced.setdefault(older.superseded_by or "", []).append(older)
            return MemoryListing(
                {layer.value: count for layer, count in store.count_by_layer().items()},
                [(item, _history(replaced, item)) for item in listed],
            )

        return await self._scopes.run_fresh(scope, read)

    async def change(self, config: MemoryConfig, session_id: str, edit: Callable[[MemoryWriteService], T]) -> T:
        """Run one explicit change (tools, `/memory`) under the scope's lock, then write it durably."""
        scope = await self.scope(config, session_id)
        # A forget looks through every exchange: at 100,000 items, seconds the event loop must not wait.
        result = await self._scopes.run_fresh(scope, edit, scope.writer)
        await scope.store.flush()
        return result

    def on_forget(self, listener: ForgetListener) -> None:
        """Told what each forget removed, so other stores forget it too (the knowledge graph what came from
        its messages, the console's traces its text)."""
        self._forget_listeners.append(listener)

    async def forget(self, config: MemoryConfig, session_id: str, item_id: str) -> MemoryItem:
        """Forget one item (and the recorded exchanges containing it) here and in every listener."""
        removed = await self.change(config, session_id, lambda writer: writer.forget(item_id))
        forgotten = Forgotten(removed, sorted({reference for item in removed for reference in item.references}))
        for listener in self._forget_listeners:
            try:
                await listener(forgotten)
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
            except INDEX_FAILURES as error:
                log.warning("[Memory] Item vectors of %s could not be read: %s", scope.paths.root, error)
        async with self.fresh(scope):
            counts = scope.store.count_by_layer()
            vectors = scope.vectors.coverage
            skipped = scope.store.skipped_lines
        long_term = await read_long_term(scope)
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
class MemoryListing:
    """Active items per layer, and the newest of them, each with its earlier versions (newest first)."""

    counts: dict[str, int]
    items: list[tuple[MemoryItem, list[MemoryItem]]]


def _history(replaced: dict[str, list[MemoryItem]], item: MemoryItem) -> list[MemoryItem]:
    """The versions `item` replaced (`replaced`: the superseded items by their successor's id), each back to
    the first, newest first."""
    found: list[MemoryItem] = []
    waiting = list(replaced.get(item.id, ()))
    seen = {item.id}
    while waiting:
        older = waiting.pop()
        if older.id in seen:
            continue
        seen.add(older.id)
        found.append(older)
        waiting.extend(replaced.get(older.id, ()))
    return sorted(found, key=lambda version: version.updated_at, reverse=True)


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
