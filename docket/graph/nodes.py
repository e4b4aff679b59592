"""The node contract: plain Python callables, registered by name.

A node implementation is a sync or async callable ``fn(state, ctx)`` (or a small class
with a ``call(self, state, ctx)`` method). ``state`` is the committed snapshot: every
input and field by public ID (unwritten fields without a default are absent). ``ctx`` is
a :class:`NodeContext`, whose ``config`` holds the node's effective configuration. The
callable returns an :class:`Update` (or a plain ``dict``, shorthand for one), an
:class:`Interrupt` to pause for an outside answer, or a :class:`Failure`. Raising counts
as a retryable failure.

Graph documents name implementations by **registered name** only; a worker resolves the
names through the :class:`NodeRegistry` its application gives it, so a stored document can
never make a worker import code.

Public API
----------
- ``node(name, config=None, description=None)``: decorator turning a function or class
  into a ``NodeDefinition``; typed (``NodeDecorator``) so that a node may declare its
  state as a ``TypedDict`` and still have its signature checked.
- ``NodeDefinition``: name, callable, config schema.
- ``NodeRegistry``: name -> ``NodeDefinition``; ``register``, ``add``, ``node`` (decorator),
  ``get``, ``in``.
- ``NodeContext``: what a node knows about its activation (run, task, attempt, step,
  idempotency key, config, source versions, application context).
- ``task_id(run_id, step, node_id)``, ``idempotency_key(task_id, attempt)``: identity formulas.
- ``Update``, ``Interrupt``, ``Failure``, ``NodeResult``; ``as_result(value)`` classifies a
  returned value.
- ``RetryPolicy``, ``NodePolicies``: node execution policies.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Protocol, TypeAlias, TypeVar, cast, overload

import attrs

from docket.graph.model import GraphError, GraphErrorCode, implementation_name_problem
from docket.graph.schema import Schema
from docket.records import idempotency_key, item_task_id, task_id
from docket.values import JSONDict, JSONValue, coerce_durable

__all__ = [
    "Failure",
    "Interrupt",
    "NodeContext",
    "NodeDecorator",
    "NodeDefinition",
    "NodeFn",
    "NodePolicies",
    "NodeRegistry",
    "NodeResult",
    "NodeReturn",
    "NodeState",
    "Receive",
    "RetryPolicy",
    "Sleep",
    "Update",
    "as_result",
    "idempotency_key",
    "node",
    "task_id",
]


def _json_map(value: Mapping[str, JSONValue]) -> JSONDict:
    return dict(value)


@attrs.frozen
class NodeContext:
    """What a node is told about the activation it is running.

    ``attempt`` is 1-based. ``idempotency_key`` is stable for a given attempt, so a node
    with external effects can deduplicate them when an attempt is replayed after a crash.
    ``deadline`` (by the runtime's clock) and ``timeout_ms`` say how long this attempt
    may take; the executor sets them.
    """

    run_id: str
    node_id: str
    step: int
    attempt: int
    config: JSONDict = attrs.field(factory=dict, converter=_json_map)
    source_versions: Mapping[str, int] = attrs.field(factory=dict)
    application: Mapping[str, object] = attrs.field(factory=dict)
    deadline: datetime | None = None
    timeout_ms: int | None = None
    #: For an item of a map node: its index in the list, and the item (also in the state
    #: under the map's ``as`` name); ``None`` for any other node.
    item_index: int | None = None
    item: JSONValue = None
    #: Set by the runtime where the backend has a live feed: sends what ``emit`` checked.
    emitter: Callable[[JSONValue, str], None] | None = attrs.field(
        default=None, repr=False, eq=False
    )

    def emit(self, data: object, kind: str = "custom") -> None:
        """Send ``data`` to whoever streams this run right now (``Docket.stream``): a
        token, a progress note. Ephemeral and best effort: never stored, never replayed,
        lost when nobody listens or the worker's queue is full, and a no-op on a backend
        without a live feed. ``data`` must be durable JSON (``NonDurableValue``, a
        ``ValueError``, otherwise) and ``kind`` a string (``TypeError``); delivery
        problems never raise. Works from sync and async nodes."""
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"kind must be a non-empty string, got {kind!r}")
        checked = coerce_durable(data)  # a copy: the node may change its own value later
        if self.emitter is not None:
            self.emitter(checked, kind)

    @property
    def task_id(self) -> str:
        task = task_id(self.run_id, self.step, self.node_id)
        return task if self.item_index is None else item_task_id(task, self.item_index)

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.task_id, self.attempt)


# -- results ----------------------------------------------------------------------------------


@attrs.frozen
class Update:
    """Writes to state fields (field ID -> value), folded in through each field's reducer."""

    values: JSONDict = attrs.field(factory=dict, converter=_json_map)


@attrs.frozen
class Interrupt:
    """Pause this node until an outside answer arrives.

    The answer is written to ``resume_channel`` (a declared state field) through its
    reducer, then the node runs again. ``schema`` checks the answer; ``id`` is generated
    by the runtime when ``None``.
    """

    resume_channel: str
    schema: Schema | None = None
    id: str | None = None
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)


