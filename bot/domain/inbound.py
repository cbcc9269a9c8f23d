"""`InboundMessage`: what a person sent, as the pipeline sees it, whatever the channel."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message a person sent, as the pipeline sees it, whatever the channel."""

    channel_type: str
    chat_id: str
    user_id: str
    text: str
    message_id: str | None = None
    username: str | None = None
    # The sender's display name (first and last name as the channel gives it), for the model and memory.
    sender_name: str | None = None
    is_group: bool = False
    # A key that is the same when the transport delivers the same message twice (Telegram's update_id).
    dedup_key: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    # Already in the session, left unanswered when the bot stopped: answer it without storing it again.
    resumed: bool = False
    # Its turn id in the turn ledger (`bot.ledger`), and the id its user message gets in the session.
    journal_id: str | None = None

    @property
    def display_name(self) -> str:
        """The name to show the model for the sender: the display name, else @username, else the id."""
        return self.sender_name or (f"@{self.username}" if self.username else f"user {self.user_id}")

    @property
    def session_id(self) -> str:
        return f"{self.channel_type}:{self.chat_id}"
