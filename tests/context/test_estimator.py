"""The token estimator: characters per token, calibrated per model by what the provider reports."""

from __future__ import annotations

from typing import Any

from bot.context.estimator import (
    DEFAULT_CHARS_PER_TOKEN,
    IMAGE_STAND_IN_CHARS,
    UNKNOWN_SIZE_IMAGE_TOKENS,
    TokenEstimator,
    image_tokens,
    payload_chars,
    payload_text,
)
from bot.domain.message import MediaRef, Message, ToolCall
from bot.llm.wire import WireSize


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
    estimator.observe_request("m", WireSize.of(wire), None, prompt_tokens=1008)  # 4000 chars / (1008 − 2×4) = 4.0
    assert abs(estimator.ratio_for("m") - (0.1 * 4.0 + 0.9 * 3.5)) < 1e-9


def photo_message(text: str, width: int | None = None, height: int | None = None) -> Message:
    return Message.user(text).model_copy(
        update={"media": [MediaRef(path="media/telegram:1/photo.jpg", width=width, height=height)]}
    )


def test_an_image_counts_as_openai_bills_it() -> None:
    assert image_tokens(512, 512) == 85 + 170  # one tile
    assert image_tokens(800, 600) == 85 + 170 * 4
    assert image_tokens(1280, 720) == 85 + 170 * 6
    assert image_tokens(2048, 4096) == 1105  # OpenAI's own example: scaled to 1024x2048, then 768x1536
    assert image_tokens(None, None) == UNKNOWN_SIZE_IMAGE_TOKENS == image_tokens(1024, 1024)


def test_a_message_counts_its_text_and_its_images() -> None:
    estimator = TokenEstimator()
    assert estimator.message(photo_message("x" * 35, 1280, 720)) == 4 + 10 + 1105
    assert estimator.message(photo_message("x" * 35)) == 4 + 10 + UNKNOWN_SIZE_IMAGE_TOKENS
    stand_in = estimator.text("x" * IMAGE_STAND_IN_CHARS)
    assert estimator.message(photo_message("x" * 35, 1280, 720), images_sent=False) == 4 + 10 + stand_in


def test_only_the_images_still_sent_count_as_images() -> None:
    estimator = TokenEstimator()
    conversation = []
    for n in range(3):
        conversation += [photo_message("x" * 35, 512, 512), Message.assistant(f"{n}" * 35)]
    text_only = 6 * (4 + 10)
    stand_in = estimator.text("x" * IMAGE_STAND_IN_CHARS)
    assert estimator.messages(conversation) == text_only + 3 * 255
    assert estimator.messages(conversation, images_in_prompt=1) == text_only + 255 + 2 * stand_in
    assert estimator.messages(conversation, images_in_prompt=0) == text_only + 3 * stand_in


def test_image_parts_count_in_a_payload_and_keep_the_request_out_of_calibration() -> None:
    estimator = TokenEstimator()
    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    wire = [{"role": "user", "content": [{"type": "text", "text": "x" * 70}, image]}]
    assert estimator.payload(wire, None) == 4 + 20 + UNKNOWN_SIZE_IMAGE_TOKENS
    big: list[dict[str, Any]] = [{"role": "system", "content": "s" * 4000}, *wire]
    estimator.observe_request("m", WireSize.of(big), None, prompt_tokens=2000)  # the image's tokens are the provider's
    assert estimator.ratio_for("m") == DEFAULT_CHARS_PER_TOKEN and estimator.samples_for("m") == 0


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
