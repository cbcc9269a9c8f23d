"""Every benchmark, each setting in its own process, and one table of the figures.

Runs the scripts of this folder as subprocesses (so each row's peak RSS is its own: the largest
resident set of that process and of every process it started, from `wait4`), reads what they
print, and prints one Markdown table, headed by the machine it ran on:

- pipeline overhead per message (p50 / p99) with an instant model, at session lengths of 10 and
  1,000 messages and memories of 1,000 and 100,000 items (`pipeline_overhead`);
- messages/s end to end through the fake Bot API, per backend: the whole bot, next to the bare
  library echo bot and our channel with an echo (`telegram_throughput`);
- CPU per message, round trip and burst rate of the whole bot beside a minimal assistant making the
  same three calls, as shipped and lexical only (`minimal_assistant`);
- CPU and bytes written per message at a 5,000-message session against a 10-message one, compaction
  off (`session_growth`);
- memory retrieval p50 / p99 with the offline embedder, the first answer after a start and what a
  restart re-embeds, at 1,000 / 10,000 / 100,000 items (`memory_retrieval`);
- memory items in PostgreSQL beside SQLite: retrieval p50 and resident memory at 100,000 items
  (`database_items`, a throw-away PostgreSQL with pgvector);
- LoCoMo evidence recall in the prompt, through the real bot (`locomo`), and whether memory's weights
  are fitted to its five conversations: each held out in turn (`holdout`, in process, not in `--quick`);
- compaction time for sessions of 100 / 1,000 / 5,000 messages, and over a 500-turn conversation
  on an 8k model (`compaction_figures`);
- RAG indexing throughput and hybrid query latency at 100 / 1,000 documents (`rag_throughput`);
- what the knowledge graph adds to a reply: p50 with the graph empty and with 1,000 indexed
  exchanges, through the real pipeline with an instant model (`rag_reply_latency`);
- what indexing the graph costs beside the replies over a 50-exchange conversation, batched as
  shipped and one document per exchange (`graph_indexing_cost`);
- the share of each request that is the request before it, over 50 turns (`prompt_prefix`);
- resident memory of the session cache after 10,000 chats (`session_cache`);
- memory recall@5 / @10 (`memory_quality`);
- a model whose real window (6,000 tokens) is smaller than the registry's, behind an endpoint that
  refuses and one that cuts silently: turns answered, refusals and cuts, early facts in the prompt
  (`small_window`).

`--quick` uses smaller sizes (a few minutes in all); `--only` picks benchmarks by name. A part
that fails shows as failed in the table and makes the exit code 1; the others still run.

Run: `.venv/bin/python -m bench.run_all [--quick] [--only NAME ...]`, a NAME of: pipeline telegram minimal
growth retrieval itemsdb compaction rag graphcost locomo holdout prefix sessions quality window.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PART_TIMEOUT_SECONDS = 1800.0

Parser = Callable[[str], str]


@dataclass(frozen=True)
class Part:
    """One subprocess: a benchmark at one setting, and how to read its output into a table cell."""

    benchmark: str  # the `--only` name
    label: str
    case: str
    module: str  # `python -m` this: the module and its arguments
    parse: Parser


@dataclass(frozen=True)
class Row:
    label: str
    case: str
    figures: str
    peak_rss_mib: float | None
    seconds: float
    ok: bool


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mib: float


def json_lines(output: str) -> list[dict[str, Any]]:
    """The JSON objects a script printed, one per line, ignoring its human-readable lines."""
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    if not found:
        raise ValueError("no JSON line in the output")
    return found


def ms(value: float) -> str:
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def pipeline_cell(output: str) -> str:
    [row] = json_lines(output)
    return f"p50 {ms(row['p50_ms'])}, p99 {ms(row['p99_ms'])} ({row['messages']} messages)"


THROUGHPUT_ROW = re.compile(r"^(ptb|aiogram)\s+(\d+)\s+(\d+)\s+\d+%\s+(\d+)\s+\d+%", re.MULTILINE)


def telegram_cell(output: str) -> str:
    """Reads `telegram_throughput`'s printed table (it has no machine-readable output)."""
    match = THROUGHPUT_ROW.search(output)
    if match is None:
        raise ValueError("no backend row in telegram_throughput's table")
    _, bare, channel, whole = match.groups()
    return f"whole bot {whole} msg/s (bare library echo {bare}, our channel with an echo {channel})"


