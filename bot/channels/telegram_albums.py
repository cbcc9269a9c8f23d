"""`Albums`: the albums people send, handed over one message at a time, and in groups only once addressed.

Telegram delivers an album (photos sent at once) as one message per photo, each with the album's
`media_group_id`; the router joins them into the turn of the first, once that turn waits in its chat's
queue. Over a webhook the messages may come at once, so the channel hands the messages of albums over one
at a time (`handing_over`): each is queued, or has joined, before the next is looked at.

Only one message of an album carries the caption: in a group, only that one can mention the bot. Once a
message of an album is addressed to the bot, the whole album is: its other photos are handed over too.
Telegram puts the caption on the first photo, but the photos may arrive in any order: a photo of an
album not (yet) known to be for the bot is held, in case a later photo of it is; after
`media.albumWaitSeconds` it is forgotten. An album that never addresses the bot is never answered.

A held photo's update was taken from Telegram: the channel has the turn ledger keep it until it is handed
over or forgotten (`TurnLedger.hold`), so a stop or a crash in that second does not lose it, and the next
start holds it again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Albums remembered as addressed to the bot (a late photo of one is still for the bot), and albums whose
# photos are held: bounds for a process serving many busy groups.
ADDRESSED_ALBUMS_KEPT = 1024
HELD_ALBUMS_KEPT = 256


@dataclass
class _Held:
    since: float  # when the album's first held photo came (monotonic seconds)
    updates: list[dict[str, Any]] = field(default_factory=list)


class Albums:
    """The albums known to address the bot, and the photos held until their album does."""

    def __init__(self, forgotten: Callable[[dict[str, Any]], None] | None = None) -> None:
        """`forgotten` is told of each held update dropped (its album did not address the bot in time)."""
        self._forgotten = forgotten
        # Held while a message of an album is handed over.
        self.handing_over = asyncio.Lock()
        self._addressed: OrderedDict[str, None] = OrderedDict()
        self._held: OrderedDict[str, _Held] = OrderedDict()

    def addressed(self, album: str) -> bool:
        """Whether a message of `album` addressed the bot."""
        return album in self._addressed

    def hold(self, album: str, update: dict[str, Any], now: float, wait_seconds: float) -> None:
        """Keep `update`, a message of `album` not addressed to the bot, for `wait_seconds` from the album's first
        held one, in case another message of the album is."""
        self.forget_older(now - wait_seconds)
        held = self._held.setdefault(album, _Held(now))
        held.updates.append(update)
        while len(self._held) > HELD_ALBUMS_KEPT:
            self._forget(self._held.popitem(last=False)[1])

    def address(self, album: str, now: float, wait_seconds: float) -> list[dict[str, Any]]:
        """A message of `album` is addressed to the bot: so are the rest of it, from now on. Returns its
        messages held until now (within `wait_seconds`), in the order they came."""
        self.forget_older(now - wait_seconds)
        self._addressed[album] = None
        self._addressed.move_to_end(album)
        while len(self._addressed) > ADDRESSED_ALBUMS_KEPT:
            self._addressed.popitem(last=False)
        held = self._held.pop(album, None)
        return held.updates if held is not None else []

    def forget_older(self, moment: float) -> None:
        """Forget the held albums whose first photo came before `moment` (they were not for the bot)."""
        while self._held:
            album, held = next(iter(self._held.items()))  # the albums are held in the order they came
            if held.since >= moment:
                return
            del self._held[album]
            self._forget(held)

    def _forget(self, held: _Held) -> None:
        if self._forgotten is not None:
            for update in held.updates:
                self._forgotten(update)