@attrs.frozen
class Failure:
    """The node failed. A retryable failure is retried under the node's retry policy; a
    permanent one fails the run at once."""

    reason: str
    retryable: bool = True
    details: JSONDict = attrs.field(factory=dict, converter=_json_map)


def _positive_delta(_: object, attribute: attrs.Attribute[timedelta | None], value: object) -> None:
    if value is not None and (not isinstance(value, timedelta) or value < timedelta(0)):
        raise ValueError(f"{attribute.name} must be a non-negative timedelta, got {value!r}")


def _aware(_: object, attribute: attrs.Attribute[datetime | None], value: object) -> None:
    if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
        raise ValueError(f"{attribute.name} must be an aware datetime, got {value!r}")


@attrs.frozen(kw_only=True)
class Sleep:
    """Park this attempt, and the run with it, until ``until`` or for ``for_`` (exactly one).

    The run holds no worker while it sleeps, survives restarts and can be cancelled; the
    time is the backend's clock. When the sleep ends, ``update`` is written as the node's
    result (validated now, when the node returns, not at the end of the sleep).
    """

    for_: timedelta | None = attrs.field(default=None, validator=_positive_delta)
    until: datetime | None = attrs.field(default=None, validator=_aware)
    update: JSONDict = attrs.field(factory=dict, converter=_json_map)

    def __attrs_post_init__(self) -> None:
        if (self.for_ is None) == (self.until is None):
            raise ValueError("Sleep takes exactly one of for_ (a timedelta) or until (a datetime)")


@attrs.frozen
class Receive:
    """Wait for the next message sent to the run on ``topic`` (``Docket.send``).

    The message's payload is written to the state field ``into`` (through its reducer),
    beside ``update``, as the node's result; each message is taken by one waiting attempt
    exactly once, oldest first. ``timeout``: give up after this long (backend clock); then
    ``on_timeout`` is written instead, or, when it is ``None``, the attempt fails
    permanently with ``message_timeout``.
    """

    topic: str
    into: str | None = attrs.field(default=None, kw_only=True)
    update: JSONDict = attrs.field(factory=dict, converter=_json_map, kw_only=True)
    timeout: timedelta | None = attrs.field(default=None, validator=_positive_delta, kw_only=True)
    on_timeout: JSONDict | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"topic must be a non-empty string, got {self.topic!r}")


NodeResult: TypeAlias = Update | Interrupt | Failure | Sleep | Receive
NodeState: TypeAlias = Mapping[str, JSONValue]
#: What a node callable may return: a result, or a plain dict as shorthand for ``Update``.
NodeReturn: TypeAlias = "NodeResult | Mapping[str, JSONValue]"
NodeFn: TypeAlias = Callable[[NodeState, NodeContext], "NodeReturn | Awaitable[NodeReturn]"]

# The state type a node function declares: NodeState, or a TypedDict of the fields it reads
# (at run time state is always a plain dict, so a TypedDict costs nothing).
_State = TypeVar("_State", bound=Mapping[str, object])
# What a node function may declare it returns. Wider than NodeReturn in the values of a
# plain mapping (dict[str, list[str]] is no Mapping[str, JSONValue], list being
# invariant): the commit checks every written value against its field anyway.
_Declared: TypeAlias = "NodeResult | Mapping[str, object]"


class NodeDecorator(Protocol):
    """What ``@node(...)`` / ``@registry.node(...)`` apply: checks, for a type checker, that
    a function takes ``(state, ctx: NodeContext)`` with a mapping state (``NodeState`` or a
    ``TypedDict``) and returns a node result, sync or async. Classes are taken as they are
    (their ``call`` method is found at run time)."""

    @overload
    def __call__(
        self, impl: Callable[[_State, NodeContext], _Declared | Awaitable[_Declared]]
    ) -> NodeDefinition: ...

    @overload
    def __call__(self, impl: type[object]) -> NodeDefinition: ...


def as_result(value: object) -> NodeResult:
    """Classify what a node returned (after awaiting it).

    ``Update``/``Interrupt``/``Failure`` pass through; a ``dict`` becomes an ``Update`` (its
    contents are validated later, at the commit); anything else is a permanent
    ``invalid_node_return`` failure.
    """
    if isinstance(value, Update | Interrupt | Failure | Sleep | Receive):
        return value
    if isinstance(value, Mapping):
        return Update(cast("Mapping[str, JSONValue]", value))
    return Failure(
        f"invalid_node_return: a node must return a dict, Update, Interrupt or Failure, "
        f"got {type(value).__name__}",
        retryable=False,
        details={"code": "invalid_node_return"},
    )


