"""A summary request's reported usage: it calibrates the estimate when the prompt arrived whole, and a
reading that shows the endpoint cut it teaches the window instead, never the estimate."""

from __future__ import annotations

from pathlib import Path

from bot.compaction.summarizer import Summarizer
from bot.context.estimator import TokenEstimator
from bot.context.planner import ContextPlanner
from bot.domain.message import Message
from bot.llm.client import LlmClient
from bot.llm.models import ModelRegistry
from bot.llm.windows import SILENT_CUT, LearnedWindows
from bot.settings import CompactionConfig
from tests.fakes.openai_server import FakeOpenAI, Reply, Usage

MODEL = "local-model"
SUMMARY = (
    "## Goal\nThe user plans a trip to Lisbon in May and keeps a list of what to pack for it.\n"
    "## Progress\nThe hotel near the river is booked for five nights; the museums are chosen, one a day.\n"
    "## Next Steps\nBook the train from the airport and ask about the tram passes for the week.\n"
)


def summarizer_for(fake_openai: FakeOpenAI, tmp_path: Path) -> tuple[Summarizer, ContextPlanner, ModelRegistry]:
    models_file = tmp_path / "models.json"
    models_file.write_text('{"default": {"maxInputTokens": 32000, "maxOutputTokens": 1000, "tier": "balanced"}}')
    windows = LearnedWindows(tmp_path / "model-windows.json", fake_openai.base_url)
    models = ModelRegistry.load(models_file, windows=windows)
    planner = ContextPlanner(TokenEstimator(exact=False), models)
    return Summarizer(LlmClient("sk-test", fake_openai.base_url), models, planner), planner, models


async def summarize_long_history(summarizer: Summarizer) -> None:
    config = CompactionConfig()
    messages = [Message.user(f"Day {n}: we talked about the trip, the hotel and the museums. " * 8) for n in range(40)]
    await summarizer.summarize(messages, None, summarizer.plan(MODEL, config, 400, None), config)


async def test_a_summary_prompt_answered_whole_calibrates_the_estimate(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    summarizer, planner, models = summarizer_for(fake_openai, tmp_path)
    fake_openai.script(SUMMARY)  # usage: about 4 characters a token, as the prompt was sent
    await summarize_long_history(summarizer)
    assert planner.estimator.samples_for(MODEL) == 1
    assert models.lookup(MODEL).learned is None


async def test_a_summary_prompt_the_endpoint_cut_teaches_the_window_and_not_the_estimate(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    summarizer, planner, models = summarizer_for(fake_openai, tmp_path)
    ratio = planner.estimator.ratio_for(MODEL)
    # The endpoint kept 2,048 tokens of a prompt of several thousand and said nothing.
    fake_openai.script(Reply(text=SUMMARY, usage=Usage(prompt_tokens=2048, completion_tokens=40)))
    await summarize_long_history(summarizer)
    assert planner.estimator.samples_for(MODEL) == 0
    assert planner.estimator.ratio_for(MODEL) == ratio
    learned = models.lookup(MODEL).learned
    assert learned is not None and learned.tokens == 2048 and learned.how == SILENT_CUT
