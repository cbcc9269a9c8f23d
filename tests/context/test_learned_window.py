"""A model whose real window is smaller than the registry says: the window is learned from the endpoint's
refusal (or from the silent cut its usage shows), kept in the workspace, and every prompt is planned for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.app import Application
from bot.llm.client import ChatRequest, LlmClient
from bot.llm.errors import LlmError, LlmFailure
from bot.llm.windows import REFUSAL, SILENT_CUT, LearnedWindows, window_from_refusal
from tests.compaction.helpers import is_summary_request
from tests.conftest import env_for
from tests.context.small_window import MODEL, WINDOW_TOKENS, prepare_workspace, run_small_window
from tests.fakes.openai_server import FakeOpenAI, Fault
from tests.fakes.recording_channel import RecordingChannel

# The refusals real providers send for a prompt too long, as they word them, and the window each states.
REFUSALS = [
    # OpenAI (and Groq, DeepSeek, Azure)
    (
        "Error code: 400 - {'error': {'message': \"This model's maximum context length is 128000 tokens. However, "
        "your messages resulted in 130412 tokens. Please reduce the length of the messages.\", 'type': "
        "'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}",
        128000,
    ),
    # OpenAI's newer models
    ("Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300012 tokens.", 272000),
    # vLLM
    (
        "Error code: 400 - {'object': 'error', 'message': \"This model's maximum context length is 6048 tokens. "
        "However, you requested 6616 tokens (568 in the messages, 6048 in the completion). Please reduce the "
        "length of the messages or completion.\", 'type': 'BadRequestError', 'param': None, 'code': 400}",
        6048,
    ),
    (
        "The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that "
        "`max_model_len` is no smaller than the number of text tokens.",
        4096,
    ),
    # llama.cpp server: the window is a field of the error object
    (
        "Error code: 400 - {'error': {'code': 400, 'message': 'the request exceeds the available context size. "
        "try increasing the context size or enable context shift', 'type': 'exceed_context_size_error', "
        "'n_prompt_tokens': 14429, 'n_ctx': 8192}}",
        8192,
    ),
    # OpenRouter
    (
        "This endpoint's maximum context length is 8192 tokens. However, you requested about 9013 tokens (8013 of "
        'text input, 1000 in the output). Please reduce the length of either one, or use the "middle-out" '
        "transform to compress your prompt automatically.",
        8192,
    ),
    # Anthropic
    (
        "Error code: 400 - {'type': 'error', 'error': {'type': 'invalid_request_error', 'message': 'prompt is too "
        "long: 208310 tokens > 200000 maximum'}}",
        200000,
    ),
    # Mistral
    ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", 32768),
]


@pytest.mark.parametrize(("text", "window"), REFUSALS)
def test_the_window_is_read_from_each_providers_refusal(text: str, window: int) -> None:
    assert window_from_refusal(text) == window


def test_a_refusal_without_a_figure_states_no_window() -> None:
    assert window_from_refusal("Request Entity Too Large") is None
    assert window_from_refusal("the request exceeds the available context size, try increasing it") is None


async def test_the_client_reads_the_window_of_a_refusal_through_the_real_library(fake_openai: FakeOpenAI) -> None:
    client = LlmClient("sk-test", fake_openai.base_url)
    llama_cpp = (
        "the request exceeds the available context size. try increasing the context size or enable context shift"
    )
    fake_openai.script(
        Fault.context_length_exceeded(6000, 6013),
        # llama.cpp's server has sent this refusal with status 500: it is still a context-length refusal.
        Fault.status(500, llama_cpp, error_type="exceed_context_size_error"),
    )
    request = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "hello"}], max_retries=0)
    try:
        with pytest.raises(LlmError) as refused:
            await client.complete(request)
        assert refused.value.failure is LlmFailure.CONTEXT_LENGTH and refused.value.window_tokens == 6000
        with pytest.raises(LlmError) as llama:
            await client.complete(request)
        assert llama.value.failure is LlmFailure.CONTEXT_LENGTH and llama.value.window_tokens is None
    finally:
        await client.close()


def test_a_learned_window_is_kept_per_endpoint_and_model_and_read_at_start(tmp_path: Path) -> None:
    told: list[tuple[str, str]] = []
    file = tmp_path / "state" / "model-windows.json"
    windows = LearnedWindows(file, "http://127.0.0.1:11434/v1/", lambda key, text: told.append((key, text)))
    assert windows.learn(MODEL, 6000, REFUSAL, believed=128000)
    assert not windows.learn(MODEL, 7000, REFUSAL, believed=6000)  # not smaller than planned: nothing new
    assert [key for key, _ in told] == [f"window:http://127.0.0.1:11434/v1:{MODEL}"]
    assert "6,000 tokens" in told[0][1] and "128,000" in told[0][1]

    again = LearnedWindows(file, "http://127.0.0.1:11434/v1")
    learned = again.get(MODEL)
    assert learned is not None and (learned.tokens, learned.how) == (6000, REFUSAL)
    assert again.get("another-model") is None
    assert LearnedWindows(file, "https://api.openai.com/v1").get(MODEL) is None  # another endpoint: its own
    assert json.loads(file.read_text())["http://127.0.0.1:11434/v1"][MODEL]["tokens"] == 6000


async def test_a_refusing_endpoint_is_refused_once_and_every_turn_is_answered(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    run = await run_small_window(workspace_dir, fake_openai, "refuse", turns=60)

    assert run.answered == run.turns == 60
    assert run.refusals == 1 and run.refused_or_cut_after_learning == 0
    assert run.learned_window == WINDOW_TOKENS
    assert run.largest_prompt_tokens <= WINDOW_TOKENS
    assert run.facts_in_prompt == run.facts_asked  # told in the first turns, in the prompt when asked for
    (notice,) = run.notices
    assert "6,000 tokens" in notice and "learned from a refusal" in notice
    kept = json.loads((workspace_dir / "state" / "model-windows.json").read_text())
    assert kept[fake_openai.base_url.rstrip("/")][MODEL]["tokens"] == WINDOW_TOKENS
    # The tool definitions are planned for the window too: fewer tools, within their share of it.
    chats = [request for request in fake_openai.chat_requests() if not is_summary_request(request)]
    first, last = chats[0], chats[-1]
    assert 0 < len(last["tools"]) < len(first["tools"])
    assert len(json.dumps(last["tools"])) / 4 <= 0.10 * WINDOW_TOKENS


async def test_an_endpoint_that_cuts_silently_is_found_out_by_its_usage(
    workspace_dir: Path, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    run = await run_small_window(workspace_dir, fake_openai, "cut", turns=60)

    assert run.answered == run.turns == 60
    # One cut prompt: the one that shows the window (a cut of one message out of ~6,000 tokens).
    assert run.refusals == 0 and run.cuts == 1 and run.refused_or_cut_after_learning == 0
    assert run.learned_window is not None and run.learned_window <= WINDOW_TOKENS
    assert run.facts_in_prompt == run.facts_asked
    (notice,) = run.notices
    assert f"learned from a {SILENT_CUT}" in notice
    told = [record.message for record in caplog.records if f"(learned from a {SILENT_CUT})" in record.message]
    assert len(told) == 1 and "prompt tokens for a request of" in told[0]  # one log line, with what showed it
    assert "fewer than the least it could be" in told[0]
    # The cut prompt's usage was not taken for the tokenizer's: the estimate still counts as the endpoint does.
    assert run.chars_per_token >= 3.9


async def test_an_endpoint_without_a_window_teaches_none_from_messages_of_every_kind(
    workspace_dir: Path, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # Short, long, code, Russian and Chinese messages, which its usage counts at very different ratios.
    run = await run_small_window(workspace_dir, fake_openai, "unlimited", turns=60)

    assert run.answered == run.turns == 60
    assert run.refusals == run.cuts == 0
    assert run.learned_window is None and run.notices == []
    assert not [record for record in caplog.records if "has a window of" in record.message]
    assert run.facts_in_prompt == run.facts_asked
    # The messages did move the residuals (reported / estimated): the growth bound, not their spread, decides.
    assert run.spread.highest - run.spread.lowest > 0.05


async def test_status_and_context_show_the_learned_window(workspace_dir: Path, fake_openai: FakeOpenAI) -> None:
    prepare_workspace(workspace_dir)
    state = workspace_dir / "state"
    state.mkdir(parents=True, exist_ok=True)
    endpoint = fake_openai.base_url.rstrip("/")
    learned = {endpoint: {MODEL: {"tokens": 6000, "how": REFUSAL, "learnedAt": "2026-01-01T00:00:00+00:00"}}}
    (state / "model-windows.json").write_text(json.dumps(learned))
    services = Application(env_for(workspace_dir, fake_openai))
    channel = RecordingChannel()
    try:
        for command in ("/status", "/context"):
            await services.router.accept(channel.message("1", command), channel)
        status, context = await channel.wait_for("1", 2)
    finally:
        await services.stop()
    for reply in (status, context):
        assert "window 6,000 tokens (learned from a refusal; the registry says 128,000)" in reply


async def test_when_the_history_cannot_shrink_the_other_parts_do(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    # A first message, so there is no history to compact, and a MEMORY.md that fills memory's share.
    notes = "".join(
        f"- note {number}: the {number}th thing worth remembering about the garden.\n" for number in range(900)
    )
    services.workspace.memory.long_term_file.write_text(notes)
    fake_openai.script(Fault.status(413, "Request Entity Too Large"))  # states no window
    await services.router.accept(channel.message("1", "hello"), channel)
    (reply,) = await channel.wait_for("1", 1)

    assert reply == "echo: hello"
    refused, retried = fake_openai.chat_requests()
    assert len(retried["messages"][0]["content"]) < len(refused["messages"][0]["content"]) / 2
    learned = services.models.lookup("gpt-4o-mini").learned
    assert learned is not None and learned.how == REFUSAL


async def test_a_learned_window_lists_fewer_skills_rather_than_cutting_the_catalog(
    workspace_dir: Path, fake_openai: FakeOpenAI
) -> None:
    prepare_workspace(workspace_dir)
    for number in range(30):
        folder = workspace_dir / "skills" / f"skill{number:02d}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: skill{number:02d}\ndescription: {'word ' * 30}\n---\nDo it.\n")
    (workspace_dir / "state").mkdir(parents=True, exist_ok=True)
    learned = {fake_openai.base_url.rstrip("/"): {MODEL: {"tokens": 6000, "how": REFUSAL, "learnedAt": ""}}}
    (workspace_dir / "state" / "model-windows.json").write_text(json.dumps(learned))
    services = Application(env_for(workspace_dir, fake_openai))
    channel = RecordingChannel()
    try:
        await services.router.accept(channel.message("1", "hi"), channel)
        await channel.wait_for("1", 1)
    finally:
        await services.stop()
    prompt = fake_openai.chat_requests()[-1]["messages"][0]["content"]
    catalog = prompt[prompt.index("# Skills") :].split("\n\n")[0]
    assert "- skill00: word" in catalog and "more skills not listed" in catalog
    assert "cut here" not in prompt  # nothing of the first system message was cut to its share
