"""`ChatMoves`: what the bot keeps of a chat, carried over when the chat's id changes (`ChatMove`).

The one place that knows what a chat's data is: its session and the session's archive, the memory
kept for the chat (`memory/chats/{session}/`, whatever `memory.scope` is: a group's memory is its
own under every scope), the images it sent (`media/{session}/`, the moved messages naming them
there), the documents sent in it and its entries in the knowledge graph's journal (the graph itself
stays where it is, read by the new chat's retrievals beside its own: `RagService.move_chat`), and the
reminders set in it.

A move is recorded before anything is moved (`bot.chat_move_records`: `state/chat_moves.jsonl`, or the table
`chat_moves` with `BOT_DATABASE_URL`) and marked done after; every step can be run again without doubling
anything (a message already under the new id, by its id, is not added twice), so a crash midway is
finished by the next start (`resume`). Told twice (both service messages, or the refused send as
well), a move is made once. Messages of the new chat wait for the move (its session's lock is taken
first), and the old chat's turn in progress ends before its data moves; once it is done, the old
id gives the new chat's session (`SessionService.follow_move`), so that a message of the old chat
still on its way, or a turn a stop left open, is answered in the new one. With a database, the move
holds the locks the processes sharing it take to answer the two chats (`bot.stores.chat_lock`), and a
process that did not make it follows it once a message of the old id reaches it (`SessionService` looks
the move up when the old id has no stored session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

from bot.chat_move_records import MoveRecords
from bot.database.connection import Database
from bot.domain.chat_move import ChatMove
from bot.domain.message import Message
from bot.media.store import MEDIA_DIR
from bot.memory.paths import CHAT_SCOPES_DIR, USER_SCOPES_DIR
from bot.memory.service import MemoryService
from bot.rag.uploads import DocumentReader
from bot.scheduler.reminder_store import ReminderStore
from bot.sessions.service import SessionService
from bot.stores import chat_lock
from bot.workspace import MemoryPaths, Workspace

log = logging.getLogger(__name__)


class ChatMoves:
    """Carries a chat's data from its old id to its new one, once, crash-safely."""

    def __init__(
        self,
        workspace: Workspace,
        sessions: SessionService,
        memory: MemoryService,
        reminders: ReminderStore,
        documents: DocumentReader,
        records: MoveRecords,
        database: Database | None,
    ) -> None:
        self._workspace = workspace
        self._documents = documents
        self._sessions = sessions
        self._memory = memory
        self._reminders = reminders
        self._records = records
        self._database = database
        self._moving: set[asyncio.Task[None]] = set()
        # Told again while under way (the other service message, a refused send of the old chat's turn that
        # the move waits for): nothing more to do.
        self._under_way: set[ChatMove] = set()
        # The moves under way into each chat (its session id).
        self._arriving: dict[str, set[asyncio.Task[None]]] = {}
        self._lock = asyncio.Lock()

    async def move(self, move: ChatMove) -> None:
        """Begin `move`; returns once the new chat's session lock is held, so that its messages wait for the
        move, while the old chat's turn in progress (which holds the old one) is let finish first."""
        if move in self._under_way:
            return
        self._under_way.add(move)
        try:
            if await self._records.is_done(move):
                # By another process sharing the database, or before a restart: followed from now on.
                log.info("[ChatMove] %s was moved already", move)
                self._sessions.follow_move(move.old_session_id, move.channel_type, move.new_chat_id)
                self._under_way.discard(move)
                return
            stack = AsyncExitStack()
            await stack.enter_async_context(self._sessions.lock_for(move.new_session_id))
        except BaseException:
            self._under_way.discard(move)
            raise
        log.info("[ChatMove] %s: the chat has a new id; moving what the bot keeps of it", move)
        task = asyncio.create_task(self._carry_over(move, stack))
        self._moving.add(task)
        task.add_done_callback(self._moving.discard)
        self._arriving.setdefault(move.new_session_id, set()).add(task)
        task.add_done_callback(lambda done: self._arrived(move.new_session_id, done))

    async def arrival(self, session_id: str) -> None:
        """Wait for the moves under way in this process into the chat `session_id`. With a database, a turn of
        that chat waits for them before it takes the chat's lock among processes, which the move takes after
        the chat's lock in this process (held from `move` on)."""
        while arriving := self._arriving.get(session_id):
            await asyncio.gather(*arriving, return_exceptions=True)

    def _arrived(self, session_id: str, task: asyncio.Task[None]) -> None:
        arriving = self._arriving.get(session_id, set())
        arriving.discard(task)
        if not arriving:
            self._arriving.pop(session_id, None)

    async def resume(self) -> None:
        """At start: finish the moves a stop or a crash left midway, and send what still names a moved chat
        (a turn the last stop left open, a reply) to its new id."""
        for move in await self._records.finished():
            self._sessions.follow_move(move.old_session_id, move.channel_type, move.new_chat_id)
        for move in await self._records.unfinished():
            log.info("[ChatMove] Finishing %s, left midway", move)
            async with self._sessions.lock_for(move.new_session_id):
                await self._carry_over_locked(move)

    async def settled(self) -> None:
        """Wait for the moves under way (a stop, and the tests)."""
        while self._moving:
            await asyncio.gather(*self._moving, return_exceptions=True)

    async def _carry_over(self, move: ChatMove, stack: AsyncExitStack) -> None:
        async with stack:
            try:
                await self._carry_over_locked(move)
            except Exception:
                log.exception("[ChatMove] %s failed midway; it is finished on the next start", move)
            finally:
                self._under_way.discard(move)

    async def _carry_over_locked(self, move: ChatMove) -> None:
        # The locks among processes before the old chat's own, in the order a turn takes its chat's.
        async with self._lock, self._among_processes(move), self._sessions.lock_for(move.old_session_id):
            if await self._records.is_done(move):  # by another process sharing the database, meanwhile
                self._sessions.follow_move(move.old_session_id, move.channel_type, move.new_chat_id)
                return
            await self._records.begun(move)
            # The images first: the moved messages name them where they are then.
            root = self._workspace.root
            await asyncio.to_thread(_move_folder, root / MEDIA_DIR / move.old_session_id,
                                    root / MEDIA_DIR / move.new_session_id)  # fmt: skip
            messages = await self._move_session(move)
            memory = await self._move_memory(move)
            documents = await self._documents.move_chat(move.old_session_id, move.new_session_id, move.new_chat_id)
            reminders = await self._move_reminders(move)
            await self._records.done(move)
            self._sessions.follow_move(move.old_session_id, move.channel_type, move.new_chat_id)
        log.info(
            "[ChatMove] %s: the chat's data moved (%d messages, %s, %s, reminders: %d)",
            move, messages, memory, documents, reminders,
        )  # fmt: skip

    @contextlib.asynccontextmanager
    async def _among_processes(self, move: ChatMove) -> AsyncIterator[None]:
        """With a database, the locks every process sharing it takes to answer the two chats, the old one's
        first (as a turn of the old chat that follows the move takes them): no process is answering either
        while the data moves (a save of the old chat's turn would bring its session back under the old id,
        one of the new chat's would write over the moved conversation), and of two processes told of the
        move (a webhook behind replicas may give each one of the two service messages), one moves it."""
        if self._database is None:
            yield
            return
        async with chat_lock(self._database, move.old_session_id), chat_lock(self._database, move.new_session_id):
            yield

    async def _move_session(self, move: ChatMove) -> int:
        """The old session's messages before the new one's, the archive's likewise; then the old one forgotten."""
        sessions = self._sessions
        old = await sessions.get(move.old_session_id)
        old_archive = await sessions.read_archive(move.old_session_id)
        new = await sessions.get_or_create(move.channel_type, move.new_chat_id)
        archived = {message.id for message in await sessions.read_archive(move.new_session_id)}
        # The old archive, and the old session's messages it may not hold yet, that the new archive lacks.
        in_old_archive = {message.id for message in old_archive}
        unwritten = _not_in(old.messages, in_old_archive) if old is not None else []
        unarchived = [_media_moved(message, move) for message in _not_in([*old_archive, *unwritten], archived)]
        if old is not None:
            live = [_media_moved(m, move) for m in _not_in(old.messages, {message.id for message in new.messages})]
            if not new.messages:
                new.metadata = old.metadata.model_copy(deep=True)
                new.created_at = old.created_at
            messages = [*live, *new.messages]
        else:
            messages = list(new.messages)
        # What the old archive held beyond its live messages (compacted away) goes in the new archive alone.
        await sessions.replace_messages(new, messages, unarchived)
        await sessions.write_now(new)
        await sessions.delete(move.old_session_id)
        # Every line of the old archive is in the new one now.
        await sessions.delete_archive(move.old_session_id)
        return len(old_archive)

    async def _move_memory(self, move: ChatMove) -> str:
        """The chat's memory folder (or its rows in the database) under the new session id."""
        moved = []
        for parent in (CHAT_SCOPES_DIR, USER_SCOPES_DIR):
            old_scope, new_scope = f"{parent}/{move.old_session_id}", f"{parent}/{move.new_session_id}"
            # Both closed first: what memory holds open of them would be written back under the old id.
            for scope in (old_scope, new_scope):
                await self._memory.let_go(MemoryPaths(self._workspace.memory_dir / scope))
            if self._database is not None:
                if await self._move_memory_rows(old_scope, new_scope):
                    moved.append(new_scope)
            elif await asyncio.to_thread(_move_folder, self._workspace.memory_dir / old_scope,
                                         self._workspace.memory_dir / new_scope):  # fmt: skip
                moved.append(new_scope)
        return f"memory in {', '.join(moved)}" if moved else "no memory of its own"

    async def _move_memory_rows(self, old_scope: str, new_scope: str) -> bool:
        assert self._database is not None
        async with self._database.transaction() as connection:
            documents = await connection.execute(
                "UPDATE memory_documents AS d SET scope = $2 WHERE scope = $1 AND NOT EXISTS"
                " (SELECT 1 FROM memory_documents n WHERE n.scope = $2 AND n.name = d.name)",
                old_scope, new_scope,
            )  # fmt: skip
            items = await connection.execute(
                "UPDATE memory_items AS i SET scope = $2 WHERE scope = $1 AND NOT EXISTS"
                " (SELECT 1 FROM memory_items n WHERE n.scope = $2 AND n.file = i.file)",
                old_scope, new_scope,
            )  # fmt: skip
        return not (documents.endswith(" 0") and items.endswith(" 0"))

    async def _move_reminders(self, move: ChatMove) -> int:
        reminders = await self._reminders.of_session(move.old_session_id)
        for reminder in reminders:
            await self._reminders.put(
                reminder.model_copy(update={"session_id": move.new_session_id, "chat_id": move.new_chat_id})
            )
        return len(reminders)


