"""Memory recall on LoCoMo: does the model that answers actually see the evidence?

The protocol of `shared/bench-data/README.md`, through the real bot: for each conversation a fresh
workspace whose episodic item files hold one item per dialog turn (written before the bot starts, as a
hand edit would be), the real `python -m bot run` with the default runtime-config (only the owner
allowed), python-telegram-bot against the fake Bot API and the `openai` client against the fake model
on 127.0.0.1. The fake model answers LightRAG's extraction prompts with the entities and relations of the
text, as a real model does, so the knowledge graph fills with the questions' exchanges (the memory folder
is put back after each question, the graph's folder is not). The bench waits until
`/status` shows every item embedded, then sends each question of categories 1-4 as the owner's Telegram
message, collects every `[D<n>:<m>]` in the system (and developer) messages of the model request that
carries it, and scores the fraction of the question's evidence found there. After each question: `/new`,
and the memory folder is put back as it was.

Printed: R_frac overall and per category, the median size of the system messages in characters (and
their quartiles and largest), the median round trip (message pushed to reply seen) and the median memory
retrieval time (the bot's own `[Context] Memory pack` log line), and how many prompts carried the knowledge
graph's `# Relevant Memory` and its median size. `--json` adds one JSON line of figures.

`--data` takes any file in LoCoMo's format, such as the synthetic conversations of
`bench.synthetic_conversations`.

`--database` runs the bot with `BOT_DATABASE_URL` on a throw-away PostgreSQL (the tests' server, with
pgvector): each conversation's item files go into a fresh database with `python -m bot migrate`, and the
items and the notes are put back after each question in the database rather than in the folder.

Run: `.venv/bin/python -m bench.locomo [--conversations N] [--only conv-44,...] [--questions N] [--json]
[--data FILE] [--database]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from bot.domain.text import fingerprint_of
from bot.rag.service import RELEVANT_MEMORY_HEADER
from tests.fakes.openai_server import FakeOpenAI, message_text
from tests.fakes.telegram_server import FakeTelegram
from tests.postgres_server import PostgresServer, create_database, running_server
from tests.rag.helpers import lightrag_responder
from tests.reliability.bot_process import start_bot, stop

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "locomo-dev.json"
OWNER = 4242
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DIA_ID = re.compile(r"\[(D\d+:\d+)\]")
RETRIEVAL_LOG = re.compile(r"\[Context\] Memory pack: .*?, ([\d.]+) ms\)")
EVIDENCE_PART = re.compile(r"D:?(\d+):(\d+)")
REPLY_TIMEOUT = 60.0
DUMP = False


def session_time(text: str) -> datetime:
    """`1:56 pm on 8 May, 2023` as an aware datetime (UTC, the bench bot's zone)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(question: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for entry in question.get("evidence", []):
        found.update(f"D{session}:{turn}" for session, turn in EVIDENCE_PART.findall(entry))
    return found


def write_items(conversation: dict[str, Any], memory: Path) -> int:
    """Step 1: every turn an EPISODIC item in the day file of its session."""
    dialog = conversation["conversation"]
    sessions = sorted(
        (int(key.split("_")[1]) for key in dialog if re.fullmatch(r"session_\d+", key)),
    )
    by_day: dict[str, list[str]] = defaultdict(list)
    count = 0
    for number in sessions:
        when = session_time(dialog[f"session_{number}_date_time"])
        for turn in dialog[f"session_{number}"]:
            content = f"[{turn['dia_id']}] {turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                content += f" [shares a photo: {turn['blip_caption']}]"
            item = {
                "id": f"locomo-{turn['dia_id'].replace(':', '-')}",
                "layer": "EPISODIC",
                "type": "dialog_turn",
                "content": content,
                "createdAt": when.isoformat(),
                "updatedAt": when.isoformat(),
                "confidence": 0.8,
                "salience": 0.5,
                "tags": [],
                "references": [],
                "fingerprint": fingerprint_of(content),
                "source": f"telegram:{OWNER}",
            }
            by_day[when.date().isoformat()].append(json.dumps(item, ensure_ascii=False))
            count += 1
    episodic = memory / "items" / "episodic"
    episodic.mkdir(parents=True, exist_ok=True)
    for day, lines in by_day.items():
        (episodic / f"{day}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return count


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def restore(folder: Path, files: dict[Path, bytes]) -> None:
    """The memory folder as in `files`: what the bot added removed, what it changed put back."""
    for path in sorted(folder.rglob("*"), reverse=True):
        if path.is_file() and path not in files:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()) and not any(p.is_relative_to(path) for p in files):
            path.rmdir()
    for path, data in files.items():
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(
        message_text(message.get("content"))
        for message in request.get("messages", [])
        if message.get("role") in ("system", "developer")
    )


def relevant_memory(system: str) -> str:
    """The knowledge graph's `# Relevant Memory` section of the system text (empty when it has none)."""
    start = system.find(RELEVANT_MEMORY_HEADER)
    if start < 0:
        return ""
    end = system.find("\n# ", start + len(RELEVANT_MEMORY_HEADER))
    return system[start:] if end < 0 else system[start:end]


def last_user_text(request: dict[str, Any]) -> str:
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return message_text(users[-1].get("content")) if users else ""


class Conversation:
    """One conversation's bot, driven through Telegram."""

    def __init__(self, telegram: FakeTelegram, model: FakeOpenAI, workspace: Path, log: Path) -> None:
        self.telegram = telegram
        self.model = model
        self.workspace = workspace
        self.log = log

    def send(self, text: str) -> float:
        """Push the owner's message; the seconds until the bot's reply to it arrived."""
        before = len(self.telegram.sent_messages(OWNER))
        started = time.perf_counter()
        self.telegram.push_message(OWNER, text)
        self.telegram.wait_until(
            lambda: len(self.telegram.sent_messages(OWNER)) > before, timeout=REPLY_TIMEOUT, what=f"reply to {text!r}"
        )
        return time.perf_counter() - started

    def status(self) -> str:
        self.send("/status")
        return self.telegram.sent_messages(OWNER)[-1].text

    def wait_for_vectors(self, items: int, timeout: float) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            found = re.search(r"vectors (\d+)/(\d+)", self.status())
            if found and int(found[1]) >= items:
                return time.perf_counter() - started
            time.sleep(1.0)
        print(f"warning: not every item embedded after {timeout:.0f} s", file=sys.stderr)
        return time.perf_counter() - started


class DatabaseMemory:
    """A conversation's memory in a database of its own (`--database`): copied in from the item files, and put
    back as it was copied after each question."""

    def __init__(self, server: PostgresServer, workspace: Path, sample: str) -> None:
        self.url = create_database(server, "locomo_" + re.sub(r"[^a-z0-9]", "_", sample.lower()))
        environment = {key: value for key, value in os.environ.items() if not key.startswith("BOT_")}
        migrated = subprocess.run(
            [sys.executable, "-m", "bot", "migrate"],
            env={**environment, "BOT_WORKSPACE": str(workspace), "BOT_DATABASE_URL": self.url, "BOT_TIMEZONE": "UTC"},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        print(migrated.stdout.strip(), file=sys.stderr)
        shutil.rmtree(workspace / "memory")  # the bot reads the database alone
        self._sql(
            "CREATE TABLE locomo_items AS SELECT scope, file, position, item, line FROM memory_items;"
            " CREATE TABLE locomo_documents AS SELECT * FROM memory_documents"
        )

    def _sql(self, statement: str) -> None:
        async def run() -> None:
            connection = await asyncpg.connect(self.url)
            try:
                await connection.execute(statement)
            finally:
                await connection.close()

        asyncio.run(run())

    def restore(self) -> None:
        """The items and documents as copied in: what the bot added is gone, what it changed is put back."""
        self._sql(
            "BEGIN; DELETE FROM memory_documents; INSERT INTO memory_documents SELECT * FROM locomo_documents;"
            " DELETE FROM memory_items;"
            " INSERT INTO memory_items (scope, file, position, item, line) OVERRIDING SYSTEM VALUE"
            " SELECT scope, file, position, item, line FROM locomo_items; COMMIT"
        )


def run_conversation(
    conversation: dict[str, Any], questions_limit: int | None, root: Path, server: PostgresServer | None = None
) -> dict[str, Any]:
    workspace = root / conversation["sample_id"]
    memory = workspace / "memory"
    items = write_items(conversation, memory)
    runtime_config = {"access": {"allowedUsers": [OWNER]}}
    # Written before `migrate` copies it: the database's configuration is the one a bot on it reads.
    (workspace / "preferences").mkdir(parents=True, exist_ok=True)
    (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(runtime_config))
    database = None if server is None else DatabaseMemory(server, workspace, conversation["sample_id"])
    step_one = snapshot(memory) if database is None else {}
    log = root / f"{conversation['sample_id']}.log"
    questions = [q for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
    if questions_limit:
        questions = questions[:questions_limit]
    scores: list[tuple[int, float]] = []
    system_chars: list[int] = []
    graph_chars: list[int] = []
    round_trips: list[float] = []
    with FakeTelegram() as telegram, FakeOpenAI() as model:
        process = start_bot(
            workspace, "ptb", model, telegram, log, runtime_config,
            None if database is None else {"BOT_DATABASE_URL": database.url},
        )  # fmt: skip
        try:
            bot = Conversation(telegram, model, workspace, log)
            warm_up = bot.wait_for_vectors(items, timeout=1800)
            bot.send("/new")
            for question in questions:
                model.reset()
                # LightRAG's extraction prompts answered as a real model answers them: each question's
                # exchange, indexed after its reply, fills the knowledge graph, which later prompts recall.
                model.set_responder(lightrag_responder)
                round_trips.append(bot.send(question["question"]))
                carrying = [r for r in model.chat_requests() if question["question"] in last_user_text(r)]
                text = system_text(carrying[-1]) if carrying else ""
                found = set(DIA_ID.findall(text))
                wanted = evidence_ids(question)
                scores.append((question["category"], len(wanted & found) / len(wanted)))
                system_chars.append(len(text))
                graph_chars.append(len(relevant_memory(text)))
                if DUMP:
                    (root / "last-system-prompt.txt").write_text(text)
                bot.send("/new")
                if database is None:
                    restore(memory, step_one)
                else:
                    database.restore()
        finally:
            stop(process)
    retrieval_ms = [float(ms) for ms in RETRIEVAL_LOG.findall(log.read_text(errors="replace"))]
    return {
        "sample": conversation["sample_id"],
        "items": items,
        "warm_up_s": warm_up,
        "scores": scores,
        "system_chars": system_chars,
        "graph_chars": graph_chars,
        "round_trips": round_trips,
        "retrieval_ms": retrieval_ms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions of each")
    parser.add_argument("--only", default="", help="only these conversations (sample ids, comma-separated)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--database", action="store_true", help="the bot on PostgreSQL (BOT_DATABASE_URL)")
    args = parser.parse_args()
    conversations = json.loads(args.data.read_text())
    if args.only:
        conversations = [c for c in conversations if c["sample_id"] in args.only.split(",")]
    conversations = conversations[: args.conversations]
    results = []
    with tempfile.TemporaryDirectory(prefix="locomo-") as folder, contextlib.ExitStack() as stack:
        server = stack.enter_context(running_server()) if args.database else None
        for conversation in conversations:
            result = run_conversation(conversation, args.questions, Path(folder), server)
            results.append(result)
            mean = statistics.mean(score for _, score in result["scores"])
            print(
                f"{result['sample']}: {len(result['scores'])} questions, R_frac {mean:.3f}, system messages p50 "
                f"{statistics.median(result['system_chars']):.0f} chars, "
                f"{result['items']} items embedded in {result['warm_up_s']:.0f} s",
                file=sys.stderr,
            )
        shutil.rmtree(folder, ignore_errors=True)
    scores = [entry for result in results for entry in result["scores"]]
    overall = statistics.mean(score for _, score in scores)
    per_category = {
        name: statistics.mean(score for category, score in scores if category == number)
        for number, name in CATEGORIES.items()
        if any(category == number for category, _ in scores)
    }
    sizes = [c for result in results for c in result["system_chars"]]
    chars = statistics.median(sizes)
    quartiles = statistics.quantiles(sizes, n=4) if len(sizes) > 1 else [chars, chars, chars]
    graph = [c for result in results for c in result["graph_chars"]]
    round_trip = statistics.median(t for result in results for t in result["round_trips"]) * 1000
    retrieval = [ms for result in results for ms in result["retrieval_ms"]]
    retrieval_p50 = statistics.median(retrieval) if retrieval else float("nan")
    where = "PostgreSQL (BOT_DATABASE_URL)" if args.database else "the workspace's files"
    print(f"LoCoMo evidence recall in the prompt: {len(scores)} questions, {len(results)} conversations, on {where}")
    print(f"  R_frac overall {overall:.3f}")
    for name, value in per_category.items():
        print(f"  R_frac {name:<11} {value:.3f}")
    print(
        f"  system messages p50 {chars:.0f} chars (quartiles {quartiles[0]:.0f} / {quartiles[2]:.0f}, largest "
        f"{max(sizes)}); round trip p50 {round_trip:.0f} ms; "
        f"retrieval p50 {retrieval_p50:.1f} ms"
    )
    print(
        f"  # Relevant Memory (the knowledge graph) in {sum(1 for c in graph if c)} of {len(graph)} prompts; "
        f"p50 {statistics.median(graph):.0f} chars, largest {max(graph)}"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "bench": "locomo",
                    "database": args.database,
                    "questions": len(scores),
                    "r_frac": round(overall, 4),
                    "per_category": {name: round(value, 4) for name, value in per_category.items()},
                    "system_chars_p50": chars,
                    "system_chars_quartiles": [round(quartiles[0]), round(quartiles[2])],
                    "system_chars_max": max(sizes),
                    "graph_chars_p50": statistics.median(graph),
                    "prompts_with_graph": sum(1 for c in graph if c),
                    "round_trip_ms_p50": round(round_trip, 1),
                    "retrieval_ms_p50": round(retrieval_p50, 1),
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
