"""Synthetic conversations in LoCoMo's format, of other lengths and styles than the five of the dev set.

The memory pack's size must hold on any conversation, not only on the ones it was measured on. This
writes a file that `bench.locomo --data FILE` runs as it runs LoCoMo: each conversation a list of dated
sessions of turns (`dia_id`, `speaker`, `text`) and questions whose evidence is the turns that state
the answer. Made from a fixed seed, so every run writes the same file.

Three styles, each at the lengths asked for (`--turns`, the number of turns of each conversation):

- `chat`: two friends, short turns, mostly small talk around the facts (LoCoMo's own style, shorter);
- `notes`: one person telling an assistant about their days in long turns of several sentences, the
  assistant answering briefly (a personal assistant's memory);
- `group`: four people in many short sessions of a few turns each.

The facts are drawn from small tables of people, pets, places, jobs and pastimes; questions ask one fact
(single-hop), when something happened (temporal) or two facts together (multi-hop).

    .venv/bin/python -m bench.synthetic_conversations --out /tmp/synthetic.json [--turns 150 600 1500]
    .venv/bin/python -m bench.locomo --data /tmp/synthetic.json --json
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 20261126
PEOPLE = ["Maya", "Tomas", "Priya", "Owen", "Lena", "Kofi", "Ines", "Ravi", "Greta", "Hugo", "Amara", "Felix"]
PETS = [("dog", "Biscuit"), ("cat", "Pepper"), ("parrot", "Mango"), ("rabbit", "Clover"), ("dog", "Juno")]
PLACES = ["Denver", "Lisbon", "Osaka", "Portland", "Edinburgh", "Austin", "Vancouver", "Seville", "Nairobi"]
JOBS = ["nurse", "carpenter", "data analyst", "teacher", "chef", "bus driver", "architect", "librarian"]
PASTIMES = ["pottery", "rock climbing", "chess", "birdwatching", "salsa dancing", "baking sourdough", "kayaking"]
SMALL_TALK = [
    "How has your week been?",
    "Haha, that sounds like me.",
    "Totally agree with you on that.",
    "The weather has been so strange lately.",
    "I need more coffee today, honestly.",
    "That's great to hear!",
    "Work has been busy but fine.",
    "Let's catch up again soon.",
    "I watched a good film last night, nothing special though.",
    "Oh nice, tell me more next time.",
    "Same here, the traffic was terrible.",
    "I'm trying to sleep earlier these days.",
]
ASSISTANT_REPLIES = ["Noted.", "That sounds lovely.", "Got it, thanks for telling me.", "Good to know.", "I see."]


class Writer:
    """One conversation as it is written: sessions of turns, and the questions about what they state."""

    def __init__(self, sample_id: str, random_: random.Random, start: datetime) -> None:
        self.sample_id = sample_id
        self.random = random_
        self.when = start
        self.sessions: list[tuple[datetime, list[dict[str, str]]]] = []
        self.questions: list[dict[str, Any]] = []

    def new_session(self, gap_days: int) -> None:
        self.when += timedelta(days=gap_days, hours=self.random.randint(0, 8))
        self.sessions.append((self.when, []))

    def say(self, speaker: str, text: str) -> str:
        number = len(self.sessions)
        turns = self.sessions[-1][1]
        dia_id = f"D{number}:{len(turns) + 1}"
        turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
        return dia_id

    def ask(self, category: int, question: str, answer: str, evidence: list[str]) -> None:
        self.questions.append({"question": question, "answer": answer, "evidence": evidence, "category": category})

    def as_locomo(self) -> dict[str, Any]:
        conversation: dict[str, Any] = {}
        for number, (when, turns) in enumerate(self.sessions, start=1):
            conversation[f"session_{number}_date_time"] = when.strftime("%-I:%M %p on %-d %B, %Y").lower()
            conversation[f"session_{number}"] = turns
        return {"sample_id": self.sample_id, "conversation": conversation, "qa": self.questions}


def fact_lines(writer: Writer, speaker: str, listener: str) -> list[tuple[str, Any]]:
    """The facts a speaker may state, each with what asks about it."""
    pick = writer.random.choice
    kind, pet = pick(PETS)
    place, job, pastime = pick(PLACES), pick(JOBS), pick(PASTIMES)
    moved = pick(PLACES)
    day = writer.when.strftime("%-d %B %Y")
    return [
        (
            f"We finally adopted a {kind}, {listener}! We named the little one {pet}.",
            lambda d: writer.ask(4, f"What is the name of {speaker}'s {kind}?", pet, [d]),
        ),
        (
            f"I started a new job as a {job} this week, it's a big change.",
            lambda d: writer.ask(4, f"What job did {speaker} start?", job, [d]),
        ),
        (
            f"I just got back from a trip to {place}, the food there was amazing.",
            lambda d: writer.ask(2, f"When did {speaker} travel to {place}?", f"the days before {day}", [d]),
        ),
        (
            f"I've been getting into {pastime} on weekends, it really clears my head.",
            lambda d: writer.ask(4, f"Which hobby did {speaker} pick up for weekends?", pastime, [d]),
        ),
        (
            f"Big news: we're moving to {moved} next month for my partner's work.",
            lambda d: writer.ask(2, f"When is {speaker} moving to {moved}?", f"the month after {day}", [d]),
        ),
    ]


def conversation(style: str, turns: int, number: int, random_: random.Random) -> dict[str, Any]:
    people = random_.sample(PEOPLE, 4 if style == "group" else 2)
    writer = Writer(f"synthetic-{style}-{turns}-{number}", random_, datetime(2022, 3, 1, 9, 0))
    session_turns = {"chat": 24, "notes": 10, "group": 6}[style]
    first_facts: dict[str, str] = {}  # a speaker's first stated fact, joined later into a multi-hop question
    written = 0
    while written < turns:
        writer.new_session(random_.randint(2, 12))
        for position in range(session_turns):
            if written >= turns:
                break
            speaker = people[0] if style == "notes" and position % 2 == 0 else random_.choice(people)
            if style == "notes" and position % 2 == 1:
                writer.say("Assistant", random_.choice(ASSISTANT_REPLIES))
                written += 1
                continue
            listener = random_.choice([p for p in people if p != speaker] or ["there"])
            if random_.random() < 0.18:
                text, ask = random_.choice(fact_lines(writer, speaker, listener))
                if style == "notes":
                    text = " ".join([random_.choice(SMALL_TALK), text, random_.choice(SMALL_TALK)])
                dia_id = writer.say(speaker, text)
                if random_.random() < 0.5:
                    ask(dia_id)
                if speaker in first_facts and random_.random() < 0.4:
                    writer.ask(
                        1,
                        f"What two things has {speaker} told about their life so far?",
                        "both facts",
                        [first_facts[speaker], dia_id],
                    )
                first_facts.setdefault(speaker, dia_id)
            else:
                chatter = random_.choice(SMALL_TALK)
                if style == "notes":
                    chatter = " ".join(random_.sample(SMALL_TALK, 3))
                writer.say(speaker, chatter)
            written += 1
    return writer.as_locomo()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--turns", type=int, nargs="+", default=[150, 600, 1500])
    parser.add_argument("--styles", nargs="+", default=["chat", "notes", "group"])
    arguments = parser.parse_args()
    random_ = random.Random(SEED)
    conversations = [
        conversation(style, turns, number, random_)
        for number, (style, turns) in enumerate((s, t) for t in arguments.turns for s in arguments.styles)
    ]
    arguments.out.write_text(json.dumps(conversations, indent=1))
    print(f"{arguments.out}: {len(conversations)} conversations, {sum(len(c['qa']) for c in conversations)} questions")


if __name__ == "__main__":
    main()