def _media_moved(message: Message, move: ChatMove) -> Message:
    """`message` naming its images under the new chat's media folder."""
    old, new = f"{MEDIA_DIR}/{move.old_session_id}/", f"{MEDIA_DIR}/{move.new_session_id}/"
    if not message.media or not any(ref.path.startswith(old) for ref in message.media):
        return message
    media = [
        ref.model_copy(update={"path": new + ref.path.removeprefix(old)}) if ref.path.startswith(old) else ref
        for ref in message.media
    ]
    return message.model_copy(update={"media": media})


def _not_in(messages: list[Message], ids: set[str]) -> list[Message]:
    return [message for message in messages if message.id not in ids]


def _move_folder(old: Path, new: Path) -> bool:
    """`old` renamed to `new`; when both exist (the new chat had memory of its own), each file of `old` that
    `new` lacks goes there and the old folder's rest is kept beside it, named in the log."""
    if not old.exists():
        return False
    if not new.exists():
        new.parent.mkdir(parents=True, exist_ok=True)
        old.rename(new)
        return True
    kept = []
    for path in sorted(old.rglob("*")):
        if path.is_dir():
            continue
        target = new / path.relative_to(old)
        if target.exists():
            kept.append(str(path))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
    if kept:
        log.warning("[ChatMove] %s holds files %s also has; kept where they are: %s", old, new, ", ".join(kept))
    else:
        shutil.rmtree(old, ignore_errors=True)
    return True
