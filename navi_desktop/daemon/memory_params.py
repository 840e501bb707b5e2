"""The parameters of every ``memory.*`` method, one model each, named as the store method
names them.

On the wire a call is ``{"profile", "args": [...], "kwargs": {...}}`` (``RemoteMemory`` and
the TUI call the store's methods by proxy); ``positional`` says which names ``args`` fill.
Only what the caller gave is passed on, so the store's own defaults apply to the rest, and
``edit`` changes only the fields named. A method in ``memory_api.METHODS`` without a model
here is refused when the daemon registers it (:func:`model_for`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

from navi_desktop.daemon import memory_api
from navi_desktop.daemon.export_params import ExportFile
from navi_desktop.daemon.method_params import Limit, ProfileParams, SessionId
from navi_desktop.daemon.params import (
    INT64_MAX,
    Params,
    RowId,
    Says,
    Timestamp,
    Unit,
    file_path,
    integer,
    parse,
    text,
)
from navi_desktop.errors import InvalidInput
from navi_desktop.limits import MAX_ENTITY_NAME, MAX_LABEL, MAX_QUERY, MAX_VALUE
from navi_desktop.memory.entity_profiles import SORTS as ENTITY_SORTS
from navi_desktop.memory.listing import SORTS
from navi_desktop.memory.models import CATEGORIES, KINDS, SOURCES, STATUSES

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

MAX_PAGE = 10_000  # memories listed at once

Kind = Literal[KINDS]  # type: ignore[valid-type]
Category = Literal[CATEGORIES]  # type: ignore[valid-type]
Source = Literal[SOURCES]  # type: ignore[valid-type]
Status = Literal[STATUSES]  # type: ignore[valid-type]
Sort = Literal[tuple(SORTS)]  # type: ignore[valid-type]
SearchKind = Literal[(*KINDS, "message")]  # type: ignore[valid-type]
Value = text(MAX_VALUE)
Evidence = text(MAX_VALUE)
Label = text(MAX_LABEL)
Query = text(MAX_QUERY, blank=True)
Page = integer(1, MAX_PAGE)
Offset = integer(0, INT64_MAX)
SearchKinds = Annotated[
    list[SearchKind],
    Field(max_length=len(KINDS) + 1),
    Says("a list of kinds: " + ", ".join(f'"{k}"' for k in (*KINDS, "message"))),
]
Categories = Annotated[
    list[Category],
    Field(max_length=len(CATEGORIES)),
    Says("a list of categories: " + ", ".join(f'"{c}"' for c in CATEGORIES)),
]


class MemoryParams(Params):
    """A ``memory.*`` method's arguments; ``positional``: the names ``args`` fill, in order."""

    positional: ClassVar[tuple[str, ...]] = ()


MODELS: dict[str, type[MemoryParams]] = {}


def method(name: str) -> Any:
    def register(cls: type[MemoryParams]) -> type[MemoryParams]:
        MODELS[name] = cls
        return cls

    return register


@method("memory.add")
class Add(MemoryParams):
    positional = ("value",)
    value: Value
    kind: Kind = "fact"
    category: Category | None = None
    subject: Label | None = None
    key: Label | None = None
    evidence: Evidence | None = None
    source: Source = "user_explicit"
    confidence: Unit = 1.0
    session_id: SessionId | None = None
    message_from: RowId | None = None
    message_to: RowId | None = None
    status: Literal["active", "held"] = "active"
    pinned: bool = False
    review_reason: Label | None = None
    at: Timestamp | None = None
    expires_at: Timestamp | None = None  # a fact only, ahead of now (the store checks)

    @model_validator(mode="after")
    def _span(self) -> Add:
        start, end = self.message_from, self.message_to
        if start is not None and end is not None and start > end:
            raise PydanticCustomError(
                "params",
                "parameters 'message_from' and 'message_to' are reversed: {start} is after {end}",
                {"start": start, "end": end},
            )
        if (start is not None or end is not None) and self.session_id is None:
            raise PydanticCustomError(
                "params", "parameter 'session_id' is needed with 'message_from' or 'message_to'"
            )
        return self


class One(MemoryParams):
    """One memory, by id."""

    positional = ("memory_id",)
    memory_id: RowId


for _name in ("get", "versions", "history", "archive", "accept", "forget_preview"):
    MODELS[f"memory.{_name}"] = One


@method("memory.forget")
class Forget(MemoryParams):
    positional = ("memory_id",)
    memory_id: RowId
    scope: Literal["everywhere", "evidence"] = "everywhere"


@method("memory.compact")
class Compact(MemoryParams):
    pass


@method("memory.list")
class List(MemoryParams):
    kind: Kind | None = None
    category: Category | None = None
    status: Status | None = "active"  # None: every status
    pinned: bool | None = None
    sort: Sort = "updated"
    descending: bool = True
    limit: Page = 50
    offset: Offset = 0


