"""`VectorIndexing`: the stored items' vectors, made in the background while no reply is waiting.

A message's own vector is made on the reply path: retrieval needs it now. A stored item's vector can
wait: until it is made, retrieval finds the item by its words (BM25). So the items' vectors are made only
once no reply has been waiting or running for `QUIET_SECONDS`, `STEP_TEXTS` texts at a time with the
check repeated between steps (a message that arrives meanwhile waits for one step of the embedder at
most, never for a batch), and stored a batch at a time. Vectors stored by an earlier run are read at
once: that embeds nothing, and the message's vector needs them to be compared with. Items left without
a vector by a stop are embedded after the next start, the same way.

In a burst the message's vector gives way too: the embedder makes one message's vector at a time, and a
reply that would queue behind another's while more replies wait is answered from its words alone
(`take_query_turn`), as retrieval does without an embedder. The replies of a burst then go at the pace of
the lexical pipeline, and the engine makes what vectors it can beside them, on the other core.

The embedder's state for each scope is here too: the background task, and the pause after a failure
(lexical retrieval only meanwhile, one warning).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bot.heap import settle_after_load
from bot.llm.embedders import Embedder
from bot.llm.errors import LlmError
from bot.memory.embeddings import EMBED_BATCH_SIZE, Vector, as_float16, unit
from bot.memory.index_database import INDEX_FAILURES
from bot.memory.scopes import MemoryScope, MemoryScopes
from bot.workspace import MemoryPaths

log = logging.getLogger(__name__)

# How long the bot must have had no reply waiting or running before stored items are embedded: in a
# conversation the next message usually follows the reply within this, and it should not find the
# embedder busy.
QUIET_SECONDS = 1.0
# How often, while items wait for their vectors, whether a reply is waiting is looked at.
QUIET_POLL_SECONDS = 0.1
# Texts embedded in one call between two looks: small, so that a message arriving meanwhile finds the
# embedder free soon (its engine takes one call at a time).
STEP_TEXTS = 4
FAILURE_PAUSE_SECONDS = 300.0


@dataclass
class EmbedderState:
    """The embedder's work on one scope: the background task, and the pause after a failure."""

    task: asyncio.Task[None] | None = None
    paused_until: float = 0.0
    # Held while the vectors stored by earlier runs are read, so `/status` counts them all or waits.
    reading_stored: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def paused(self) -> bool:
        return time.monotonic() < self.paused_until

    def pause_after_failure(self, embedder: str, error: Exception) -> None:
        self.paused_until = time.monotonic() + FAILURE_PAUSE_SECONDS
        log.warning(
            "[Memory] Embeddings from %s failed (%s); lexical retrieval only for %.0f s",
            embedder,
            error,
            FAILURE_PAUSE_SECONDS,
        )

    async def embed_query(self, embedder: Embedder, text: str) -> Vector | None:
        """The unit vector of a message, or None while paused or when the embedder fails (then paused)."""
        if self.paused():
            return None
        try:
            return unit(await embedder.embed_query(text))
        except (LlmError, ValueError, OSError) as error:
            self.pause_after_failure(embedder.name, error)
            return None


