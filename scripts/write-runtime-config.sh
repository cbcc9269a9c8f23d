#!/usr/bin/env bash
# Rewrite the shipped config/runtime-config.json from the settings model (bot/settings.py), after a
# setting was added or its default changed there. tests/test_runtime_config.py holds the two equal.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -c 'from bot.settings import shipped_runtime_config_json as text; print(text(), end="")' \
    > config/runtime-config.json
