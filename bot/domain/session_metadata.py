"""`SessionMetadata`: what the bot keeps about one chat besides its messages, typed.

It is the `metadata` object of the session file, written as it always was: camelCase keys in the order
they were first set (the order of the file they were read from), a key at its default left out, so
a file read and written again is the same bytes. Reading is lenient, because the file is hand-editable:
a key of the wrong type is dropped to its default (the loader is told, to log it), and a key this
version does not know is kept and written back as it was.
"""

from __future__ import annotations

from typing import Any, Final, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
    with_config,
)
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict  # pydantic validates only this TypedDict before Python 3.12

# The validation context key under which `SessionMetadata` reports the keys it dropped: pass a list
# there (`{METADATA_PROBLEMS: []}`) to get `(key, reason)` pairs back.
METADATA_PROBLEMS: Final = "metadataProblems"


@with_config(ConfigDict(extra="allow"))
class ProviderUsage(TypedDict, total=False):
    """Token counts the provider reported for one model call (`Usage.to_json_dict`)."""

    promptTokens: int
    completionTokens: int
    # Of the prompt tokens, those served from the provider's prompt cache (absent in older files).
    cachedTokens: int
    model: str


@with_config(ConfigDict(extra="allow"))
class CompactionEventRecord(TypedDict, total=False):
    """One finished compaction as kept in the session (`CompactionEvent.to_json_dict`)."""

    status: str
    reason: str
    startedAt: str
    model: str
    tokensBefore: int
    tokensAfter: int
    messagesBefore: int
    messagesAfter: int
    removed: int
    kept: int
    durationMs: float
    stages: list[str]
    summaryCalls: int
    method: str
    error: str


# `lastPromptTokens`: the tokens each prompt part took in the last request (`{part: tokens}`), and under
# `cut` the parts cut to their share.
PromptTokens = dict[str, int | list[str]]


class SessionMetadata(BaseModel):
    """Per-chat state the pipeline, compaction, skills and `/status` keep; one field per key on disk.

    Assign a field to change it (values are replaced, not changed in place); set it back to its default
    to take it out of the file. Copy it with `copy.deepcopy`, which keeps what is written in step with
    the fields (`model_copy(deep=True)` copies the two apart).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    # The quarantined file a fresh session replaced, until the user was told (then cleared).
    recovered_from: str | None = None
    # Set once a message of the chat came from a group, so every prompt names each speaker.
    is_group: bool = False
    last_prompt_tokens: PromptTokens | None = None
    # The provider-reported usage of the last model call.
    last_usage: ProviderUsage | None = None
    # The skill switched on for this chat (`/skill`, `load_skill`).
    active_skill: str | None = None
    # The latest compaction summary (also the first message of the session).
    summary: str | None = None
    compaction_count: int = 0
    # `last_usage` as it was at the last compaction, so one report does not trigger two compactions.
    usage_at_last_compaction: ProviderUsage | None = None
    # Messages compacted away without a summary (the summarizer failed), counted in the visible note.
    messages_dropped_without_summary: int = 0
    # The newest `compaction.keptEvents` finished compactions, newest last. A tuple: the events are
    # replaced, never appended to in place.
    compaction_events: tuple[CompactionEventRecord, ...] = ()
    # The archive's size when this file was written, kept in a long session's file (which is rewritten
    # only every so many turns): the messages archived after that point are the ones to read back.
    archived_bytes: int = 0

    # The object as written to the file, kept in step by validation and `__setattr__`: the on-disk key of
    # each field not at its default and each unknown key, in the order they were read, then first set.
    # It holds the same value objects as the fields, so saving a session serializes one ready dict.
    _in_file: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _leniently(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        if isinstance(data, SessionMetadata):
            return handler(data)
        problems: list[tuple[str, str]] = []
        if not isinstance(data, dict):
            problems.append(("metadata", f"not an object but {type(data).__name__}"))
            data = {}
        try:
            metadata = handler(data)
        except ValidationError as error:
            bad = {str(detail["loc"][0]): detail["msg"] for detail in error.errors() if detail["loc"]}
            problems += bad.items()
            data = {key: value for key, value in data.items() if key not in bad}
            metadata = handler(data)
        fields, extra, in_file = metadata.__dict__, metadata.__pydantic_extra__ or {}, metadata._in_file
        for key in data:
            name = _FIELD_NAME.get(key)
            if name is None:
                in_file[key] = extra[key]
            elif fields[name] != _DEFAULT[name]:
                in_file[_FILE_KEY[name]] = fields[name]
        if problems and isinstance(info.context, dict) and isinstance(info.context.get(METADATA_PROBLEMS), list):
            info.context[METADATA_PROBLEMS].extend(problems)
        return metadata

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name.startswith("_"):
            return
        key = _FILE_KEY.get(name, name)  # not a field: an unknown key (`extra="allow"`)
        if name in _DEFAULT and value == _DEFAULT[name]:
            self._in_file.pop(key, None)  # like a key popped from a dict: set again, it goes last
        else:
            self._in_file[key] = value

    @model_serializer(mode="plain")
    def _as_in_file(self) -> dict[str, Any]:
        # Read without `__getattr__` (a private attribute through it costs more than the rest of a save).
        in_file: dict[str, Any] = self.__pydantic_private__["_in_file"]  # type: ignore[index]
        return dict(in_file)  # a copy: a caller of `model_dump` may change what it gets


# Field name -> its key on disk; its default; and the field of a key as read (on-disk key or name).
_FILE_KEY: Final[dict[str, str]] = {name: field.alias or name for name, field in SessionMetadata.model_fields.items()}
_DEFAULT: Final[dict[str, Any]] = {
    name: field.get_default(call_default_factory=True) for name, field in SessionMetadata.model_fields.items()
}
_FIELD_NAME: Final[dict[str, str]] = {
    **{key: name for name, key in _FILE_KEY.items()},
    **{name: name for name in _FILE_KEY},
}
