#!/usr/bin/env bash
# Rewrite what is written out from the settings model (bot/settings.py) after a setting was added or its
# default or description changed there: config/runtime-config.json, config/runtime-config.schema.json and
# the key tables of docs/configuration.md. Tests hold all three equal to the model.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m bot.settings_docs