class VectorIndexing:
    """Brings every scope's vectors up to date in the background, when the bot is idle."""

    def __init__(self, scopes: MemoryScopes) -> None:
        self._scopes = scopes
        self._states: dict[MemoryPaths, EmbedderState] = {}
        self._replies_waiting: Callable[[], int] = lambda: 0
        # Messages' vectors being made (or waiting for the embedder): see `take_query_turn`.
        self._queries_running = 0
        self._last_busy = -math.inf
        # Set by `settle`: what is pending is embedded without waiting for a quiet moment.
        self._hurry = asyncio.Event()

    def follow_replies(self, replies_waiting: Callable[[], int]) -> None:
        """`replies_waiting`: how many messages are waiting for their reply or being answered."""
        self._replies_waiting = replies_waiting

    def take_query_turn(self) -> bool:
        """Whether a message's vector is made now (False: its reply is built from its words alone).

        Not while another message's vector is being made and other replies wait: the embedder makes one
        vector at a time (the bundled one has one engine thread), so in a burst each reply would wait for
        every vector queued before its own. True: the caller holds the turn until it calls `query_done`.
        """
        if self._queries_running and self._replies_waiting() > 1:
            return False
        self._queries_running += 1
        return True

    def query_done(self) -> None:
        """A message's vector taken with `take_query_turn` is made, failed or no longer wanted."""
        self._queries_running -= 1

    def reply_started(self) -> None:
        """A reply is being built: the stored items wait (memory sees this much even with nothing followed)."""
        self._last_busy = time.monotonic()

    def state(self, scope: MemoryScope) -> EmbedderState:
        state = self._states.get(scope.paths)
        if state is None:
            state = self._states[scope.paths] = EmbedderState()
        return state

    def start(self, scope: MemoryScope, embedder: Embedder) -> None:
        """Make sure every active item of the scope gets a vector, in the background."""
        state = self.state(scope)
        if state.running:
            return
        if scope.vectors.embedder_name == embedder.name and not scope.vectors.has_pending:
            return
        state.task = asyncio.get_running_loop().create_task(
            self._index(scope, embedder), name=f"memory vectors {scope.paths.root}"
        )

    def warm_up(self, scope: MemoryScope, embedder: Embedder | None) -> None:
        """Read the scope's items (and with an embedder, its stored vectors, then the rest when idle)."""
        state = self.state(scope)
        if not state.running:
            state.task = asyncio.get_running_loop().create_task(
                self._warm(scope, embedder), name=f"memory warm-up {scope.paths.root}"
            )

    async def read_stored(self, scope: MemoryScope, embedder: Embedder) -> None:
        """Take up `embedder`'s vectors that an earlier run stored in the scope's cache; embeds nothing."""
        async with self.state(scope).reading_stored:
            await self._read_stored_held(scope, embedder)

    async def settle(self) -> None:
        """Embed whatever is pending now, without waiting for a quiet moment, and wait until it is done
        (tests, benchmarks, a quiet shutdown)."""
        self._hurry.set()
        try:
            while pending := [state.task for state in self._states.values() if state.task and not state.task.done()]:
                await asyncio.wait(pending)
        finally:
            self._hurry.clear()

    async def close(self) -> None:
        """Stop embedding; what is left is embedded after the next start."""
        for state in self._states.values():
            if state.task is not None:
                state.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await state.task

    # -- the work -------------------------------------------------------------------------------------

    async def _warm(self, scope: MemoryScope, embedder: Embedder | None) -> None:
        try:
            async with self._scopes.fresh(scope):
                pass
        except OSError as error:
            log.warning("[Memory] Could not read the memory items of %s: %s", scope.paths.items_dir, error)
            return
        if embedder is not None:
            await self._index(scope, embedder)

    async def _read_stored_held(self, scope: MemoryScope, embedder: Embedder) -> None:
        async with self._scopes.fresh(scope):
            if scope.vectors.embedder_name == embedder.name:
                return
            scope.vectors.use_embedder(embedder.name)
            wanted = scope.vectors.wanted_keys()
        if not wanted:
            return
        batches = await scope.vector_cache.load_quantized(embedder.name, wanted)
        del wanted
        read = sum(len(keys) for keys, _, _ in batches)
        async with scope.lock:
            if batches:
                scope.vectors.reserve(read, batches[0][1].shape[1])
            while batches:
                scope.vectors.put_quantized(*batches.pop(0))
            # The search's sums and sign codes, over every row at once: in a thread, not on the event loop.
            await asyncio.to_thread(scope.vectors.prepare_search)
        log.info("[Memory] %d item vectors read from %s", read, scope.vector_cache.where)
        settle_after_load()

    async def _index(self, scope: MemoryScope, embedder: Embedder) -> None:
        state = self.state(scope)
        started = time.monotonic()
        embedded = 0
        try:
            await self.read_stored(scope, embedder)
            while not state.paused():
                async with scope.lock:
                    todo = scope.vectors.pending()
                if not todo:
                    break
                # Another process sharing the vectors may have made some already (its items reach this one
                # after its vectors were read).
                made_elsewhere = await scope.vector_cache.load(embedder.name, {key for key, _ in todo})
                if made_elsewhere:
                    async with scope.lock:
                        scope.vectors.put(made_elsewhere)
                    todo = [(key, text) for key, text in todo if key not in made_elsewhere]
                position = 0
                while position < len(todo):
                    await self._quiet()
                    made: dict[str, npt.NDArray[np.float16]] = {}
                    # One batch: what is embedded while the bot stays idle, stored at once.
                    while position < len(todo) and len(made) < EMBED_BATCH_SIZE and self._idle_now():
                        step = todo[position : position + STEP_TEXTS]
                        position += len(step)
                        try:
                            vectors = await embedder.embed([text for _, text in step])
                        except (LlmError, ValueError, OSError) as error:
                            state.pause_after_failure(embedder.name, error)
                            position = len(todo)
                            break
                        made.update(zip((key for key, _ in step), as_float16(vectors), strict=True))
                    if made:
                        await scope.vector_cache.store(embedder.name, made)
                        async with scope.lock:
                            scope.vectors.put(made)
                        embedded += len(made)
        except INDEX_FAILURES as error:
            log.warning("[Memory] Item vectors of %s could not be kept: %s", scope.paths.root, error)
        finally:
            if embedded:
                log.info(
                    "[Memory] Embedded %d items with %s in %.1f s", embedded, embedder.name, time.monotonic() - started
                )

    def _idle_now(self) -> bool:
        if self._hurry.is_set():
            return True
        now = time.monotonic()
        if self._replies_waiting():
            self._last_busy = now
        return now - self._last_busy >= QUIET_SECONDS

    async def _quiet(self) -> None:
        """Until the bot has been idle for `QUIET_SECONDS` (at once under `settle`)."""
        while not self._idle_now():
            # Looked at again shortly: a reply may start meanwhile, and `settle` ends the wait at once.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), QUIET_POLL_SECONDS)