# -- policies ---------------------------------------------------------------------------------


@attrs.frozen
class RetryPolicy:
    """``max_attempts`` counts the first attempt; ``backoff_ms`` is the wait between two."""

    max_attempts: int = 1
    backoff_ms: int = 0

    def to_json(self) -> JSONDict:
        return {"max_attempts": self.max_attempts, "backoff_ms": self.backoff_ms}


@attrs.frozen
class NodePolicies:
    """Resolved node policies. ``timeout_ms=None`` leaves the attempt timeout to the host;
    ``max_concurrency=None`` puts no per-process limit on the node's attempts;
    ``limiter`` names the queue whose ledger limits the node's attempts across every
    worker (``docket.runtime.limiters``; ``None``: none)."""

    timeout_ms: int | None = None
    retry: RetryPolicy = RetryPolicy()
    max_concurrency: int | None = None
    limiter: str | None = None


# -- definitions and registry -------------------------------------------------------------------


@attrs.frozen
class NodeDefinition:
    """A registered node implementation: its name, callable and config schema.

    ``config_schema=None`` means the node's config is not checked (any durable map).
    """

    name: str
    fn: NodeFn = attrs.field(eq=False)
    config_schema: Schema | None = None
    description: str | None = None

    @property
    def is_async(self) -> bool:
        call = type(self.fn).__call__  # an object with an async __call__ counts too
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(call)

    def __call__(self, state: NodeState, ctx: NodeContext) -> NodeReturn | Awaitable[NodeReturn]:
        return self.fn(state, ctx)


def _definition(
    name: str, impl: object, config: Schema | None, description: str | None
) -> NodeDefinition:
    problem = implementation_name_problem(name)
    if problem is not None:
        raise GraphError(GraphErrorCode.INVALID_REGISTRY, problem, details={"name": repr(name)})
    if inspect.isclass(impl):
        if config is None:
            declared = getattr(impl, "config_schema", None)
            config = declared if isinstance(declared, Schema) else None
        impl = getattr(impl(), "call", None)
    if not callable(impl):
        raise GraphError(
            GraphErrorCode.INVALID_REGISTRY,
            f"node {name!r} must be a callable or a class with a call(state, ctx) method",
            details={"name": name},
        )
    if config is not None and not isinstance(config, Schema):
        raise GraphError(
            GraphErrorCode.INVALID_REGISTRY,
            f"node {name!r} config schema must be a Schema, got {type(config).__name__}",
            details={"name": name},
        )
    return NodeDefinition(name, cast(NodeFn, impl), config, description)


def node(
    name: str, *, config: Schema | None = None, description: str | None = None
) -> NodeDecorator:
    """Decorate a function ``fn(state, ctx)`` (sync or async) or a class with a
    ``call(self, state, ctx)`` method (instantiated once, without arguments; a class
    attribute ``config_schema`` is used when ``config`` is not given)."""

    def wrap(impl: object) -> NodeDefinition:
        return _definition(name, impl, config, description)

    return wrap


class NodeRegistry:
    """The implementations an application offers to its graphs, by name."""

    def __init__(self, definitions: Iterable[NodeDefinition] = ()) -> None:
        self._by_name: dict[str, NodeDefinition] = {}
        for definition in definitions:
            self.register(definition)

    def register(self, definition: NodeDefinition) -> NodeDefinition:
        """Add a definition; registering a different one under a taken name is an error."""
        if not isinstance(definition, NodeDefinition):
            raise GraphError(
                GraphErrorCode.INVALID_REGISTRY,
                f"expected a NodeDefinition, got {type(definition).__name__}",
            )
        existing = self._by_name.get(definition.name)
        if existing is not None and (existing != definition or existing.fn is not definition.fn):
            raise GraphError(
                GraphErrorCode.INVALID_REGISTRY,
                f"implementation name {definition.name!r} is already registered",
                details={"name": definition.name},
            )
        self._by_name[definition.name] = definition
        return definition

    def add(
        self,
        name: str,
        impl: object,
        *,
        config: Schema | None = None,
        description: str | None = None,
    ) -> NodeDefinition:
        return self.register(_definition(name, impl, config, description))

    def node(
        self, name: str, *, config: Schema | None = None, description: str | None = None
    ) -> NodeDecorator:
        """Like :func:`node`, and registers the result here."""

        def wrap(impl: object) -> NodeDefinition:
            return self.register(_definition(name, impl, config, description))

        return wrap

    def get(self, name: str) -> NodeDefinition | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"NodeRegistry({sorted(self._by_name)!r})"