def minimal_cell(output: str) -> str:
    [row] = json_lines(output)
    bot, minimal = row["bot"], row["minimal"]
    return (
        f"CPU per message {ms(bot['cpu_ms'])} against {ms(minimal['cpu_ms'])} (x{row['cpu_ratio']:.2f}); round trip "
        f"{ms(bot['round_trip_ms'])} against {ms(minimal['round_trip_ms'])} (x{row['round_trip_ratio']:.2f}); burst "
        f"{bot['burst_per_s']:.0f} against {minimal['burst_per_s']:.0f} msg/s ({row['burst_share']:.0%})"
    )


def growth_cell(output: str) -> str:
    [row] = json_lines(output)
    short, long = (row["lengths"][key] for key in sorted(row["lengths"], key=int))
    return (
        f"CPU per message {ms(long['cpu_ms'])} against {ms(short['cpu_ms'])} (x{row['cpu_ratio']:.2f}); written per "
        f"message {long['bytes_per_message'] / 1024:,.0f} KiB against {short['bytes_per_message'] / 1024:,.0f} KiB "
        f"(x{row['bytes_ratio']:.1f}); round trip x{row['round_trip_ratio']:.2f}"
    )


def retrieval_cell(output: str) -> str:
    [row] = json_lines(output)
    return (
        f"p50 {ms(row['p50_ms'])}, p99 {ms(row['p99_ms'])} with the message's vector made inside; the query's "
        f"vector made beforehand: p50 {ms(row['retrieval_p50_ms'])}, p99 {ms(row['retrieval_p99_ms'])}; lexical "
        f"only p50 {ms(row['lexical_p50_ms'])}; first answer after a restart {row['first_ms']:.0f} ms, "
        f"{row['embedded_at_start']} re-embedded, {row['files_reread']} files re-read"
    )


def database_items_cell(output: str) -> str:
    rows = {row["store"]: row for row in json_lines(output)}
    shown = [
        f"{store}: p50 {ms(row['p50_ms'])}, the query's vector made beforehand {ms(row['retrieval_p50_ms'])}, "
        f"lexical only {ms(row['lexical_p50_ms'])}, ready {row['ready_s']:.1f} s, RSS {row['rss_mib']:.0f} MiB"
        for store, row in rows.items()
    ]
    return "; ".join(shown) + f" (migrate {rows['database']['migrate_s']:.0f} s)"


def compaction_cell(output: str) -> str:
    row = json_lines(output)[-1]
    if row["part"] == "compact":
        return f"{ms(row['ms'])} ({row['calls']} summary calls, instant summarizer)"
    median = row["compaction_ms_median"]
    return (
        f"{row['compactions']} compactions, median {ms(median) if median is not None else 'n/a'}; prompt "
        f"median {row['prompt_tokens_median']:.0f} / max {row['prompt_tokens_max']} tokens "
        f"(limit {row['limit_tokens']}, over it {row['over_limit']}x)"
    )


def rag_cell(output: str) -> str:
    [row] = json_lines(output)
    return (
        f"{row['index_docs_per_s']:.1f} docs/s ({row['index_ms_per_doc']:.0f} ms/doc); "
        f"hybrid query p50 {ms(row['hybrid_ms_p50'])} ({row['model_calls_retrieving']} model calls)"
    )


