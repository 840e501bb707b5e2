"""The parameters of the daemon's own methods (``chat.*``, ``sessions.*``, ``daemon.*``,
``settings.*``, ``ollama.*``, ``rpc.subscribe``), one model each; ``memory.*`` are in
``memory_params``."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from navi_desktop.daemon.params import JsonValue, Params, Says, integer, text
from navi_desktop.limits import MAX_CHAT_TEXT
from navi_desktop.ollama_host import valid_host
from navi_desktop.paths import PROFILE_PATTERN

MAX_TITLE = 500

Profile = Annotated[
    str,
    Field(pattern=PROFILE_PATTERN),
    Says(
        "a profile name: 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit"
    ),
]
SessionId = text(128, what="a session id")
ChatText = text(MAX_CHAT_TEXT)
Title = text(MAX_TITLE)
MaybeTitle = text(MAX_TITLE, blank=True)  # blank: no title (or the default one)


def _host(value: str) -> str:
    """The same check a saved setting gets: a host the ``ollama`` client could not parse
    failed deep inside it ("internal error"), and a port past 65535 was quietly dropped."""
    if (host := valid_host(value)) is None:
        raise ValueError("not a host")
    return host


Host = Annotated[
    str,
    Field(min_length=1, max_length=2048),
    AfterValidator(_host),
    Says("a host: a URL like http://127.0.0.1:11434, or host:port"),
]
ModelName = text(256, what="a model name")
Topic = text(64, what="a topic")
Limit = integer(1, 1000)


class ProfileParams(Params):
    """Every method takes ``profile`` (the TUI adds it to each call); None: the configured one."""

    profile: Profile | None = None


class NoParams(ProfileParams):
    pass


class ChatSend(ProfileParams):
    text: ChatText
    session_id: SessionId | None = None  # None: a new session
    incognito: bool = False


class ChatSession(ProfileParams):
    """``chat.regenerate``, ``chat.cancel``."""

    session_id: SessionId


class SessionsCreate(ProfileParams):
    title: MaybeTitle | None = None
    incognito: bool = False


class SessionsList(ProfileParams):
    limit: Limit = 100


class SessionById(ProfileParams):
    """``sessions.show``, ``.delete``, ``.export``."""

    id: SessionId


class SessionsRename(ProfileParams):
    id: SessionId
    title: Title


class SessionsKeep(ProfileParams):
    id: SessionId
    title: MaybeTitle | None = None


class SessionsEnd(ProfileParams):
    id: SessionId | None = None
    all: bool = False

    @model_validator(mode="after")
    def _one(self) -> SessionsEnd:
        if self.all and self.id is not None:
            raise PydanticCustomError("params", "give the parameter 'id' or 'all', not both")
        if not self.all and self.id is None:
            raise PydanticCustomError(
                "params", "missing required parameter 'id' (or 'all': true for every session)"
            )
        return self


SettingKey = Annotated[
    str,
    Field(pattern=r"^[a-z_]+(\.[A-Za-z0-9_.-]+)+$", max_length=200),
    Says('a dotted setting key ("memory.budget_tokens")'),
]


class SettingsSet(ProfileParams):
    changes: Annotated[
        dict[SettingKey, JsonValue],
        Field(min_length=1, max_length=64),
        Says('an object of 1 to 64 setting keys ("memory.budget_tokens") and values'),
    ]


class OllamaHost(ProfileParams):
    """``ollama.models``, ``ollama.test``: another server than the configured one, to try it;
    ``embedding``: the configured embedding host instead of the chat host."""

    host: Host | None = None
    embedding: bool = False


class OllamaPull(ProfileParams):
    model: ModelName
    embedding: bool = False  # on the embedding host


class Topics(Params):
    """``rpc.subscribe``, ``rpc.unsubscribe``."""

    topics: Annotated[
        list[Topic],
        Field(max_length=32),
        Says('a list of up to 32 topic names ("memory", "sessions", "*" for all)'),
    ]
