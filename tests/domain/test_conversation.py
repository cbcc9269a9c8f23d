"""A value derived from a conversation costs the messages appended since it was last asked for; any
other change to the conversation makes it afresh."""

from __future__ import annotations

from bot.domain.conversation import Incremental
from bot.domain.message import Message


class CountingLengths:
    """The total length of the messages' texts, and how many messages were looked at to get it."""

    def __init__(self, conversations: int = 1100) -> None:
        self.looked_at = 0
        self.derived: Incremental[int] = Incremental(int, self._add, conversations)

    def _add(self, total: int, message: Message) -> int:
        self.looked_at += 1
        return total + len(message.content)


def test_a_growing_conversation_costs_only_its_new_messages() -> None:
    lengths = CountingLengths()
    conversation = [Message.user("hello"), Message.assistant("hi there")]
    assert lengths.derived.over(conversation) == 13
    conversation += [Message.user("how are you?"), Message.assistant("fine")]
    assert lengths.derived.over(conversation) == 29
    assert lengths.derived.over(list(conversation)) == 29  # a copy of the same messages is the same conversation
    assert lengths.looked_at == 4


def test_a_conversation_changed_otherwise_is_derived_afresh() -> None:
    lengths = CountingLengths()
    conversation = [Message.user("hello"), Message.assistant("hi there"), Message.user("bye")]
    lengths.derived.over(conversation)
    lengths.looked_at = 0

    assert lengths.derived.over(conversation[:2]) == 13  # cut (a /retry)
    assert lengths.looked_at == 2
    changed = [conversation[0], Message.assistant("hey"), conversation[2]]  # one put in another's place
    assert lengths.derived.over(changed) == 11
    compacted = [Message.system("[Conversation summary] greetings"), conversation[2]]
    assert lengths.derived.over(compacted) == 35
    assert lengths.derived.over([]) == 0


def test_only_so_many_conversations_are_kept() -> None:
    lengths = CountingLengths(conversations=2)
    chats = [[Message.user(f"chat {n}")] for n in range(3)]
    for chat in chats:
        lengths.derived.over(chat)
    lengths.looked_at = 0
    lengths.derived.over(chats[2])
    assert lengths.looked_at == 0
    lengths.derived.over(chats[0])  # the least recently used one was forgotten
    assert lengths.looked_at == 1