def rag_reply_cell(output: str) -> str:
    [row] = json_lines(output)
    empty, graph = row["empty"], row["graph"]
    chat = graph["requests"].get("/v1/chat/completions", 0)
    embeddings = graph["requests"].get("/v1/embeddings", 0)
    return (
        f"reply p50 {ms(empty['p50_ms'])} with the graph empty, {ms(graph['p50_ms'])} with it "
        f"(+{row['added_p50_ms']:.1f} ms); CPU per reply p50 {ms(empty['cpu_p50_ms'])} / "
        f"{ms(graph['cpu_p50_ms'])} (+{row['added_cpu_p50_ms']:.1f} ms); p99 {ms(empty['p99_ms'])} / "
        f"{ms(graph['p99_ms'])}; {graph['with_relevant_memory']} of {row['messages']} replies with Relevant "
        f"Memory; {chat} chat and {embeddings} embeddings requests; RSS {row['rss_mib_before_graph']:.0f} MiB "
        f"before the graph was read, {row['rss_mib_graph_loaded']:.0f} MiB with it"
    )


def graph_cost_cell(output: str) -> str:
    cells = []
    for row in json_lines(output):
        replies, indexing = row["replies"], row["indexing"]
        cells.append(
            f"batchTokens {row['batch_tokens']}: indexing {indexing['prompt']:,} prompt / {indexing['completion']:,} "
            f"completion tokens in {indexing['calls']} calls, {row['indexing_share_of_reply_prompt']:.1%} of the "
            f"replies' {replies['prompt']:,} prompt tokens; {row['answered_from_graph']} of {row['questions']} "
            f"questions answered from the graph"
        )
    return "; ".join(cells)


def quality_cell(output: str) -> str:
    return "; ".join(f"{row['label']}: R@5 {row['r5']:.2f}, R@10 {row['r10']:.2f}" for row in json_lines(output))


def locomo_cell(output: str) -> str:
    [row] = json_lines(output)
    categories = ", ".join(f"{name} {value:.2f}" for name, value in row["per_category"].items())
    return (
        f"R_frac {row['r_frac']:.3f} ({categories}); system messages p50 {row['system_chars_p50']:,.0f} chars; "
        f"retrieval p50 {ms(row['retrieval_ms_p50'])}, round trip p50 {ms(row['round_trip_ms_p50'])}"
    )


def holdout_cell(output: str) -> str:
    [row] = json_lines(output)
    return "; ".join(
        f"{weight['weight']} {weight['shipped']:g}: {weight['mean_by_value'][str(weight['shipped'])]:.3f}, "
        f"held out {weight['held_out_mean']:.3f}"
        for weight in row["weights"]
    )


def prompt_prefix_cell(output: str) -> str:
    [row] = json_lines(output)
    return (
        f"each request begins with the one before: median {row['median']:.1%}, lowest {row['min']:.1%}; "
        f"{row['overall']:.1%} of all characters sent"
    )


def small_window_cell(output: str) -> str:
    [row] = json_lines(output)
    return (
        f"{row['answered']}/{row['turns']} turns answered; {row['refusals']} refused, {row['cuts']} cut "
        f"({row['refused_or_cut_after_learning']} after the window was learned: {row['learned_window'] or 'none'}, "
        f"{row['notices']} notices); early facts in the prompt when asked {row['facts_in_prompt']}/{row['facts_asked']}"
    )


def session_cache_cell(output: str) -> str:
    [row] = json_lines(output)
    bounded, unbounded = row["bounded"], row["unbounded"]
    return (
        f"resident memory +{bounded['growth_mib']:.1f} MiB, {bounded['cached']} sessions kept "
        f"(every chat kept: +{unbounded['growth_mib']:.1f} MiB)"
    )


