"""The token estimator: characters per token, calibrated per model by what the provider reports."""

from __future__ import annotations

from bot.compaction.estimator import DEFAULT_CHARS_PER_TOKEN, TokenEstimator, payload_chars, payload_text
from bot.domain.message import Message, ToolCall


def test_estimates_count_text_tool_calls_and_framing() -> None:
    estimator = TokenEstimator()
    assert estimator.text("x" * 35) == 10
    call = ToolCall(id="1", name="abc", arguments="x" * 32)
    assert estimator.message(Message.assistant("", tool_calls=[call])) == 4 + 10
    wire = [{"role": "user", "content": "x" * 70}]
    assert estimator.payload(wire, None) == 4 + 20


def test_reported_usage_moves_the_models_ratio_by_a_moving_average() -> None:
    estimator = TokenEstimator()
    for _ in range(60):  # the provider counts 5 characters a token for this model
        estimator.calibrate("m", sent_chars=5000, prompt_tokens=1000)
    assert abs(estimator.ratio_for("m") - 5.0) < 0.01
    assert estimator.ratio_for("other") == DEFAULT_CHARS_PER_TOKEN  # per model
    assert estimator.text("x" * 500, "m") in (100, 101)
    assert estimator.samples_for("m") == 60


def test_one_sample_moves_the_ratio_a_tenth_of_the_way() -> None:
    estimator = TokenEstimator()
    estimator.calibrate("m", sent_chars=4500, prompt_tokens=1000)
    assert abs(estimator.ratio_for("m") - (0.1 * 4.5 + 0.9 * 3.5)) < 1e-9


def test_small_and_implausible_samples_are_ignored() -> None:
    estimator = TokenEstimator()
    estimator.calibrate("m", sent_chars=300, prompt_tokens=100)  # mostly framing
    estimator.calibrate("m", sent_chars=100, prompt_tokens=5000)  # e.g. an image in the prompt
    estimator.calibrate("m", sent_chars=0, prompt_tokens=5000)
    assert estimator.ratio_for("m") == DEFAULT_CHARS_PER_TOKEN


def test_observe_request_calibrates_from_the_wire_payload() -> None:
    estimator = TokenEstimator()
    wire = [{"role": "system", "content": "s" * 2000}, {"role": "user", "content": "u" * 2000}]
    estimator.observe_request("m", wire, None, prompt_tokens=1008)  # 4000 chars / (1008 − 2×4) = 4.0
    assert abs(estimator.ratio_for("m") - (0.1 * 4.0 + 0.9 * 3.5)) < 1e-9


def test_payload_chars_is_the_length_of_the_payload_text() -> None:
    wire: list[dict[str, object]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "content": "file text"},
    ]
    tools: list[dict[str, object]] = [{"type": "function", "function": {"name": "read", "parameters": {}}}]
    assert payload_chars(wire, tools) == len(payload_text(wire, tools))
    assert payload_chars(wire) == len(payload_text(wire))
