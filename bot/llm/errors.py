"""What can go wrong when asking the model, in words the user can be told."""

from __future__ import annotations

from enum import StrEnum


class LlmFailure(StrEnum):
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    AUTH = "auth"
    CONTEXT_LENGTH = "context_length"
    BAD_REQUEST = "bad_request"
    BAD_RESPONSE = "bad_response"
    # The endpoint has no such API (404/405/501 on e.g. `/audio/transcriptions`).
    UNSUPPORTED = "unsupported"


_USER_MESSAGES = {
    LlmFailure.TIMEOUT: "The model did not answer in time.",
    LlmFailure.UNREACHABLE: "I could not reach the model.",
    LlmFailure.RATE_LIMITED: "The model is rate-limited right now.",
    LlmFailure.SERVER_ERROR: "The model service had an error.",
    LlmFailure.AUTH: "The model endpoint refused the API key; the operator needs to check OPENAI_API_KEY.",
    LlmFailure.CONTEXT_LENGTH: "The conversation is too long for the model.",
    LlmFailure.BAD_REQUEST: "The model refused the request.",
    LlmFailure.BAD_RESPONSE: "The model sent an answer I could not read.",
    LlmFailure.UNSUPPORTED: "The model endpoint does not offer this.",
}


class LlmError(Exception):
    """A model call failed after the client's retries; `failure` says how."""

    def __init__(self, failure: LlmFailure, detail: str, window_tokens: int | None = None) -> None:
        super().__init__(f"{failure.value}: {detail}")
        self.failure = failure
        self.detail = detail
        # The model's window as a context-length refusal stated it (None: it stated none).
        self.window_tokens = window_tokens

    @property
    def user_message(self) -> str:
        advice = "" if self.failure is LlmFailure.AUTH else " Your message is saved; send another message to try again."
        return _USER_MESSAGES[self.failure] + advice