@method("memory.search")
class Search(MemoryParams):
    positional = ("query",)
    query: Query
    limit: Limit = 10
    kinds: SearchKinds | None = None
    categories: Categories | None = None
    exclude_session: SessionId | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    include_inactive: bool = False


@method("memory.correct")
class Correct(MemoryParams):
    positional = ("memory_id", "value")
    memory_id: RowId
    value: Value
    evidence: Evidence | None = None


@method("memory.edit")
class Edit(MemoryParams):
    """Only the fields given change; ``None`` clears the ones that may be empty."""

    positional = ("memory_id",)
    memory_id: RowId
    value: Value = Field(default=None)
    category: Category | None = None
    subject: Label | None = None
    key: Label | None = None
    evidence: Evidence | None = None
    confidence: Unit = Field(default=None)
    expires_at: Timestamp | None = None  # None: never expires


@method("memory.pin")
class Pin(MemoryParams):
    positional = ("memory_id", "pinned")
    memory_id: RowId
    pinned: bool = True


@method("memory.confirm")
class Confirm(MemoryParams):
    """The user says a fact is still true: pinned, confidence 1, verified now."""

    positional = ("memory_id",)
    memory_id: RowId


@method("memory.export")
class Export(MemoryParams):
    include_inactive: bool = True


@method("memory.import")
class Import(MemoryParams):
    positional = ("data",)
    data: ExportFile


@method("memory.import_file")
class ImportFile(MemoryParams):
    """An export the daemon reads from its path: a large one does not fit in a request."""

    positional = ("path",)
    path: file_path()  # type: ignore[valid-type]


class Nothing(MemoryParams):
    pass


MODELS["memory.export_markdown"] = Nothing
MODELS["memory.stats"] = Nothing


@method("memory.used")
class Used(MemoryParams):
    positional = ("message_id",)
    message_id: RowId


EntityName = text(MAX_ENTITY_NAME, what="an entity's name")
EntitySort = Literal[ENTITY_SORTS]  # type: ignore[valid-type]
EntityQuery = text(MAX_ENTITY_NAME, blank=True)


@method("memory.entity")
class Entity(MemoryParams):
    """An entity by its name or an alias, with up to ``limit`` facts and summaries."""

    positional = ("name",)
    name: EntityName
    limit: Page = 20


@method("memory.entities")
class Entities(MemoryParams):
    sort: EntitySort = "mentions"
    query: EntityQuery | None = None  # entities whose name or an alias contains it
    limit: Page = 50
    offset: Offset = 0


@method("memory.rename_entity")
class RenameEntity(MemoryParams):
    positional = ("name", "new_name")
    name: EntityName
    new_name: EntityName


@method("memory.merge_entities")
class MergeEntities(MemoryParams):
    """``other`` becomes part of ``name`` (its names become aliases)."""

    positional = ("name", "other")
    name: EntityName
    other: EntityName


class Call(ProfileParams):
    """A ``memory.*`` request as it comes."""

    args: Annotated[list[Any], Field(max_length=8), Says("a list of positional arguments")] = Field(
        default_factory=list
    )
    kwargs: Annotated[
        dict[str, Any], Field(max_length=32), Says("an object of named arguments")
    ] = Field(default_factory=dict)


def model_for(method: str) -> type[MemoryParams]:
    """The method's model; a method without one is refused (at registration)."""
    try:
        return MODELS[method]
    except KeyError:
        raise TypeError(
            f"{method} has no parameter model: declare its arguments in"
            " navi_desktop/daemon/memory_params.py"
        ) from None


def arguments(method: str, params: Any) -> tuple[str | None, dict[str, Any]]:
    """(profile, the store method's keyword arguments), checked; ``InvalidInput`` if not."""
    model = model_for(method)
    call = parse(Call, params)
    if len(call.args) > len(model.positional):
        names = ", ".join(model.positional) or "none"
        raise InvalidInput(
            f"parameter 'args' holds {len(call.args)} values but {method} takes at most"
            f" {len(model.positional)} ({names}); pass the others by name in 'kwargs'"
        )
    named = dict(zip(model.positional, call.args, strict=False))
    twice = sorted(named.keys() & call.kwargs.keys())
    if twice:
        raise InvalidInput(f"parameter {twice[0]!r} is given twice: in 'args' and in 'kwargs'")
    values = parse(model, named | call.kwargs)
    return call.profile, {name: _plain(getattr(values, name)) for name in values.model_fields_set}


def _plain(value: Any) -> Any:
    """A nested model (an import's file) as the plain data the store takes: what was sent."""
    return value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value


def writes(method: str) -> bool:
    """Whether the ``memory.*`` method may change the memory (memory_api.METHODS)."""
    return memory_api.METHODS[method][2]


async def call(store: MemoryStore, method: str, kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """Run one checked ``memory.*`` call; returns (JSON result, whether memory changed)."""
    name, encode, writes = memory_api.METHODS[method]
    return encode(await getattr(store, name)(**kwargs)), writes
