"""What a command costs the machine: wall time, CPU time, and the peak resident memory of its whole
process tree. Made for the test suite (`scripts/check.sh`, or pytest with or without workers), where
`/usr/bin/time -v` would report only the largest single process.

    .venv/bin/python -m bench.suite_cost                       # scripts/check.sh
    .venv/bin/python -m bench.suite_cost -- .venv/bin/python -m pytest -q -x tests/memory

Every `--interval` seconds the resident set (`VmRSS` of `/proc/<pid>/status`) of the command and of every
process under it is summed; the peak of that sum is printed. Pages shared between processes (the
interpreter, libraries, a forked child's pages) are counted once per process, so the figure is an upper
bound of what the run needs. The proportional set size (`Pss` of `/proc/<pid>/smaps_rollup`: each shared
page divided among the processes that share it) is summed the same way: its peak is the memory the run
occupied. The sampler makes itself the subreaper of the command (`PR_SET_CHILD_SUBREAPER`): a process
whose parent has exited is still counted. CPU is the user + system time of every process of the tree that
has been waited for (`RUSAGE_CHILDREN`). The largest processes at the peak are listed with their command
lines. The load average before and after is printed too: on a shared machine a figure means little
without it.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PEAK_PROCESSES_SHOWN = 12
COMMAND_CHARS = 100
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Cost:
    command: list[str]
    exit_code: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    peak_pss_mb: float
    peak_processes: int
    load_before: str
    load_after: str
    at_peak: list[str]


def _become_subreaper() -> None:
    name = ctypes.util.find_library("c")
    if name is not None:
        ctypes.CDLL(name, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _parents() -> dict[int, int]:
    """Every live process's parent, from `/proc/<pid>/stat` (a process that exits meanwhile is skipped)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                # The command name may hold spaces and parentheses; the fields after its last ")" do not.
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
    return parents


def _tree(root: int, parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def _field_kb(path: str, field: str) -> int:
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0  # a kernel thread, or a process that has exited


def _rss_kb(pid: int) -> int:
    return _field_kb(f"/proc/{pid}/status", "VmRSS:")


def _pss_kb(pid: int) -> int:
    return _field_kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def measure(command: list[str], interval: float) -> Cost:
    """Run `command` from the repository root and sample its process tree until it exits."""
    _become_subreaper()
    load_before = _load()
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT)
    peak_kb, peak_pss_kb, peak_processes, at_peak = 0, 0, 0, list[str]()
    while process.poll() is None:
        tree = _tree(process.pid, _parents())
        resident = {pid: _rss_kb(pid) for pid in tree}
        if sum(resident.values()) > peak_kb:
            peak_kb = sum(resident.values())
            # What made the peak: the largest processes then, each with its command line.
            largest = sorted(resident.items(), key=lambda item: -item[1])[:PEAK_PROCESSES_SHOWN]
            at_peak = [f"{kb / 1024:7.1f} MB  {_command_line(pid)[:COMMAND_CHARS]}" for pid, kb in largest if kb]
        peak_pss_kb = max(peak_pss_kb, sum(_pss_kb(pid) for pid in tree))
        peak_processes = max(peak_processes, len(tree))
        time.sleep(interval)
    wall = time.monotonic() - started
    # Orphans the command left behind were reparented to this process: reap them so their CPU counts.
    try:
        while os.waitpid(-1, 0):
            pass
    except ChildProcessError:
        pass
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Cost(
        command=command,
        exit_code=process.returncode,
        wall_seconds=round(wall, 1),
        cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1),
        peak_rss_mb=round(peak_kb / 1024, 1),
        peak_pss_mb=round(peak_pss_kb / 1024, 1),
        peak_processes=peak_processes,
        load_before=load_before,
        load_after=_load(),
        at_peak=at_peak,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    parser.add_argument("command", nargs="*", default=["scripts/check.sh"], help="the command (after --)")
    arguments = parser.parse_args()
    cost = measure(arguments.command, arguments.interval)
    if arguments.json:
        print(json.dumps(asdict(cost)))
    else:
        print(f"command: {' '.join(cost.command)} (exit {cost.exit_code})")
        print(f"wall: {cost.wall_seconds} s  cpu (user+sys): {cost.cpu_seconds} s")
        print(f"peak RSS of the process tree: {cost.peak_rss_mb} MB over {cost.peak_processes} processes at most")
        print(f"peak PSS of the process tree (shared pages divided among their processes): {cost.peak_pss_mb} MB")
        print(f"load average (1, 5, 15 min): before {cost.load_before}, after {cost.load_after}")
        print("the largest processes at the peak:")
        for line in cost.at_peak:
            print(f"  {line}")
    sys.exit(cost.exit_code)


if __name__ == "__main__":
    main()