def plan(quick: bool) -> list[Part]:
    """What runs, in order: the sizes of the issue, or smaller ones with `--quick`."""
    sessions = (10, 1_000)
    memories = (1_000, 10_000) if quick else (1_000, 100_000)
    messages = 100 if quick else 300
    chats, per_chat = (20, 5) if quick else (50, 10)
    retrieval_sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    compaction_sizes = (100, 1_000) if quick else (100, 1_000, 5_000)
    turns = 100 if quick else 500
    rag_sizes, rag_queries = ((100,), 5) if quick else ((100, 1_000), 20)
    graph_documents, graph_messages = (100, 30) if quick else (1_000, 100)

    parts = [
        Part(
            "pipeline",
            "pipeline overhead per message, instant model",
            f"session {length:,} messages, memory {items:,} items",
            f"bench.pipeline_overhead --session-length {length} --memory-items {items} --messages {messages} --json",
            pipeline_cell,
        )
        for length in sessions
        for items in memories
    ]
    parts += [
        Part(
            "telegram",
            "end to end through the fake Bot API",
            f"{backend}, {chats} chats x {per_chat} messages",
            f"bench.telegram_throughput --chats {chats} --per-chat {per_chat} --backends {backend}",
            telegram_cell,
        )
        for backend in ("ptb", "aiogram")
    ]
    rounds, per_round = (3, 20) if quick else (15, 40)
    parts += [
        Part(
            "minimal",
            "beside a minimal assistant (same three calls), instant model",
            f"bot {setting}; {rounds} x {per_round} messages, burst {chats} chats x {per_chat}",
            f"bench.minimal_assistant --settings {setting} --rounds {rounds} --per-round {per_round} "
            f"--chats {chats} --per-chat {per_chat} --json",
            minimal_cell,
        )
        for setting in ("shipped", "lexical")
    ]
    long_session, growth_rounds = (1_000, 3) if quick else (5_000, 5)
    parts.append(
        Part(
            "growth",
            "cost as the session grows, compaction off, lexical only",
            f"session {long_session:,} against 10 messages",
            f"bench.session_growth --lengths 10 {long_session} --rounds {growth_rounds} --json",
            growth_cell,
        )
    )
    parts += [
        Part(
            "retrieval",
            "memory retrieval per message",
            f"{size:,} items",
            f"bench.memory_retrieval {size} --json",
            retrieval_cell,
        )
        for size in retrieval_sizes
    ]
    items_size = 10_000 if quick else 100_000
    parts.append(
        Part(
            "itemsdb",
            "memory items: PostgreSQL beside SQLite",
            f"{items_size:,} items",
            f"bench.database_items {items_size} --json",
            database_items_cell,
        )
    )
    parts += [
        Part(
            "compaction",
            "compaction time",
            f"session of {size:,} messages",
            f"bench.compaction_figures --turns 0 --sizes {size} --json",
            compaction_cell,
        )
        for size in compaction_sizes
    ]
    parts.append(
        Part(
            "compaction",
            "compaction time",
            f"{turns}-turn conversation, 8k-token model",
            f"bench.compaction_figures --turns {turns} --sizes --json",
            compaction_cell,
        )
    )
    parts += [
        Part(
            "rag",
            "RAG indexing (LightRAG, instant model)",
            f"{size:,} documents",
            f"bench.rag_throughput --sizes {size} --queries {rag_queries}",
            rag_cell,
        )
        for size in rag_sizes
    ]
    parts.append(
        Part(
            "rag",
            "what the knowledge graph adds to a reply, instant model",
            f"graph empty vs {graph_documents:,} indexed exchanges",
            f"bench.rag_reply_latency --documents {graph_documents} --messages {graph_messages}",
            rag_reply_cell,
        )
    )
    parts.append(
        Part(
            "graphcost",
            "knowledge graph indexing tokens beside the replies' (fake model, real pipeline)",
            "50 exchanges in 5 sittings",
            "bench.graph_indexing_cost --json",
            graph_cost_cell,
        )
    )
    parts.append(
        Part(
            "locomo",
            "memory recall in the prompt (LoCoMo dev, real bot)",
            "2 conversations, 40 questions each" if quick else "5 conversations, 776 questions",
            "bench.locomo --json" + (" --conversations 2 --questions 40" if quick else ""),
            locomo_cell,
        )
    )
    if not quick:
        parts.append(
            Part(
                "holdout",
                "memory weights, each LoCoMo conversation held out (in process)",
                "4 weights x 3 values x 5 conversations",
                "bench.locomo_holdout --json",
                holdout_cell,
            )
        )
    prefix_turns = 20 if quick else 50
    parts.append(
        Part(
            "prefix",
            "prompt prefix kept from the request before",
            f"{prefix_turns}-turn conversation",
            f"bench.prompt_prefix --turns {prefix_turns} --json",
            prompt_prefix_cell,
        )
    )
    session_chats = 1_000 if quick else 10_000
    parts.append(
        Part(
            "sessions",
            "session cache",
            f"{session_chats:,} chats x 4 messages",
            f"bench.session_cache --chats {session_chats} --json",
            session_cache_cell,
        )
    )
    parts.append(
        Part(
            "quality",
            "memory recall of the evidence turn",
            "40 questions in 640 turns",
            "bench.memory_quality --json",
            quality_cell,
        )
    )
    window_turns = 100 if quick else 500
    parts += [
        Part(
            "window",
            "a 6,000-token model the registry gives 128,000 (lexical memory)",
            f"endpoint that {endpoint}, {window_turns} turns",
            f"bench.small_window --turns {window_turns} --behaviours {behaviour} --json",
            small_window_cell,
        )
        for behaviour, endpoint in (
            ("refuse", "refuses"),
            ("cut", "cuts silently"),
            ("unlimited", "has no window (messages of every kind)"),
        )
    ]
    return parts


