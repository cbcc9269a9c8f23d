"""`ChatRedirects`: where a send goes when Telegram refuses the chat it was meant for.

Every send of the channel goes through `ChatRedirects.send` (a reply, a streamed reply, a note, a reminder,
a file, the typing indicator), so that a refused chat is mapped to where to send instead in this one place:

- a group upgraded to a supergroup (400 "group chat was upgraded to a supergroup chat", naming the new id):
  to the supergroup, and so is every later send to the old id; `moved` is told, which moves the chat's
  conversation and memory along;
- a forum topic closed to the bot (400 "TOPIC_CLOSED": only admins post in a closed topic) or deleted
  (400 "message thread not found", or "TOPIC_DELETED"): to the forum's General topic, led by a line that
  names the topic and says why the message is not there. The next send tries the topic again: a closed
  topic may be reopened.

A topic is named as the messages people send there tell it (`topic_named`): the name it was opened with,
or a rename seen since; one the process saw no message of since it started is "a topic".
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.channels.telegram_api import BadRequest, ChatUpgraded, TelegramChat
from bot.channels.telegram_delivery import DeliveryFailed
from bot.channels.telegram_updates import TopicName

log = logging.getLogger(__name__)

_T = TypeVar("_T")
# Topic names kept for the notes, the most recently seen first kept: a bound on a process serving many forums.
TOPIC_NAMES_KEPT = 4096

# `call(chat, note)`: the send made in `chat`, `note` put first when it is not None.
SendIn = Callable[[TelegramChat, str | None], Awaitable[_T]]


def led_by(note: str | None, text: str) -> str:
    """`text` with `note` as its first paragraph (`text` as it is when there is no note)."""
    if note is None:
        return text
    return f"{note}\n\n{text}" if text.strip() else note


class ChatRedirects:
    """The chats Telegram refused and where their sends go instead."""

    def __init__(self, moved: Callable[[int, int], Awaitable[None]]) -> None:
        """`moved(old id, new id)` is told when a send finds the group upgraded to a supergroup."""
        self._moved = moved
        # Groups upgraded to supergroups: the old id, the new one.
        self._upgraded: dict[int, int] = {}
        self._topic_names: OrderedDict[tuple[int, int], str] = OrderedDict()

    def chat(self, chat_id: str) -> TelegramChat:
        """Where a send to a channel chat id goes: to a group's new id once it was upgraded to a supergroup."""
        chat = TelegramChat.of(chat_id)
        moved_to = self._upgraded.get(chat.id)
        return chat if moved_to is None else TelegramChat(moved_to, chat.thread_id)

    def upgraded(self, old_chat_id: int, new_chat_id: int) -> None:
        """The group `old_chat_id` became the supergroup `new_chat_id`: sends to it go there from now on."""
        self._upgraded[old_chat_id] = new_chat_id

    def topic_named(self, topic: TopicName) -> None:
        """A topic's name as an update tells it: the name it was opened with does not undo a rename."""
        key = (topic.chat_id, topic.thread_id)
        if topic.renamed or key not in self._topic_names:
            self._topic_names[key] = topic.name
        self._topic_names.move_to_end(key)
        while len(self._topic_names) > TOPIC_NAMES_KEPT:
            self._topic_names.popitem(last=False)

    async def send(self, chat: TelegramChat, call: SendIn[_T]) -> _T:
        """`call(chat, None)`; when Telegram refuses `chat`, `call` made again where the send goes instead, with
        the note to lead it (None: nothing to say). Any other failure is raised as it came."""
        try:
            return await call(chat, None)
        except DeliveryFailed as failure:
            refusal = failure.__cause__
            if isinstance(refusal, ChatUpgraded):
                instead, note = TelegramChat(refusal.new_chat_id, chat.thread_id), None
                log.warning("[Telegram] Chat %s was upgraded to the supergroup %s; sending there", chat, instead.id)
                await self._moved(chat.id, refusal.new_chat_id)
            elif chat.thread_id is not None and isinstance(refusal, BadRequest) and refusal.topic_closed:
                instead, note = TelegramChat(chat.id), self._topic_note(chat, "was closed")
                log.warning("[Telegram] Topic %s is closed to the bot; sending to its General topic", chat)
            elif chat.thread_id is not None and isinstance(refusal, BadRequest) and refusal.topic_deleted:
                instead, note = TelegramChat(chat.id), self._topic_note(chat, "was deleted")
                log.warning("[Telegram] Topic %s was deleted; sending to its General topic", chat)
            else:
                raise
        return await call(instead, note)

    def _topic_note(self, chat: TelegramChat, what_happened: str) -> str:
        assert chat.thread_id is not None
        name = self._topic_names.get((chat.id, chat.thread_id))
        topic = f"the topic “{name}”" if name else "a topic"
        return f"(This is for {topic}, which {what_happened} before I could post there.)"
