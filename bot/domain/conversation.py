"""The live conversation's shape (after a compaction, a summary message first, then the messages after it),
and values derived from it message by message (`Incremental`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from bot.domain.message import Message, Role

T = TypeVar("T")

# The first line of the summary message, the session's first message after a compaction (docs/memory.md).
SUMMARY_HEADER = "[Conversation summary]"


def split_summary(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(`[summary message]` or `[]`, the conversation after it)."""
    if messages and messages[0].role is Role.SYSTEM and messages[0].content.startswith(SUMMARY_HEADER):
        return messages[:1], messages[1:]
    return [], messages


class Incremental(Generic[T]):
    """A value derived from a conversation one message at a time, brought up to date with only the
    messages appended since it was last asked for, so that what a turn derives from the whole live
    conversation costs the new messages, not the conversation's length.

    A conversation is found again by its first message: a `Message` is never edited in place, and a
    list that begins with the very messages this one last derived from is that conversation, grown
    (checked by comparing the two lists, which takes each pair that is the same object as equal without
    looking into it). Any other list, a compacted or cut one, is derived afresh. The least recently used
    conversations are forgotten past `conversations` (the chats active at once; one forgotten is derived
    afresh when it speaks again), which bounds the messages kept alive here. The value handed out is the
    one kept: not to be changed by the caller.
    """

    def __init__(self, start: Callable[[], T], add: Callable[[T, Message], T], conversations: int = 256) -> None:
        self._start = start
        self._add = add
        self._size = conversations
        self._kept: OrderedDict[int, tuple[list[Message], T]] = OrderedDict()

    def over(self, messages: list[Message]) -> T:
        if not messages:
            return self._start()
        key = id(messages[0])
        kept = self._kept.get(key)
        if kept is None or len(messages) < len(kept[0]) or messages[: len(kept[0])] != kept[0]:
            kept = ([], self._start())
        derived_from, value = kept
        added = messages[len(derived_from) :]
        for message in added:
            value = self._add(value, message)
        derived_from.extend(added)
        # Keyed by the first message's identity: `derived_from` holds it, so the key is not reused meanwhile.
        kept_newest(self._kept, key, (derived_from, value), self._size)
        return value


K = TypeVar("K")
V = TypeVar("V")


def kept_newest(kept: OrderedDict[K, V], key: K, value: V, size: int) -> None:
    """Store `value` under `key` as the most recently used, forgetting the least recently used past `size`
    (the per-conversation caches: the chats active at once)."""
    kept[key] = value
    kept.move_to_end(key)
    if len(kept) > size:
        kept.popitem(last=False)
