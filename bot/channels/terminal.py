"""`TerminalLines`: the lines a person types in a terminal, edited with GNU readline (the standard
library's `readline`), and the bot's output printed above the line being typed.

The terminal's own line discipline (canonical mode) cuts a line at 4,095 characters and stores arrow
keys as `^[[A`; readline reads the keys raw, so a pasted message of any length arrives whole, and the
arrows, Home/End, Ctrl-R and the history work as in a shell. The history is kept in a file.

`input()` blocks, so it runs in a daemon thread of its own; each line is handed to the event loop. The
bot's output may come while a line is being typed (a reply to a message typed earlier, a reminder): it
is printed by whole lines above the prompt, which is drawn again with what was typed so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import termios
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger(__name__)

PROMPT = "> "
# Lines of history kept in the history file.
HISTORY_LINES = 1000
# Erase from the cursor to the end of the screen.
_CLEAR_BELOW = "\x1b[J"


def readline_available() -> bool:
    """Whether this Python has the `readline` module (Linux and macOS builds do; some minimal ones do not)."""
    try:
        import readline  # noqa: F401
    except ImportError:
        return False
    return True


class TerminalLines:
    """Reads lines from a terminal with readline in a thread, and writes output above the prompt."""

    def __init__(self, stdin: TextIO, stdout: TextIO, history_file: Path | None) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._history_file = history_file
        self._lock = threading.Lock()
        self._prompting = False
        self._partial = ""
        self._saved_mode: list[Any] | None = None
        self._thread: threading.Thread | None = None

    def start(self, on_line: Callable[[str], None], on_end: Callable[[], None]) -> None:
        """Start reading; `on_line` and `on_end` (Ctrl-D) are called on the event loop's thread."""
        import readline

        loop = asyncio.get_running_loop()
        with contextlib.suppress(termios.error):
            self._saved_mode = termios.tcgetattr(self._stdin.fileno())
        readline.set_history_length(HISTORY_LINES)
        if self._history_file is not None and self._history_file.is_file():
            try:
                readline.read_history_file(self._history_file)
            except OSError as error:
                log.warning("[Console] Could not read the history %s: %s", self._history_file, error)

        def read() -> None:
            while True:
                with self._lock:
                    self._prompting = True
                try:
                    line = input(PROMPT)
                except EOFError:
                    loop.call_soon_threadsafe(on_end)
                    return
                except Exception as error:  # a closed terminal: the chat ends as at Ctrl-D
                    log.warning("[Console] Reading the terminal failed: %s", error)
                    loop.call_soon_threadsafe(on_end)
                    return
                finally:
                    with self._lock:
                        self._prompting = False
                loop.call_soon_threadsafe(on_line, line)

        self._thread = threading.Thread(target=read, name="console input", daemon=True)
        self._thread.start()

    def write(self, text: str) -> None:
        """Print `text` by whole lines above the prompt (the rest waits for its line's end)."""
        with self._lock:
            self._partial += text
            if "\n" not in self._partial:
                return
            complete, _, self._partial = self._partial.rpartition("\n")
            if not self._prompting:
                self._stdout.write(complete + "\n")
                self._stdout.flush()
                return
            import readline

            typed = readline.get_line_buffer()
            columns = max(shutil.get_terminal_size().columns, 1)
            # Back to the prompt's first row (a long line wraps), erase it and below, print, draw the prompt again.
            rows_up = (len(PROMPT) + len(typed)) // columns
            self._stdout.write("\r" + (f"\x1b[{rows_up}A" if rows_up else "") + _CLEAR_BELOW + complete + "\n")
            self._stdout.write(PROMPT + typed)
            self._stdout.flush()

    def close(self) -> None:
        """Keep the history, and give the terminal back as it was (readline may be mid-line)."""
        if self._history_file is not None:
            try:
                import readline

                readline.write_history_file(self._history_file)
            except OSError as error:
                log.warning("[Console] Could not keep the history in %s: %s", self._history_file, error)
        if self._saved_mode is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self._stdin.fileno(), termios.TCSADRAIN, self._saved_mode)
        with self._lock:
            if self._partial:
                self._stdout.write(self._partial)
                self._partial = ""
            if self._prompting:
                self._stdout.write("\n")
            self._stdout.flush()
