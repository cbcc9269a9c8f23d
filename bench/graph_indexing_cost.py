"""What indexing the knowledge graph costs beside the replies, over a 50-exchange conversation.

A bot built as `python -m bot` builds it (shipped settings: the embedded LightRAG, hybrid retrieval, the
bundled offline embedder) talks with the user through the real router, pipeline and `openai` client,
against the fake OpenAI-compatible server on 127.0.0.1, which answers LightRAG's extraction prompts
as a model would (tests/rag/helpers.py) and echoes the rest, and reports each call's usage as a
provider does (about four characters a token). The 50 exchanges are one or two sentences each about
the user's life, a few of them small talk ("thanks, got it"), in five sittings of ten. The
scheduler's timing is played without waiting for it: after each exchange the bot's tick runs
(`flush_if_due`: a full batch is indexed at once), and after each sitting what the tick does once
the chat has been quiet `idleFlushSeconds` (`flush_all`).

Run twice: as shipped (a chat's exchanges batched to fill LightRAG's chunk) and with `batchTokens: 0`
(one document, one extraction call, per exchange). The tokens are the bot's own account
(`TokenSpending`, from the usage the server reported), by purpose. After the conversation the
session is cleared (`/new`) and questions about it are asked in the same chat: each answer's
`# Relevant Memory` must hold the fact, with one model call per reply.

Printed (one JSON line per run): prompt and completion tokens and calls for replies and indexing,
indexing's prompt tokens as a share of the replies', the questions answered from the graph, and the
median round trip of a question (the graph's retrieval is most of it: the fake answers at once).

Run: `.venv/bin/python -m bench.graph_indexing_cost [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.app import Application
from bot.llm.spending import TokenCount
from bot.rag.service import RELEVANT_MEMORY_HEADER
from tests.conftest import env_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.recording_channel import RecordingChannel
from tests.rag.helpers import lightrag_responder, rag_of, say

SITTINGS = [
    [
        "Hi!",
        "My sister Marta moved to Lisbon last week; she works at the Gulbenkian museum now.",
        "She says the flat is tiny but it has a view of the Tagus river.",
        "I'm thinking of visiting her in October, maybe for the Lisbon half marathon.",
        "I've been running three times a week with my friend Jonas since the spring.",
        "Jonas wants us to try the Berlin marathon next year, which sounds crazy to me.",
        "ok, thanks",
        "My knee has been sore after long runs, so I booked a physio called Dr Amara Okafor.",
        "The appointment is on Thursday at 8 in the morning, before work.",
        "Work is busy: we are launching the Orion billing system at Kestrel Labs in two weeks.",
    ],
    [
        "Good morning",
        "The Orion launch moved to the 14th because the payments team found a bug in refunds.",
        "My manager Priya asked me to lead the rollout for the Nordic customers.",
        "I need to write a runbook for the rollout by Monday, I keep putting it off.",
        "Our dog Biscuit ate one of my running shoes last night, so I need new Asics.",
        "Biscuit is a three-year-old beagle, he goes to Greenfield Clinic for his checkups.",
        "got it, thank you so much",
        "We are also redoing the kitchen, the builder is a guy named Tomas from Porto Renovations.",
        "Tomas says the new countertops arrive on the 20th, the oak ones we picked.",
        "My partner Elena prefers the green tiles, I like the white ones better.",
    ],
    [
        "Hey",
        "Elena's birthday is on November 3rd and I have no idea what to get her yet.",
        "She has been wanting a pottery class, there is a studio called Clay Corner near us.",
        "Her favourite restaurant is Ostra, the seafood place on Harbour Street.",
        "I'm learning the cello with a teacher called Ingrid, lessons are on Saturdays.",
        "Ingrid says I should practice the Bach prelude in G major every day for twenty minutes.",
        "perfect, makes sense",
        "My father Rafael turns seventy in December, the family is planning a dinner in Seville.",
        "My brother Hugo is organising it, he lives in Madrid with his wife Nadia.",
        "Hugo asked me to make a slideshow of old family photos for the dinner.",
    ],
    [
        "Hello again",
        "I started a course on Spanish grammar at the Instituto Cervantes, Tuesday evenings.",
        "The teacher, Lucia, gives a lot of homework on the subjunctive.",
        "I want to be fluent enough to give a short speech at my father's dinner.",
        "The physio said my knee problem is runner's knee and gave me hip exercises.",
        "I have to pause running for two weeks, which means Jonas will train alone.",
        "alright, cool",
        "Kestrel Labs is opening an office in Oslo and Priya asked if I'd move there for a year.",
        "Elena could work remotely from Oslo, her design studio Northlight is fully remote.",
        "We would have to find someone to look after Biscuit or take him along.",
    ],
    [
        "Hi",
        "The Orion rollout went well, only two Nordic customers had issues with invoices.",
        "Priya wants the Oslo decision by the end of the month.",
        "I bought the pottery class at Clay Corner for Elena's birthday, six Wednesday evenings.",
        "The kitchen is finished except for the tiles, we went with the green ones in the end.",
        "I finished the slideshow for my father's dinner, it has two hundred photos.",
        "thanks a lot, that helps",
        "My friend Sofia from university is visiting from Toronto in January.",
        "Sofia works as a marine biologist at the Bamfield station studying kelp forests.",
        "I want to take her to the aquarium and to Ostra for dinner.",
    ],
]
# Questions about the conversation, and what `# Relevant Memory` must hold for each.
QUESTIONS = [
    ("Where does Marta work now?", "Gulbenkian"),
    ("What is the name of my physio?", "Okafor"),
    ("Who is building our kitchen?", "Tomas"),
    ("Who teaches me the cello?", "Ingrid"),
    ("What does Sofia do for a living?", "Bamfield"),
    ("Who is my manager at Kestrel Labs?", "Priya"),
]


async def run(batch_tokens: int | None) -> dict[str, Any]:
    fake = FakeOpenAI().start()
    fake.set_responder(lightrag_responder)
    with tempfile.TemporaryDirectory(prefix="graph-cost-") as folder:
        workspace = Path(folder) / "workspace"
        if batch_tokens is not None:
            (workspace / "preferences").mkdir(parents=True)
            config = {"rag": {"batchTokens": batch_tokens}}
            (workspace / "preferences" / "runtime-config.json").write_text(json.dumps(config))
        bot = Application(env_for(workspace, fake))
        channel = RecordingChannel()
        rag = rag_of(bot)
        try:
            spending = bot.llm.spending
            assert spending is not None
            exchanges = 0
            after_first_sitting: dict[str, TokenCount] = {}
            for sitting in SITTINGS:
                for text in sitting:
                    await say(bot, channel, "1", text)
                    exchanges += 1
                    await rag.flush_if_due()  # the scheduler's tick: a full batch goes at once
                await asyncio.sleep(0.2)  # the last exchange's after-reply systems queue it
                await rag.flush_all()  # the chat has been quiet `idleFlushSeconds`
                if not after_first_sitting:
                    after_first_sitting = {key: replace(count) for key, count in spending.total.by_purpose.items()}
            replies, indexing = (replace(spending.total.by_purpose[key]) for key in ("reply", "indexing"))
            status = await rag.status()

            await say(bot, channel, "1", "/new")
            answered = []
            round_trips: list[float] = []
            for question, fact in QUESTIONS:
                before = len(fake.chat_requests())
                sent = time.perf_counter()
                await say(bot, channel, "1", question)
                round_trips.append((time.perf_counter() - sent) * 1000)
                requests = fake.chat_requests()[before:]
                system = " ".join(str(m.get("content")) for m in requests[-1]["messages"] if m.get("role") == "system")
                relevant = system.split(RELEVANT_MEMORY_HEADER, 1)[1] if RELEVANT_MEMORY_HEADER in system else ""
                answered.append({"question": question, "found": fact in relevant, "model_calls": len(requests)})
        finally:
            await bot.stop()
            await rag.close()
            fake.stop()
    return {
        "batch_tokens": "shipped" if batch_tokens is None else batch_tokens,
        "exchanges": exchanges,
        "indexed": status.indexed,
        "replies": {"prompt": replies.prompt, "completion": replies.completion, "calls": replies.calls},
        "indexing": {"prompt": indexing.prompt, "completion": indexing.completion, "calls": indexing.calls},
        "indexing_share_of_reply_prompt": indexing.prompt / replies.prompt,
        "first_sitting_share_of_reply_prompt": (
            after_first_sitting["indexing"].prompt / after_first_sitting["reply"].prompt
        ),
        "indexing_share_of_reply_completion": indexing.completion / replies.completion,
        "questions": len(answered),
        "answered_from_graph": sum(1 for a in answered if a["found"]),
        "one_model_call_per_reply": all(a["model_calls"] == 1 for a in answered),
        "missed": [a["question"] for a in answered if not a["found"]],
        "question_round_trip_ms_p50": round(statistics.median(round_trips), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per run (the default prints a summary)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for batch_tokens in (None, 0):
        row = asyncio.run(run(batch_tokens))
        if args.json:
            print(json.dumps(row))
            continue
        r, i = row["replies"], row["indexing"]
        print(
            f"batchTokens {row['batch_tokens']}: {row['exchanges']} exchanges, {row['indexed']} indexed; "
            f"replies {r['prompt']:,} prompt / {r['completion']:,} completion tokens in {r['calls']} calls; "
            f"indexing {i['prompt']:,} / {i['completion']:,} in {i['calls']} calls: "
            f"{row['indexing_share_of_reply_prompt']:.1%} of the replies' prompt tokens "
            f"({row['first_sitting_share_of_reply_prompt']:.1%} after the first ten exchanges); "
            f"{row['answered_from_graph']} of {row['questions']} questions answered from the graph, "
            f"one model call per reply: {row['one_model_call_per_reply']}; "
            f"question round trip p50 {row['question_round_trip_ms_p50']} ms"
        )


if __name__ == "__main__":
    main()
