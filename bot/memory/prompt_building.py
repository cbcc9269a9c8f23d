"""`MemoryPromptBuilder`: the `# Memory` section of a message's prompt.

MEMORY.md first (whole while it fits its share; past it, its beginning and the pieces the message is
about), then the structured pack: the items retrieval scores highest for the message, packed within
what is left of memory's share of the prompt; the daily notes stand in when the pack is empty. What the
live conversation shows anyway is left out. The message's vector is made here, on the reply path, while
the facts its scoring reads are read; the stored items' vectors are `bot.memory.indexing`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import datetime

from bot.clock import Clock
from bot.context.estimator import TokenEstimator
from bot.domain.conversation import Incremental
from bot.domain.memory import LiveConversation, MemoryPack, MemoryQuery
from bot.domain.message import Message, Role
from bot.llm.embedders import Embedder, Embedders
from bot.memory.budget import TextBudget
from bot.memory.daily_notes import USER_TEXT_LIMIT, one_line
from bot.memory.embeddings import Vector
from bot.memory.indexing import VectorIndexing
from bot.memory.legacy_context import read_daily_notes, render_daily_notes
from bot.memory.long_term_pieces import (
    LongTermIndex,
    LongTermPrompt,
    LongTermUse,
    long_term_prompt,
    whole_long_term,
)
from bot.memory.prompt_pack import MemoryPromptPackService, offered_order
from bot.memory.retrieval import LEXICAL_CANDIDATES, VECTOR_CANDIDATES, RetrievalResult, dense_query_text, names_in
from bot.memory.scopes import INLINE_WORK_MAX_ITEMS, MemoryScope, MemoryScopes
from bot.notices import OwnerNotices
from bot.settings import MemoryConfig

log = logging.getLogger(__name__)

MEMORY_HEADER = "# Memory"
LONG_TERM_HEADER = "## Long-term Memory"
# However small the budget, MEMORY.md may use this much of it (its head and a visible cut marker).
LONG_TERM_MIN_TOKENS = 64
SHARE_MARGIN = 0.02
# Below this share of the prompt for MEMORY.md, none of it is reached by relevance: its head is cut visibly.
LONG_TERM_RELEVANCE_MIN_TOKENS = 128
# A MEMORY.md longer than this is split and indexed in memory's thread, not on the event loop.
LONG_TERM_INLINE_CHARS = 20_000


def long_term_cap_tokens(config: MemoryConfig, room_tokens: int) -> int:
    """What MEMORY.md may take of the memory section's `room_tokens` whole; beyond it, its beginning leads and
    the pieces a message is about come from the rest."""
    return max(int(room_tokens * config.long_term_max_share), min(room_tokens, LONG_TERM_MIN_TOKENS))


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


def left_for_graph(
    config: MemoryConfig, prompt: MemoryPrompt | None, estimator: TokenEstimator, model: str | None
) -> int:
    """What the knowledge graph's `# Relevant Memory` may take: all that is recalled for a message shares one
    budget, the pack's soft budget (`softPromptBudgetTokens`), and what the pack (or the daily notes standing in)
    took of it comes first: its items were each scored against the message, the graph's snippets come with no
    score to compare. Past the soft budget only the pack's most relevant items go (`worth_room`), never the
    graph's. MEMORY.md is not recalled but always shown: it does not count here."""
    if prompt is None or not prompt.turn:
        return config.soft_prompt_budget_tokens
    return max(0, config.soft_prompt_budget_tokens - estimator.text(prompt.turn, model))


@dataclass(frozen=True)
class PromptAudience:
    """Who a prompt is for: the chat, what the owner shared with it ("" in the owner's own chats), and
    whether it is the owner's own chat (only the owner is told about their MEMORY.md)."""

    session_id: str
    shared: str
    owners_own: bool


