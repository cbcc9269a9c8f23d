"""The counters `/metrics` serves move with what the bot does."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bot.app import Application
from tests.fakes.openai_server import FakeOpenAI, Fault, Reply, ToolCallSpec, Usage
from tests.fakes.recording_channel import RecordingChannel
from tests.pipeline.test_conversation import say


def samples(services: Application) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = services.metrics.render().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_messages_model_calls_tokens_tools_and_errors_are_counted(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")], usage=Usage(100, 7)),
        Reply(text="done", usage=Usage(150, 3)),
        Fault.status(400, "bad request"),
    )
    await say(services, channel, "1", "look around")
    await say(services, channel, "1", "again")
    values = samples(services)
    model = (("model", "gpt-4o-mini"),)
    assert values[("bot_messages_in_total", (("channel", "test"),))] == 2
    assert values[("bot_replies_out_total", (("channel", "test"),))] == 1
    assert values[("bot_model_calls_total", (*model, ("outcome", "ok")))] == 2
    assert values[("bot_model_calls_total", (*model, ("outcome", "bad_request")))] == 1
    assert values[("bot_model_tokens_total", (("direction", "prompt"), *model))] == 250
    assert values[("bot_model_tokens_total", (("direction", "completion"), *model))] == 10
    assert values[("bot_tool_calls_total", (("outcome", "ok"), ("tool", "list_dir")))] == 1
    assert values[("bot_errors_total", (("kind", "model_bad_request"),))] == 1
    assert values[("bot_pipeline_stage_seconds_count", (("stage", "ToolLoop"),))] == 2


async def test_queue_depth_per_chat_is_visible_while_messages_wait(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    fake_openai.set_responder(lambda request: Reply(text="slow", delay=0.3))
    for text in ["a", "b", "c"]:
        await services.router.accept(channel.message("7", text), channel)
    assert samples(services)[("bot_chat_queue_depth", (("chat", "test:7"),))] == 3
    await services.router.dispatcher.drain()
    assert not any(name == "bot_chat_queue_depth" for name, _ in samples(services))


async def test_health_reports_channels_scheduler_and_the_last_model_call(
    services: Application, channel: RecordingChannel, fake_openai: FakeOpenAI
) -> None:
    from bot.app import health_report

    services.add_channels([channel])
    healthy, details = health_report(services)
    assert not healthy and details["scheduler"] is False and details["lastModelCall"] is None
    await services.start()
    fake_openai.script(Fault.status(401, "bad key"))
    await say(services, channel, "1", "hi")
    healthy, details = health_report(services)
    assert healthy and details["channels"] == {"test": True}
    assert details["lastModelCall"]["outcome"] == "auth"  # type: ignore[index]
