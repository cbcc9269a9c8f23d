#!/usr/bin/env bash
# Every check CI runs: lint, format, types (bot, tests and bench: see [tool.mypy] files), architecture
# contracts, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
"$bin/ruff" check bot tests bench
"$bin/ruff" format --check bot tests bench
"$bin/mypy"
"$bin/lint-imports"
"$bin/python" -m pytest -q "$@"
