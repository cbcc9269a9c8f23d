"""What a bot in its own process costs per message, read from the outside through `/proc`.

Shared by `minimal_assistant` and `session_growth`: the bot under test runs in a subprocess against the
fake Bot API of the bench process, so the fakes' own work is never counted. CPU is the process's
user + system time (every thread, including the ones that write files), read from the process's CPU-time
clock in nanoseconds (`clock_getcpuclockid`); `/proc/<pid>/stat` counts it in ticks of 10 ms, a quarter
of a millisecond a message over a round of 40, which was much of a round's spread. Bytes written are
what it sent to the storage layer (`write_bytes` of `/proc/<pid>/io`: files, not sockets).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import statistics
import time
from dataclasses import dataclass, field
from functools import partial

from tests.fakes.telegram_server import FakeTelegram

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REPLY_TIMEOUT_SECONDS = 120.0


def _cpu_clock_of(pid: int) -> int | None:
    """The id of the process's CPU-time clock, or None where the C library has no `clock_getcpuclockid`."""
    name = ctypes.util.find_library("c")
    function = getattr(ctypes.CDLL(name), "clock_getcpuclockid", None) if name else None
    clock = ctypes.c_int()
    if function is None or function(pid, ctypes.byref(clock)) != 0:
        return None
    return clock.value


class ProcessMeter:
    """CPU seconds and bytes written so far by one process (Linux)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._clock = _cpu_clock_of(pid)

    def cpu_seconds(self) -> float:
        if self._clock is not None:
            return time.clock_gettime(self._clock)
        with open(f"/proc/{self.pid}/stat") as stat:
            # The command name may hold spaces; the fields after its closing parenthesis do not.
            fields = stat.read().rsplit(")", 1)[1].split()
        user, system = int(fields[11]), int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
        return (user + system) / CLOCK_TICKS

    def bytes_written(self) -> int:
        with open(f"/proc/{self.pid}/io") as io:
            for line in io:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
        raise RuntimeError(f"no write_bytes in /proc/{self.pid}/io")


@dataclass
class Round:
    """Messages sent one after another in one chat, each waiting for its reply."""

    messages: int
    cpu_ms_per_message: float
    bytes_per_message: float
    round_trips_ms: list[float] = field(default_factory=list)


def sequential_round(fake: FakeTelegram, meter: ProcessMeter, chat: int, texts: list[str]) -> Round:
    """Send `texts` in `chat`, each after the reply to the one before; the round trip runs from the push
    to the moment the fake Bot API received the reply."""
    round_trips: list[float] = []
    cpu_before, written_before = meter.cpu_seconds(), meter.bytes_written()
    for text in texts:
        answered = len(fake.sent_messages(chat))
        pushed = time.time()
        fake.push_message(chat, text)
        fake.wait_until(partial(_more_than, fake, chat, answered), REPLY_TIMEOUT_SECONDS, "the reply")
        round_trips.append((fake.sent_messages(chat)[answered].time - pushed) * 1000)
    cpu = meter.cpu_seconds() - cpu_before
    written = meter.bytes_written() - written_before
    return Round(len(texts), 1000 * cpu / len(texts), written / len(texts), round_trips)


def _more_than(fake: FakeTelegram, chat: int, count: int) -> bool:
    return len(fake.sent_messages(chat)) > count


def warm_up(fake: FakeTelegram, meter: ProcessMeter, chat: int, count: int, timeout: float) -> None:
    """Wait for the first poll, then answer `count` messages unmeasured (start-up work: model load, first
    index, imports on first use)."""
    fake.wait_until(lambda: bool(fake.calls_to("getUpdates")), timeout, "the bot to poll")
    sequential_round(fake, meter, chat, [f"warm-up {number}" for number in range(count)])


def median_of(rounds: list[Round]) -> dict[str, float]:
    """Medians over rounds: CPU and bytes per message of each round, round trip of every message."""
    return {
        "cpu_ms": statistics.median(r.cpu_ms_per_message for r in rounds),
        "round_trip_ms": statistics.median(t for r in rounds for t in r.round_trips_ms),
        "bytes_per_message": statistics.median(r.bytes_per_message for r in rounds),
    }