def run_child(args: list[str], timeout: float) -> Finished:
    """Run `python args...` from the repository root; the peak RSS covers it and every process it waited for."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=err, start_new_session=True)
        timer = threading.Timer(timeout, os.killpg, (process.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)  # already reaped: Popen must not wait again
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Finished(process.returncode, out.read(), err.read(), seconds, usage.ru_maxrss / 1024)


def run_part(part: Part) -> Row:
    finished = run_child(["-m", *part.module.split()], PART_TIMEOUT_SECONDS)
    if finished.returncode != 0:
        last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
        figures = f"FAILED (exit {finished.returncode}): {last[:200]}"
        return Row(part.label, part.case, figures, None, finished.seconds, ok=False)
    try:
        figures = part.parse(finished.stdout)
    except (ValueError, KeyError, json.JSONDecodeError) as error:
        return Row(part.label, part.case, f"FAILED to read the output: {error}", None, finished.seconds, ok=False)
    return Row(part.label, part.case, figures, finished.peak_rss_mib, finished.seconds, ok=True)


def machine() -> str:
    """nproc, CPU model, RAM and Python version, as one line."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    total_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cores} CPUs ({model or platform.processor() or 'unknown CPU'}), {total_kib / 1024**2:.0f} GiB RAM, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def table(rows: list[Row]) -> str:
    lines = ["| benchmark | case | figures | peak RSS | took |", "|---|---|---|---:|---:|"]
    for row in rows:
        rss = f"{row.peak_rss_mib:.0f} MiB" if row.peak_rss_mib is not None else "–"
        lines.append(f"| {row.label} | {row.case} | {row.figures} | {rss} | {row.seconds:.0f} s |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes in all")
    names = sorted({part.benchmark for quick in (True, False) for part in plan(quick=quick)})
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"some of: {', '.join(names)}")
    arguments = parser.parse_args()
    parts = [part for part in plan(arguments.quick) if not arguments.only or part.benchmark in arguments.only]
    command = " ".join(["python -m bench.run_all", *sys.argv[1:]])
    started = time.perf_counter()
    rows = []
    for number, part in enumerate(parts, 1):
        print(f"[{number}/{len(parts)}] {part.label}: {part.case} ...", file=sys.stderr, flush=True)
        row = run_part(part)
        print(f"    {row.figures} ({row.seconds:.0f} s)", file=sys.stderr, flush=True)
        rows.append(row)
    print(f"`{command}` on {machine()}; {time.perf_counter() - started:.0f} s in all.\n")
    print(table(rows))
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
