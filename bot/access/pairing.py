"""`PairingStore`: strangers' pairing codes and the users the owner admitted, in `access/pairing.json`.

While `access.allowedUsers` is empty, a stranger who writes to the bot in a private chat gets a one-time
code that expires (`pairing.codeTtlMinutes`). The owner admits them from the command line
(`python -m bot pairing approve CODE`), which moves them to `approved`; the running bot sees the change
on the next message. The file holds only ids, usernames, codes and times: never what anyone wrote.

```json
{"pending": [{"code": "K7QJ2MXP", "userId": 42, "username": "ann", "requestedAt": "...", "expiresAt": "..."}],
 "approved": [{"userId": 7, "username": "owner", "approvedAt": "..."}]}
```

The bot and the command line may write at the same moment: every read-modify-write holds an exclusive
`flock` on the `access/` folder, and the file is replaced atomically. With `BOT_DATABASE_URL` the same
state is kept in PostgreSQL (`pairing_db.PairingTables`); both keep to `PairingStorage`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from bot.storage.files import FileSignature, file_signature, read_text_sync, write_atomic_sync

log = logging.getLogger(__name__)

# No 0/O, 1/I/L: a code is read off a phone and typed into a terminal.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8


class PairingError(ValueError):
    """A code that cannot be approved; the message says why, for the command line."""


@dataclass(frozen=True)
class PairingRequest:
    """A stranger waiting to be admitted."""

    code: str
    user_id: int
    username: str | None
    requested_at: datetime
    expires_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "userId": self.user_id,
            "username": self.username,
            "requestedAt": self.requested_at.isoformat(),
            "expiresAt": self.expires_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PairingRequest:
        return cls(
            code=str(data["code"]),
            user_id=int(data["userId"]),
            username=data.get("username"),
            requested_at=datetime.fromisoformat(data["requestedAt"]),
            expires_at=datetime.fromisoformat(data["expiresAt"]),
        )


@dataclass(frozen=True)
class ApprovedUser:
    """A user the owner admitted with a pairing code."""

    user_id: int
    username: str | None
    approved_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"userId": self.user_id, "username": self.username, "approvedAt": self.approved_at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApprovedUser:
        return cls(int(data["userId"]), data.get("username"), datetime.fromisoformat(data["approvedAt"]))


@dataclass
class _State:
    pending: list[PairingRequest]
    approved: list[ApprovedUser]


class PairingStorage(Protocol):
    """Pending pairing codes and approved users, shared by the running bot and the command line."""

    async def approved_ids(self) -> frozenset[int]:
        """The admitted user ids, as they are now (the command line may have approved one)."""
        ...

    async def request(
        self, user_id: int, username: str | None, ttl: timedelta, max_pending: int
    ) -> PairingRequest | None:
        """The stranger's valid code (the one they had, or a new one); None when too many are waiting."""
        ...

    async def pending(self) -> list[PairingRequest]:
        """Requests whose code still works, oldest first."""
        ...

    async def approve(self, code: str) -> ApprovedUser:
        """Admit the sender of `code` (any case, spaces ignored); raises `PairingError` if it does not work."""
        ...


def normalized_code(code: str) -> str:
    """A code as typed (any case, spaces anywhere) as it was handed out."""
    return "".join(code.split()).upper()


def new_code(taken: set[str]) -> str:
    """A fresh code, none of `taken`."""
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code


def pairing_file(workspace_root: Path) -> Path:
    """Where a workspace keeps its pairing state."""
    return workspace_root / "access" / "pairing.json"


class PairingStore:
    """Pending pairing codes and approved users, shared by the running bot and the command line."""

    def __init__(self, path: Path, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._path = path
        self._now = now
        self._approved: frozenset[int] = frozenset()
        self._signature: FileSignature | None = None

    @property
    def path(self) -> Path:
        return self._path

    async def approved_ids(self) -> frozenset[int]:
        """The admitted user ids, re-read when the file changed (the command line may have approved)."""
        signature = await asyncio.to_thread(self._file_signature)
        if signature != self._signature:
            state = await asyncio.to_thread(self._read)
            self._approved = frozenset(user.user_id for user in state.approved)
            self._signature = signature
        return self._approved

    async def request(
        self, user_id: int, username: str | None, ttl: timedelta, max_pending: int
    ) -> PairingRequest | None:
        """The stranger's valid code (the one they had, or a new one); None when too many are waiting."""
        return await asyncio.to_thread(self._request_sync, user_id, username, ttl, max_pending)

    async def approved_users(self) -> list[ApprovedUser]:
        """Every admitted user (`bot migrate` copies them)."""
        return (await asyncio.to_thread(self._read)).approved

    async def pending(self) -> list[PairingRequest]:
        """Requests whose code still works, oldest first."""
        now = self._now()
        return [request for request in (await asyncio.to_thread(self._read)).pending if request.expires_at > now]

    async def approve(self, code: str) -> ApprovedUser:
        """Admit the sender of `code` (any case, spaces ignored); raises `PairingError` if it does not work."""
        return await asyncio.to_thread(self._approve_sync, code)

    def _approve_sync(self, code: str) -> ApprovedUser:
        wanted = normalized_code(code)
        with self._locked():
            state = self._read()
            request = next((item for item in state.pending if item.code == wanted), None)
            if request is None:
                raise PairingError(f"No pending pairing request has the code {wanted}")
            state.pending.remove(request)
            if request.expires_at <= self._now():
                self._write(state)
                raise PairingError(f"The code {wanted} has expired; ask the user to write to the bot again")
            user = ApprovedUser(request.user_id, request.username, self._now())
            state.approved = [item for item in state.approved if item.user_id != user.user_id] + [user]
            self._write(state)
        log.info("[Access] Approved user %d (@%s) with a pairing code", user.user_id, user.username or "-")
        return user

    def _request_sync(
        self, user_id: int, username: str | None, ttl: timedelta, max_pending: int
    ) -> PairingRequest | None:
        now = self._now()
        with self._locked():
            state = self._read()
            live = [item for item in state.pending if item.expires_at > now]
            existing = next((item for item in live if item.user_id == user_id), None)
            if existing is not None:
                return existing
            if len(live) >= max_pending:
                return None
            taken = {item.code for item in live}
            code = new_code(taken)
            request = PairingRequest(code, user_id, username, now, now + ttl)
            state.pending = [*live, request]
            self._write(state)
            return request

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        folder = os.open(self._path.parent, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            yield
        finally:
            os.close(folder)  # closing releases the lock

    def _read(self) -> _State:
        text = read_text_sync(self._path)
        if text is None:
            return _State([], [])
        try:
            data = json.loads(text)
            return _State(
                [PairingRequest.from_json(item) for item in data.get("pending", [])],
                [ApprovedUser.from_json(item) for item in data.get("approved", [])],
            )
        except (ValueError, KeyError, TypeError) as error:
            raise PairingError(f"{self._path} is not a valid pairing file: {error}") from error

    def _write(self, state: _State) -> None:
        data = {
            "pending": [item.to_json() for item in state.pending],
            "approved": [item.to_json() for item in state.approved],
        }
        write_atomic_sync(self._path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))

    def _file_signature(self) -> FileSignature | None:
        return file_signature(self._path)
