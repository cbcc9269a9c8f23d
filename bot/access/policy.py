"""`AccessPolicy`: decides, before anything is stored or any model is called, whether a sender is admitted.

Telegram senders are admitted when their user id is in `access.allowedUsers` or was approved with a
pairing code. Anyone else is refused: one log line, no model call, nothing written, except that in a
private chat, while `access.allowedUsers` is empty and `pairing.enabled`, they get a one-time code
(the pairing request is the only thing stored). In groups a stranger is ignored without a word, so
codes are never posted where others read them. Other channels (the terminal) are the owner's own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from bot.access.pairing import PairingStorage
from bot.domain.inbound import InboundMessage
from bot.runtime_config import RuntimeConfigStore

log = logging.getLogger(__name__)

GUARDED_CHANNELS = frozenset({"telegram"})
NOT_ALLOWED_REPLY = "Sorry, this is a private assistant and you are not on its list of users."
PAIRING_FULL_REPLY = "Sorry, this is a private assistant. Too many access requests are waiting; try again later."


@dataclass(frozen=True)
class AccessDecision:
    """`admitted`, or the reply a refused sender gets (None: refused in silence)."""

    admitted: bool
    reply: str | None = None


ADMITTED = AccessDecision(admitted=True)


def pairing_reply(code: str, minutes: int) -> str:
    return (
        "Hi! This is a private assistant, and I don't know you yet.\n\n"
        f"Your pairing code: {code}\n\n"
        f"Ask the owner to run `python -m bot pairing approve {code}`. The code works for {minutes} minutes."
    )


class AccessPolicy:
    """The access check the router runs on every inbound message."""

    def __init__(self, config_store: RuntimeConfigStore, pairing: PairingStorage) -> None:
        self._config_store = config_store
        self._pairing = pairing

    async def admits(self, inbound: InboundMessage) -> bool:
        """Whether the sender may talk to the bot; no side effect (no pairing code, no log line)."""
        if inbound.channel_type not in GUARDED_CHANNELS:
            return True
        config = await self._config_store.current()
        user_id = _as_int(inbound.user_id)
        return user_id is not None and (
            user_id in config.access.allowed_users or user_id in await self._pairing.approved_ids()
        )

    async def check(self, inbound: InboundMessage) -> AccessDecision:
        if inbound.channel_type not in GUARDED_CHANNELS:
            return ADMITTED
        config = await self._config_store.current()
        user_id = _as_int(inbound.user_id)
        if user_id is not None and (
            user_id in config.access.allowed_users or user_id in await self._pairing.approved_ids()
        ):
            return ADMITTED
        who = f"user {inbound.user_id} (@{inbound.username or '-'}) in {inbound.session_id}"
        if inbound.is_group or user_id is None:
            log.info("[Access] Ignored a message from %s: not an allowed user", who)
            return AccessDecision(admitted=False)
        if config.access.allowed_users or not config.pairing.enabled:
            log.info("[Access] Refused a message from %s: not an allowed user", who)
            return AccessDecision(admitted=False, reply=NOT_ALLOWED_REPLY)
        ttl = timedelta(minutes=config.pairing.code_ttl_minutes)
        request = await self._pairing.request(user_id, inbound.username, ttl, config.pairing.max_pending)
        if request is None:
            log.warning("[Access] Refused %s: %d pairing requests already wait", who, config.pairing.max_pending)
            return AccessDecision(admitted=False, reply=PAIRING_FULL_REPLY)
        log.info("[Access] Stranger %s got pairing code %s", who, request.code)
        return AccessDecision(admitted=False, reply=pairing_reply(request.code, config.pairing.code_ttl_minutes))


def is_owner(inbound: InboundMessage, allowed_users: list[int]) -> bool:
    """The owner: the first id of `access.allowedUsers` on a guarded channel; the terminal is the owner's own."""
    return is_owner_id(inbound.channel_type, inbound.user_id, allowed_users)


def is_owner_id(channel_type: str, user_id: str, allowed_users: list[int]) -> bool:
    """`is_owner` for a sender known by channel and id."""
    if channel_type not in GUARDED_CHANNELS:
        return True
    return bool(allowed_users) and _as_int(user_id) == allowed_users[0]


def is_owner_chat(session_id: str, allowed_users: list[int]) -> bool:
    """Whether a chat is the owner's own: the terminal, or the owner's private chat (on Telegram a private
    chat's id is its user's id; a group's is negative, and a group is never the owner's alone)."""
    channel_type, _, chat_id = session_id.partition(":")
    return not chat_id.startswith("-") and is_owner_id(channel_type, chat_id, allowed_users)


def sees_owner_memory(session_id: str, allowed_users: list[int], owner_memory_everywhere: bool) -> bool:
    """Whether a turn in this chat may be given the owner's private memory: in the owner's own chats, or
    everywhere when the deployment says so (`memory.ownerMemoryEverywhere`)."""
    return owner_memory_everywhere or is_owner_chat(session_id, allowed_users)


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
