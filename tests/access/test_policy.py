"""`AccessPolicy` on its own: who is admitted, who gets a pairing code, who is refused in silence."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.access.pairing import PairingStore
from bot.access.policy import (
    NOT_ALLOWED_REPLY,
    PAIRING_FULL_REPLY,
    AccessPolicy,
    is_owner,
    is_owner_chat,
    sees_owner_memory,
)
from bot.domain.inbound import InboundMessage
from bot.runtime_config import RuntimeConfigStore
from bot.shipped import shipped_path


def policy_with(tmp_path: Path, config: dict[str, Any]) -> tuple[AccessPolicy, PairingStore]:
    (tmp_path / "runtime-config.json").write_text(json.dumps(config))
    store = RuntimeConfigStore(shipped_path("config") / "runtime-config.json", tmp_path / "runtime-config.json")
    pairing = PairingStore(tmp_path / "pairing.json")
    return AccessPolicy(store, pairing), pairing


def telegram(user_id: str, *, group: bool = False, username: str | None = "ann") -> InboundMessage:
    chat_id = "-100" if group else user_id
    return InboundMessage("telegram", chat_id, user_id, "hello", username=username, is_group=group)


async def test_an_allowed_user_is_admitted_and_a_stranger_refused_with_a_reply(tmp_path: Path) -> None:
    policy, pairing = policy_with(tmp_path, {"access": {"allowedUsers": [7]}})
    assert (await policy.check(telegram("7"))).admitted and await policy.admits(telegram("7"))
    refused = await policy.check(telegram("8"))
    assert (refused.admitted, refused.reply) == (False, NOT_ALLOWED_REPLY)
    assert not await policy.admits(telegram("8"))
    assert (await pairing.pending()) == []  # no code while the owner has named the users


async def test_the_terminal_is_the_owners_own(tmp_path: Path) -> None:
    policy, _ = policy_with(tmp_path, {"access": {"allowedUsers": [7]}})
    local = InboundMessage("console", "local", "local", "hello")
    assert (await policy.check(local)).admitted and await policy.admits(local)


async def test_a_stranger_in_a_private_chat_gets_one_code_while_no_user_is_named(tmp_path: Path) -> None:
    policy, pairing = policy_with(tmp_path, {"access": {"allowedUsers": []}, "pairing": {"enabled": True}})
    decision = await policy.check(telegram("42"))
    [request] = await pairing.pending()
    assert not decision.admitted and decision.reply is not None and request.code in decision.reply
    assert request.user_id == 42 and request.username == "ann"
    again = await policy.check(telegram("42"))
    assert again.reply is not None and request.code in again.reply and len(await pairing.pending()) == 1

    await pairing.approve(request.code)
    assert (await policy.check(telegram("42"))).admitted and await policy.admits(telegram("42"))


async def test_a_stranger_in_a_group_or_without_a_numeric_id_is_ignored_without_a_word(tmp_path: Path) -> None:
    policy, pairing = policy_with(tmp_path, {"access": {"allowedUsers": []}, "pairing": {"enabled": True}})
    assert await policy.check(telegram("42", group=True)) == (await policy.check(telegram("not-a-number")))
    decision = await policy.check(telegram("42", group=True))
    assert (decision.admitted, decision.reply) == (False, None)
    assert (await pairing.pending()) == []  # a code is never posted where others read it


async def test_no_code_when_pairing_is_off_and_a_full_queue_is_said(tmp_path: Path) -> None:
    policy, pairing = policy_with(tmp_path, {"access": {"allowedUsers": []}, "pairing": {"enabled": False}})
    assert (await policy.check(telegram("42"))).reply == NOT_ALLOWED_REPLY and (await pairing.pending()) == []

    full, pairing = policy_with(tmp_path, {"access": {"allowedUsers": []}, "pairing": {"maxPending": 1}})
    assert await pairing.request(1, "first", timedelta(hours=1), max_pending=1) is not None
    decision = await full.check(telegram("42"))
    assert (decision.admitted, decision.reply) == (False, PAIRING_FULL_REPLY)


def test_the_owner_is_the_first_allowed_user_and_owns_only_their_private_chat() -> None:
    assert is_owner(telegram("7"), [7, 8]) and not is_owner(telegram("8"), [7, 8])
    assert not is_owner(telegram("7"), [])  # nobody is the owner on Telegram until one is named
    assert is_owner(InboundMessage("console", "local", "local", "hi"), [])
    assert is_owner_chat("telegram:7", [7]) and not is_owner_chat("telegram:-1007", [7])
    assert not is_owner_chat("telegram:8", [7]) and is_owner_chat("console:local", [])
    assert not sees_owner_memory("telegram:8", [7], owner_memory_everywhere=False)
    assert sees_owner_memory("telegram:8", [7], owner_memory_everywhere=True)
    assert sees_owner_memory("telegram:7", [7], owner_memory_everywhere=False)
