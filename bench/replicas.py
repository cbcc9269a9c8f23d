"""Messages per second answered by 1, 2 and 3 replicas (`bot run` processes) sharing one PostgreSQL.

Each replica is a real process of `bot run` in webhook mode (`tests/database/replicas.py`, forked with the
application already imported by `tests/bot_processes.py`) on a throw-away PostgreSQL
(`tests/postgres_server.py`: 127.0.0.1, fsync off), the fake Bot API and the fake model answering at once.
Updates of `--chats` chats (`--per-chat` each) are posted round-robin over the replicas' webhooks, as a load
balancer would; the figure is the messages answered per second, from the first post to the last reply.

`--profile` also says where the CPU went during each run, in cores (CPU seconds over the run's seconds):
the replicas' processes, the PostgreSQL server's (its postmaster and every backend), this process (the
fake Bot API, the fake model and the posting of updates), and the rest of the machine (other users),
read from Linux's /proc.

Run: `.venv/bin/python -m bench.replicas [--replicas 1 2 3] [--chats 20] [--per-chat 5] [--profile] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from tests.database.replicas import post, start_replica, wait_until_healthy
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database, running_server
from tests.reliability.bot_process import stop

FIRST_CHAT = 7001
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def _process_ticks() -> dict[int, tuple[int, int]]:
    """Every process's parent and CPU ticks used so far (user + system), from /proc."""
    found: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        found[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return found


def _machine_ticks() -> int:
    """CPU ticks the machine spent working (not idle, not waiting on I/O), all cores."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]


def _descendants(root: int, ticks: dict[int, tuple[int, int]]) -> set[int]:
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in ticks.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier.extend(children)
    return found


def _postmaster(server: PostgresServer) -> int:
    """The pid of the server's postmaster: the `postgres` process started with its port."""
    for pid in _process_ticks():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command and command[0].endswith(b"postgres") and str(server.port).encode() in command:
            return pid
    raise LookupError(f"no postmaster on port {server.port}")


@dataclass
class CpuShares:
    """Cores used during a run by each party (CPU seconds over the run's seconds)."""

    replicas: float
    database: float
    fakes: float
    others: float


class CpuMeter:
    """CPU ticks of the replicas, the database server and this process, from `start` to `stop`."""

    def __init__(self, replicas: list[int], postmaster: int) -> None:
        self._replicas = replicas
        self._postmaster = postmaster
        self._before: dict[int, tuple[int, int]] = {}
        self._machine = 0
        self._started = 0.0

    def start(self) -> None:
        self._before, self._machine, self._started = _process_ticks(), _machine_ticks(), time.perf_counter()

    def stop(self) -> CpuShares:
        after, machine, seconds = _process_ticks(), _machine_ticks(), time.perf_counter() - self._started

        def used(pids: set[int]) -> float:
            # A process started during the run counts from zero; one that ended during it is not seen.
            ticks = sum(after[pid][1] - self._before.get(pid, (0, 0))[1] for pid in pids if pid in after)
            return ticks / TICKS_PER_SECOND / seconds

        replicas = used({pid for replica in self._replicas for pid in _descendants(replica, after)})
        database = used(_descendants(self._postmaster, after))
        fakes = used({os.getpid()})
        machine_cores = (machine - self._machine) / TICKS_PER_SECOND / seconds
        return CpuShares(replicas, database, fakes, max(machine_cores - replicas - database - fakes, 0.0))


async def messages_per_second(
    server: PostgresServer, folder: Path, replicas: int, arguments: argparse.Namespace
) -> tuple[float, CpuShares | None]:
    chats = [FIRST_CHAT + number for number in range(arguments.chats)]
    url = await asyncio.to_thread(create_database, server, f"bench_replicas_{replicas}")
    with FakeOpenAI() as model, FakeTelegram() as telegram:
        running = [
            start_replica(folder / f"{replicas}-{number}", url, model, telegram, chats) for number in range(replicas)
        ]
        try:
            await asyncio.gather(*(wait_until_healthy(replica) for replica in running))
            meter = CpuMeter([replica.process.pid for replica in running], _postmaster(server))
            total = int(arguments.chats) * int(arguments.per_chat)
            meter.start()
            started = time.perf_counter()
            async with aiohttp.ClientSession() as http:
                posted = 0
                for number in range(arguments.per_chat):
                    for chat in chats:
                        update = telegram.update(telegram.push_message(chat, f"message {number}"))
                        assert await post(http, running[posted % replicas], update) == 200
                        posted += 1
            await telegram.await_until(lambda: len(telegram.sent_messages()) >= total, 600)
            rate = total / (time.perf_counter() - started)
            return rate, meter.stop() if arguments.profile else None
        finally:
            for replica in running:
                await asyncio.to_thread(stop, replica.process)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--per-chat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="say where the CPU went during each run")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    figures: dict[str, float] = {}
    shares: dict[int, CpuShares] = {}
    with running_server() as server, tempfile.TemporaryDirectory() as folder:
        for replicas in arguments.replicas:
            rate, cpu = await messages_per_second(server, Path(folder), replicas, arguments)
            figures[f"{replicas}_replicas"] = rate
            if cpu is not None:
                shares[replicas] = cpu
                figures.update({f"{replicas}_replicas_cores_{name}": value for name, value in vars(cpu).items()})
    if arguments.json:
        print(json.dumps(figures))
        return
    for replicas in arguments.replicas:
        rate = figures[f"{replicas}_replicas"]
        ratio = rate / figures[f"{arguments.replicas[0]}_replicas"]
        line = f"{replicas} replicas: {rate:.1f} messages/s (x{ratio:.2f})"
        if replicas in shares:
            cpu = shares[replicas]
            # CPU per message: what each party costs, whatever else the machine was doing.
            line += (
                f"; cores used: replicas {cpu.replicas:.2f}, database {cpu.database:.2f}, fakes and posting "
                f"{cpu.fakes:.2f}, rest of the machine {cpu.others:.2f} (of {os.cpu_count()}); CPU per message: "
                f"replicas {1000 * cpu.replicas / rate:.0f} ms, database {1000 * cpu.database / rate:.1f} ms"
            )
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
