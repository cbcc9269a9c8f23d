"""`/model [name]`: the owner lists the configured chat models or switches among them, live.

The choice is kept in `state/model.json` and laid over the configuration (over `BOT_MODEL` too: the
owner chose explicitly), so it holds after a restart; `/model NAME` of the configured model again
puts it back. With the configuration in the database (`BOT_DATABASE_URL`), the choice is written there as
`llm.model`, so every process sharing the database switches. `BOT_MODEL` stays over the database's
configuration, so a process that sets it refuses `/model NAME` and says why: the switch would not reach
it, and a chat answered by processes on different models would change model from message to message.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bot.access.policy import is_owner
from bot.commands.registry import Command, CommandRegistry, CommandRequest
from bot.runtime_config import InvalidRuntimeConfig, RuntimeConfigStore
from bot.settings import RuntimeConfig
from bot.storage.files import read_state_sync, write_atomic

log = logging.getLogger(__name__)


class ModelSwitch:
    """The chat model the owner switched to, if any, kept across restarts."""

    def __init__(
        self, config_store: RuntimeConfigStore, state_file: Path, environment_model: str | None = None
    ) -> None:
        """`environment_model`: what `BOT_MODEL` sets, if anything."""
        self._config_store = config_store
        self._state_file = state_file
        self._environment_model = environment_model
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

    def refusal(self) -> str | None:
        """Why `/model NAME` cannot switch here, or None: with the configuration in the database, a
        `BOT_MODEL` in this process's environment stays over whatever the switch writes."""
        if self._environment_model is None or not self._config_store.in_database():
            return None
        return (
            f"The model is set by BOT_MODEL ({self._environment_model}) in this bot's environment, which stays "
            "over /model while the configuration is shared in the database. To switch from the chat, unset "
            "BOT_MODEL on every replica (and set llm.model in the settings instead)."
        )

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
        refusal = switch.refusal()
        if not name:
            if refusal is not None:
                return f"Model: {config.llm.model}, set by BOT_MODEL in this bot's environment. Configured: {listing}."
            return f"Model: {config.llm.model}. Configured: {listing}. Switch with /model NAME."
        if refusal is not None:
            return refusal
        if name not in offered:
            return f"{name} is not a configured model. Configured: {listing} (add more in llm.models)."
        if name == config.llm.model:
            return f"Already using {name}."
        try:
            await switch.switch(name)
        except InvalidRuntimeConfig as error:  # the stored text is a person's, with a slip: not written over
            return f"Nothing was switched: {error}. Fix it first, then switch again."
        return f"Switched to {name}; your next message uses it."

    registry.register(Command("model", "the chat model; the owner switches it", model, usage="[name]"))
