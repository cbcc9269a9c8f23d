#!/usr/bin/env bash
# Every check CI runs: lint, format, types (bot, tests and bench: see [tool.mypy] files), architecture
# contracts, then the test suite on 3 workers (pytest-xdist): a test's time is partly spent waiting on
# sockets, child processes and timers, so one worker more than the two cores CI has pays; a fourth adds
# its memory and competes for the same cores. Arguments go to pytest after the workers
# (`scripts/check.sh -n 0` runs the tests in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
"$bin/ruff" check bot tests bench
"$bin/ruff" format --check bot tests bench
"$bin/mypy"
"$bin/lint-imports"
"$bin/python" -m pytest -q -n 3 "$@"
