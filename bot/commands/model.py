"""`/model [name]`: the owner lists the configured chat models or switches among them, live.

The choice is kept in `state/model.json` and laid over the configuration (over `BOT_MODEL` too: the
owner chose explicitly), so it holds after a restart; `/model NAME` of the configured model again
puts it back. With the configuration in the database (`BOT_DATABASE_URL`), the choice is written there as
`llm.model`, so every process sharing the database switches (`BOT_MODEL`, where set, stays over it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bot.access.policy import is_owner
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.runtime_config import RuntimeConfigStore
from bot.settings import RuntimeConfig
from bot.storage.files import read_state_sync, write_atomic

log = logging.getLogger(__name__)


class ModelSwitch:
    """The chat model the owner switched to, if any, kept across restarts."""

    def __init__(self, config_store: RuntimeConfigStore, state_file: Path) -> None:
        self._config_store = config_store
        self._state_file = state_file
        # The chat model the configuration names before any switch: always offered.
        self.configured_model = config_store.in_force().llm.model

    def restore(self) -> None:
        """Apply a switch saved before the last stop (start-up)."""
        if self._config_store.in_database():
            return  # the switch is in the database's configuration, which every process follows
        saved = read_state_sync(self._state_file, "Config", "the configured model applies")
        model = saved.get("model")
        if isinstance(model, str) and model:
            self._config_store.set_overrides({"llm": {"model": model}})
            log.info("[Config] Chat model %s (switched with /model)", model)

    def offered(self, config: RuntimeConfig) -> list[str]:
        names = [self.configured_model, config.llm.model, *config.llm.models]
        if config.llm.balanced_model:
            names.append(config.llm.balanced_model)
        return list(dict.fromkeys(names))

    async def switch(self, model: str) -> None:
        if self._config_store.in_database():
            await self._config_store.write_settings({"llm": {"model": model}})
            log.info("[Config] The owner switched the chat model to %s, for every process of the database", model)
            return
        await write_atomic(self._state_file, json.dumps({"model": model}).encode())
        self._config_store.set_overrides({"llm": {"model": model}})
        log.info("[Config] The owner switched the chat model to %s", model)


def register_model_command(registry: CommandRegistry, switch: ModelSwitch, config_store: RuntimeConfigStore) -> None:
    async def model(request: CommandRequest) -> str:
        config = await config_store.current()
        if not is_owner(request.inbound, config.access.allowed_users):
            return "Only the owner can switch the model."
        offered = switch.offered(config)
        listing = ", ".join(offered)
        name = request.args.strip()
        if not name:
            return f"Model: {config.llm.model}. Configured: {listing}. Switch with /model NAME."
        if name not in offered:
            return f"{name} is not a configured model. Configured: {listing} (add more in llm.models)."
        if name == config.llm.model:
            return f"Already using {name}."
        await switch.switch(name)
        return f"Switched to {name}; your next message uses it."

    registry.register(Command("model", "the chat model; the owner switches it", model, usage="[name]"))