class MemoryPromptBuilder:
    """Builds the `# Memory` section of each message's prompt."""

    def __init__(
        self,
        clock: Clock,
        estimator: TokenEstimator,
        scopes: MemoryScopes,
        indexing: VectorIndexing,
        embedders: Embedders,
        notices: OwnerNotices | None,
    ) -> None:
        self._clock = clock
        self._estimator = estimator
        self._scopes = scopes
        self._indexing = indexing
        self._embedders = embedders
        self._notices = notices
        self._pack = MemoryPromptPackService(estimator, clock.zone)
        # What memory leaves out because the live conversation shows it anyway, kept as a chat grows.
        self._live: Incremental[_LiveIds] = Incremental(_LiveIds, _with_id)
        self._live_user_texts: Incremental[set[str]] = Incremental(set, _with_note_user_text)

    async def build(
        self,
        scope: MemoryScope,
        config: MemoryConfig,
        audience: PromptAudience,
        text: str,
        live: list[Message] | None = None,
        share_tokens: int | None = None,
        model: str | None = None,
        active_skill: str | None = None,
    ) -> MemoryPrompt:
        """The `# Memory` section for a message to `audience.session_id` in `scope`; empty text when there
        is no memory.

        `live` is the conversation the model is sent anyway: memory of it is not shown again (neither its
        items nor its lines of the daily notes). `share_tokens` is what the prompt plan gives the memory
        section: everything here (MEMORY.md, then the pack) is chosen to fit it, counted in the tokens of
        `model` (the chat model, as the plan counts them), so nothing chosen is cut afterwards.
        """
        now = self._clock.now()
        session_id = audience.session_id
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
        own = await read_long_term(scope)
        shared = audience.shared
        long_term = "\n\n".join(part for part in (own.strip("\n"), shared) if part) if shared else own
        use: LongTermUse | None = None
        if long_term:
            # MEMORY.md may not take the whole share: scored items keep the rest. Beyond its share, its beginning
            # leads and the pieces relevant to the message come from the rest.
            cap = long_term_cap_tokens(config, budget.remaining)
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
            shown = f"{LONG_TERM_HEADER}\n{fitted.head}" if fitted.head.strip() else ""
            relevant_cost = budget.cost(f"\n\n{fitted.relevant}") if fitted.relevant else 0
            budget.remaining = max(budget.remaining - budget.cost(shown) - relevant_cost, 0)
            stable = f"{MEMORY_HEADER}\n\n{shown}" if shown else ""
            relevant, use = fitted.relevant, fitted.use
            if audience.owners_own:  # the owner's MEMORY.md, not a group's
                self._tell_about_long_term(scope, use, config)
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

    def _tell_about_long_term(self, scope: MemoryScope, use: LongTermUse, config: MemoryConfig) -> None:
        """The owner is told once when MEMORY.md outgrows its share; again only after it fitted meanwhile."""
        if self._notices is None:
            return
        key = f"memory-md-over-share:{scope.paths.long_term_file}"
        if use.whole:
            self._notices.settle(key)
            return
        if use.left_out:
            self._notices.tell_once(
                key,
                f"MEMORY.md ({use.total_chars:,} characters) is left out of the prompt: the memory budget leaves it "
                f"no room (memory.maxPromptBudgetTokens {config.max_prompt_budget_tokens:,}, memory.longTermMaxShare "
                f"{config.long_term_max_share:g}). Nothing in it is lost; raise them in runtime-config.json to bring "
                "it back.",
            )
            return
        self._notices.tell_once(
            key,
            f"MEMORY.md ({use.total_chars:,} characters) has outgrown its share of the prompt. Nothing in it is "
            f"lost: its first {use.head_chars:,} characters go with every message, and the parts further down "
            "that a message is about are brought in with it. Keep what must always be in view near the top; "
            "/status shows how much of it is in the prompt.",
        )

    @staticmethod
    def _prefetch(scope: MemoryScope, text: str) -> None:
        """Find the lexical candidates of `text` ahead of scoring (the lexical index keeps the search), while
        the message's vector is being made."""
        scope.lexical.search(text, LEXICAL_CANDIDATES)

    def _search_and_pack(
        self, scope: MemoryScope, query: MemoryQuery, vector: Vector, model: str | None
    ) -> tuple[RetrievalResult, MemoryPack]:
        """`_retrieve_and_pack` with both searches made first, side by side past a small memory (the lexical one in
        a second thread; each index keeps its answer for the scoring). The dense search, the longer, is made here:
        the scoring follows it in this thread, not after a wake-up from another."""
        if len(scope.store) <= INLINE_WORK_MAX_ITEMS:
            return self._retrieve_and_pack(scope, query, vector, model)
        lexical = self._scopes.beside(self._prefetch, scope, query.text)
        try:
            scope.vectors.relevance(vector, VECTOR_CANDIDATES)
        finally:
            lexical.result()  # the scope's lock is held until the lexical search is over, whatever happened
        return self._retrieve_and_pack(scope, query, vector, model)

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
        embedder = self._embedders.get(config.embeddings_model)
        if embedder is not None:
            self._indexing.start(scope, embedder)
        # The message's vector is made in a worker thread (the engine runs in C without the GIL) while the
        # files are checked and the lexical candidates are found; the dense search is made with the scoring,
        # in the next hand-off to memory's thread (a vector already made: both searches side by side in that
        # one, the files checked first). The scope's lock is never held waiting for the vector: the
        # other chats' turns would queue behind it. Without an embedder there is no vector to wait for, nor a
        # search to do ahead of it: the scoring starts at once.
        vector_task: asyncio.Future[Vector | None] | None = None
        # In a burst, a message whose vector would wait behind another's is answered from its words.
        embedder_busy = False
        if embedder is not None:
            if self._indexing.take_query_turn():
                vector_task = asyncio.ensure_future(self.query_vector(scope, embedder, text))
                vector_task.add_done_callback(lambda _: self._indexing.query_done())
            else:
                embedder_busy = True
        # Both holds of the lock below see the files as they were when the message came: the scoring after
        # the vector does not check them again (an edit made meanwhile is read for the next message).
        arrived = time.monotonic()
        try:
            vector = None
            searched_ahead = False
            if vector_task is not None:
                # One turn of the loop starts the vector's task: a vector the embedder already has (the same text
                # asked again) is there at once, with nothing to do meanwhile: the scoring's hand-off does it all.
                await asyncio.sleep(0)
                if not vector_task.done():
                    await self._scopes.run_fresh(scope, self._prefetch, scope, text, requested=arrived)
                    searched_ahead = True
                vector = await vector_task
            # The pack is built under the lock too: the items it reads are the ones that were scored.
            work = self._search_and_pack if vector is not None and not searched_ahead else self._retrieve_and_pack
            result, pack = await self._scopes.run_fresh(scope, work, scope, query, vector, model, requested=arrived)
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
                embedder_busy=embedder_busy,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            ),
        )
        for scored in pack.items:
            scope.accessed[scored.item.id] = now
        scope.last_pack = pack
        log.info("[Context] Memory pack: %s", pack.diagnostics.describe())
        return pack

    async def query_vector(self, scope: MemoryScope, embedder: Embedder, text: str) -> Vector | None:
        """The message's embedding, or None when the scope's vectors come from another embedder."""
        if not text.strip() or scope.vectors.embedder_name != embedder.name:
            return None
        names = names_in(text)
        # Looked up in the store's facts table, in RAM: on the event loop, not queued in memory's thread
        # behind the read this vector's message does meanwhile (the dense search waits for this vector).
        speakers = scope.store.speakers_among(names) if names and scope.loaded else set()
        return await self._indexing.state(scope).embed_query(embedder, dense_query_text(text, speakers))


async def read_long_term(scope: MemoryScope) -> str:
    """The scope's MEMORY.md as the model sees it; "" (and a warning) when it cannot be read."""
    try:
        return await scope.long_term.for_model()
    except OSError as error:
        log.warning("[Memory] Could not read %s: %s", scope.paths.long_term_file, error)
        return ""


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
