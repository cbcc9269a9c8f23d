"""`TelegramBackend`: the few Bot API calls the channel needs, and the errors they raise.

python-telegram-bot (`telegram_ptb.py`) and aiogram (`telegram_aiogram.py`) each implement this; the
rest of the channel (updates, delivery with retries, dedup, webhook) is shared and never sees a library
type. Each backend translates its library's exceptions into the classes below, which is what the retry
policy in `telegram_delivery.py` decides on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bot.channels.telegram_updates import BotIdentity
from bot.domain.session import chat_and_topic

UpdateHandler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TelegramChat:
    """Where a message goes on Telegram: the chat, and in a forum supergroup the topic it belongs in
    (`message_thread_id`; None for a chat without topics and for a forum's General topic, which takes none)."""

    id: int
    thread_id: int | None = None

    @classmethod
    def of(cls, chat_id: str) -> TelegramChat:
        """The chat (and topic) a channel chat id names (`bot.domain.session.topic_chat_id`)."""
        chat, topic = chat_and_topic(chat_id)
        return cls(int(chat), None if topic is None else int(topic))

    def __str__(self) -> str:
        return str(self.id) if self.thread_id is None else f"{self.id} (topic {self.thread_id})"


class TelegramApiError(Exception):
    """A Bot API call failed; `description` is Telegram's (or the transport's) explanation."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


# What Telegram answers (403, or 400 for a chat it does not know) to a message for a chat that takes none from
# the bot until a person acts: blocked, account deleted, bot removed from the group, chat gone.
_SHUT_OUT = (
    "bot was blocked by the user", "user is deactivated", "bot was kicked from", "bot is not a member of",
    "bot can't initiate conversation", "chat not found",
)  # fmt: skip


def shuts_the_bot_out(error: TelegramApiError) -> bool:
    """Whether Telegram refused a send because the chat takes no message from the bot (see `ChatUnreachable`);
    flood control, a server error or a lost connection never does."""
    description = error.description.lower()
    return isinstance(error, Refused | BadRequest) and any(reason in description for reason in _SHUT_OUT)


class RetryAfter(TelegramApiError):
    """429 flood control: the call was not applied; it may be repeated after `retry_after` seconds."""

    def __init__(self, description: str, retry_after: float) -> None:
        super().__init__(description)
        self.retry_after = retry_after


class Transient(TelegramApiError):
    """A 5xx answer or a connection that failed before an answer: not applied, safe to repeat."""


class AnswerTimedOut(TelegramApiError):
    """The request went out but no answer came in time: it may have been applied, so never repeat it."""


class BadRequest(TelegramApiError):
    """400: Telegram refused the call as made (bad entities, text too long, message not modified ...)."""

    @property
    def cant_parse_entities(self) -> bool:
        return "can't parse entities" in self.description.lower() or "can't parse messageentity" in (
            self.description.lower()
        )

    @property
    def too_long(self) -> bool:
        return "message is too long" in self.description.lower()

    @property
    def not_modified(self) -> bool:
        return "message is not modified" in self.description.lower()

    @property
    def message_gone(self) -> bool:
        """The message to edit is no more (deleted by hand, or with its forum topic)."""
        return "message to edit not found" in self.description.lower()

    @property
    def topic_closed(self) -> bool:
        """The forum topic sent to is closed, and the bot is no admin there."""
        return "topic_closed" in self.description.lower()

    @property
    def topic_deleted(self) -> bool:
        """The forum topic sent to is deleted (Telegram says it either way)."""
        description = self.description.lower()
        return "topic_deleted" in description or "message thread not found" in description


class ChatUpgraded(TelegramApiError):
    """400 "group chat was upgraded to a supergroup chat": the group lives on under `new_chat_id`, where the
    call may be made again."""

    def __init__(self, description: str, new_chat_id: int) -> None:
        super().__init__(description)
        self.new_chat_id = new_chat_id


class Refused(TelegramApiError):
    """401/403/404/409 and the like: repeating will not help (bot blocked, chat gone, bad token)."""


class TelegramBackend(Protocol):
    """One Telegram client library behind the channel. Chat ids are Telegram's integers; a message sent
    (and the typing action) goes to a `TelegramChat`, a topic's when it has one."""

    name: str

    async def connect(self) -> BotIdentity:
        """Open the client and ask Telegram who the bot is (getMe)."""
        ...

    async def close(self) -> None:
        """Release the client's connections."""
        ...

    async def delete_webhook(self) -> None:
        """Switch Telegram to getUpdates (a webhook set earlier makes it answer 409), keeping pending updates."""
        ...

    async def get_updates(
        self, offset: int | None, timeout_seconds: int, allowed_updates: list[str], limit: int = 100
    ) -> list[dict[str, Any]]:
        """One long poll: the updates from `offset` on as Bot API JSON; asking for it acknowledges those before."""
        ...

    async def set_webhook(self, url: str, secret: str, allowed_updates: list[str]) -> None: ...

    async def set_my_commands(self, commands: list[tuple[str, str]]) -> None: ...

    async def send_message(
        self, chat: TelegramChat, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> int:
        """sendMessage; returns the new message's id."""
        ...

    async def edit_message_text(
        self, chat_id: int, message_id: int, text: str, entities: list[dict[str, object]] | None, answer_timeout: float
    ) -> None: ...

    async def send_document(
        self, chat: TelegramChat, file_name: str, data: bytes, caption: str | None, answer_timeout: float
    ) -> int:
        """sendDocument with the file uploaded; returns the new message's id."""
        ...

    async def send_message_draft(
        self, chat_id: int, draft_id: int, text: str, entities: list[dict[str, object]] | None
    ) -> None:
        """sendMessageDraft: a reply still being written, shown in a private chat until a real message ends it."""
        ...

    async def send_chat_action(self, chat: TelegramChat, action: str) -> None: ...

    async def answer_callback_query(self, query_id: str, text: str | None) -> None: ...

    async def download_file(self, file_id: str) -> bytes:
        """getFile, then the file itself from the Bot API's file URL (which holds the token: never shown)."""
        ...
