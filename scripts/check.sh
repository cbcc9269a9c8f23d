#!/usr/bin/env bash
# Every check CI runs: lint, format, types (bot, tests and bench: see [tool.mypy] files), architecture
# contracts, then the test suite on 3 workers (pytest-xdist): a test's time is partly spent waiting on
# sockets, child processes and timers, so one worker more than the two cores CI has pays; a fourth adds
# its memory and competes for the same cores. Arguments go to pytest after the workers
# (`scripts/check.sh -n 0` runs the tests in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
# Compiled modules are written and reused: each test worker and each bot process a test starts would
# otherwise compile the bot's modules again, and each worker pytest's rewritten test modules.
unset PYTHONDONTWRITEBYTECODE
# The web console's browser tests drive the machine's headless Chromium and its driver (Debian's packages):
# installed here when missing and this runs as root (as in CI); otherwise the check stops and says how.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver
    else
        echo "The browser tests need Chromium and its driver (/usr/bin/chromium, /usr/bin/chromedriver):" \
            "run this as root to have them installed, or: sudo apt-get install chromium chromium-driver" >&2
        exit 1
    fi
fi
"$bin/ruff" check bot tests bench
"$bin/ruff" format --check bot tests bench
"$bin/mypy"
"$bin/lint-imports"
"$bin/python" -m pytest -q -n 3 "$@"
