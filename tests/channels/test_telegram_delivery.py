"""`call_with_retries`: a Bot API call is repeated only when Telegram certainly did not apply it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from bot.channels.telegram_api import AnswerTimedOut, BadRequest, Refused, RetryAfter, TelegramApiError, Transient
from bot.channels.telegram_delivery import DeliveryFailed, call_with_retries
from bot.settings import TelegramConfig

QUICK = TelegramConfig(delivery_attempts=3, retry_backoff_seconds=0.0, max_retry_after_seconds=0.01)


def scripted(*failures: TelegramApiError) -> tuple[Callable[[], Awaitable[int]], list[int]]:
    """A call that raises `failures` one per attempt, then answers 42; and the list of its attempts."""
    attempts: list[int] = []

    async def call() -> int:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= len(failures):
            raise failures[len(attempts) - 1]
        return 42

    return call, attempts


async def test_a_call_not_applied_is_repeated_until_it_goes_through() -> None:
    call, attempts = scripted(Transient("Bad Gateway"), RetryAfter("Too Many Requests", 0.0))
    assert await call_with_retries(call, QUICK, "sendMessage to 1") == 42
    assert attempts == [1, 2, 3]


async def test_after_the_last_attempt_the_failure_says_how_many_tries() -> None:
    call, attempts = scripted(*[Transient("connection reset")] * 3)
    with pytest.raises(DeliveryFailed, match=r"sendMessage to 1: connection reset after 3 tries"):
        await call_with_retries(call, QUICK, "sendMessage to 1")
    assert attempts == [1, 2, 3]


async def test_flood_control_longer_than_allowed_is_not_waited_out() -> None:
    call, attempts = scripted(RetryAfter("Too Many Requests: retry after 60", 60.0))
    with pytest.raises(DeliveryFailed, match="flood control"):
        await call_with_retries(call, QUICK, "sendMessage to 1")
    assert attempts == [1]


@pytest.mark.parametrize(
    "failure",
    [AnswerTimedOut("no answer"), BadRequest("Bad Request: chat not found"), Refused("Forbidden: bot was blocked")],
)
async def test_a_call_that_may_have_been_applied_or_cannot_succeed_is_never_repeated(
    failure: TelegramApiError,
) -> None:
    call, attempts = scripted(failure)
    with pytest.raises(DeliveryFailed) as raised:
        await call_with_retries(call, QUICK, "sendMessage to 1")
    assert attempts == [1]
    assert raised.value.__cause__ is failure  # the caller still sees what Telegram said (e.g. a refused format)
