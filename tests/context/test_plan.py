"""ContextPlan: each part's share and real use, the room the conversation has, and the planner's two steps."""

from __future__ import annotations

from pathlib import Path

from bot.context.budget import ContextBudget
from bot.context.estimator import TokenEstimator
from bot.context.plan import BUILT_PARTS, ContextPlan, PartUse, PromptPart, part_of
from bot.context.planner import ContextPlanner
from bot.domain.conversation import SUMMARY_HEADER
from bot.domain.message import Message
from bot.domain.session import AgentSession
from bot.domain.turn import PromptSection
from bot.llm.models import ModelRegistry, ModelSpec, Tier
from bot.settings import CompactionConfig, MemoryConfig, RagConfig, RuntimeConfig


def small_budget() -> ContextBudget:
    return ContextBudget.for_model(ModelSpec("m", 4000, 500, Tier.BALANCED, True), CompactionConfig())


def test_parts_built_later_are_kept_their_share_and_disabled_ones_nothing() -> None:
    plan = ContextPlan(small_budget(), (PartUse(PromptPart.TOOL_SCHEMAS, 150),), messages=0)
    assert plan.reserved == {"system": 320, "memory": 480, "rag": 320, "tools": 150}
    assert plan.room_for_messages == 3200 - 1270
    assert plan.keep_recent_tokens == 482 and plan.summary_cap_tokens == 480
    disabled = ContextPlan(small_budget(), (), 0, memory_enabled=False, rag_enabled=False)
    assert disabled.reserved == {"system": 320, "memory": 0, "rag": 0, "tools": 0}


def test_a_plan_adds_up_real_use_not_shares() -> None:
    uses = (PartUse(PromptPart.HISTORY, 40), PartUse(PromptPart.TOOL_SCHEMAS, 100))
    plan = ContextPlan(small_budget(), uses, messages=2).with_prompt(
        [PartUse(PromptPart.INSTRUCTIONS, 60), PartUse(PromptPart.LONG_TERM, 30), PartUse(PromptPart.MEMORY_PACK, 20)]
    )
    assert plan.prompt_measured and plan.total_tokens == 250 and plan.used_percent == 8
    assert plan.share_used("memory") == 50 and plan.given("memory") == 480
    assert plan.message_tokens == 40 and not plan.over


def test_each_section_of_the_system_prompt_counts_in_its_part_and_draws_on_that_share() -> None:
    shares = {section: part_of(section).share for section in PromptSection}
    assert shares == {
        PromptSection.PERSONA: "system", PromptSection.TIME: "system", PromptSection.PEOPLE: "system",
        PromptSection.SKILLS: "system", PromptSection.SKILL: "system", PromptSection.LONG_TERM: "memory",
        PromptSection.MEMORY_PACK: "memory", PromptSection.DAILY_NOTES: "memory",
        PromptSection.RELEVANT_MEMORY: "rag",
    }  # fmt: skip
    made_each_turn = {section for section in PromptSection if section.made_each_turn}
    assert made_each_turn == {
        PromptSection.TIME,
        PromptSection.MEMORY_PACK,
        PromptSection.DAILY_NOTES,
        PromptSection.RELEVANT_MEMORY,
    }


def test_the_planner_measures_the_conversation_then_the_prompt_parts_and_keeps_them(tmp_path: Path) -> None:
    models = tmp_path / "models.json"
    models.write_text('{"default": {"maxInputTokens": 4000, "maxOutputTokens": 500, "tier": "balanced"}}')
    planner = ContextPlanner(TokenEstimator(exact=False), ModelRegistry.load(models))
    session = AgentSession.new("test", "1")
    session.messages = [Message.system(f"{SUMMARY_HEADER}\nearlier"), Message.user("hello"), Message.assistant("hi")]
    config = RuntimeConfig()

    before = planner.plan(session, "m", config)
    assert not before.prompt_measured and before.messages == 3
    assert before.summary_tokens > 0 and before.recent_tokens > 0
    assert all(before.used(part) == 0 for part in BUILT_PARTS)

    parts = {
        PromptSection.PERSONA: "You are helpful.",
        PromptSection.LONG_TERM: "# Memory\n\n## Long-term Memory\nlikes tea",
        PromptSection.RELEVANT_MEMORY: "",
    }
    fitted, after = planner.fit_prompt(session, before, parts, "m")
    assert fitted == parts
    estimator = planner.estimator
    assert after.used(PromptPart.INSTRUCTIONS) == estimator.text(parts[PromptSection.PERSONA], "m")
    assert after.used(PromptPart.LONG_TERM) == estimator.text(parts[PromptSection.LONG_TERM], "m")
    assert (session.metadata.last_prompt_tokens or {})["instructions"] == after.used(PromptPart.INSTRUCTIONS)

    # Asked again (as /status and /context do): the same figures, from the session's metadata.
    again = planner.plan(session, "m", config)
    assert again == after

    off = planner.plan(session, "m", RuntimeConfig(memory=MemoryConfig(enabled=False), rag=RagConfig(enabled=False)))
    assert off.given("memory") == 0 and off.given("rag") == 0
