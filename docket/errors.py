"""The exceptions application code sees (layer 5).

Stores and the core *return* typed values; the :class:`~docket.Docket` facade raises
them as exceptions from this module, one class per contract error, per core error and
per facade error, all subclasses of :class:`DocketError`::

    try:
        await docket.resolve_interrupt(run_id, interrupt_id, "approved")
    except docket.errors.AlreadyResolved:
        ...
    except docket.errors.DocketError as exc:
        log.warning("resolve failed: %s %s", exc.code, exc.details)

Every error has a stable ``code`` (the type strings of the runtime spec), a
``message``, and optionally ``phase``, ``node_id`` and durable ``details``
(``details["reasons"]`` lists why an input was rejected, ``details["diagnostics"]``
why a graph does not compile). The tree, each class with its ``code``::

    DocketError                             docket_error
    ├── store answers, via from_contract
    │   ├── NotFound                        not_found      (also an unknown interrupt)
    │   ├── InvalidTransition               invalid_transition
    │   ├── StaleCheckpoint                 stale_checkpoint
    │   ├── Conflict                        conflict
    │   ├── EventConflict                   event_conflict
    │   ├── TooLarge                        too_large
    │   ├── Retryable                       retryable
    │   ├── Permanent                       permanent
    │   ├── GraphContentConflict            graph_content_conflict
    │   └── CorruptData                     corrupt_data
    ├── core errors, via from_core
    │   ├── InvalidGraph                    invalid_graph  (also a refused graph document)
    │   ├── GraphMismatch                   graph_mismatch
    │   ├── InvalidInput                    invalid_input
    │   ├── GuardEvaluationFailed           guard_evaluation_failed
    │   ├── InvalidRun                      invalid_run
    │   ├── InvalidPolicy                   invalid_policy
    │   ├── AlreadyResolved                 already_resolved
    │   ├── InactiveRun                     inactive_run   (also the store's answer)
    │   ├── NotRetryable                    not_retryable
    │   └── IncompatibleExecutionPolicy     incompatible_execution_policy
    └── the facade's own
        ├── InvalidTenant                   invalid_tenant
        ├── InvalidOptions                  invalid_options
        ├── InvalidSettings                 invalid_settings  (also a ValueError)
        ├── InvalidBackend                  invalid_backend
        ├── RuntimeUnavailable              runtime_unavailable
        ├── Unsupported                     unsupported
        ├── InvalidSchedule                 invalid_schedule
        ├── AwaitTimeout                    timeout
        └── RunPoisoned                     poisoned

The store's values (:mod:`docket.contract.errors`) and the core's
(:mod:`docket.core.errors`) keep their own names; import those modules as a layer
(``contract.NotFound``, ``core.InterruptNotFound``) wherever they meet these.
"""

from __future__ import annotations

from typing import ClassVar, Final, assert_never

from docket.coded import CodedError
from docket.contract import errors as contract
from docket.core import errors as core
from docket.records import RunInfo
from docket.values import JSONDict

__all__ = [
    "AlreadyResolved",
    "AwaitTimeout",
    "Conflict",
    "CorruptData",
    "DocketError",
    "EventConflict",
    "GraphContentConflict",
    "GraphMismatch",
    "GuardEvaluationFailed",
    "InactiveRun",
    "IncompatibleExecutionPolicy",
    "InvalidBackend",
    "InvalidGraph",
    "InvalidInput",
    "InvalidOptions",
    "InvalidPolicy",
    "InvalidRun",
    "InvalidSchedule",
    "InvalidSettings",
    "InvalidTenant",
    "InvalidTransition",
    "NotFound",
    "NotRetryable",
    "Permanent",
    "Retryable",
    "RunPoisoned",
    "RuntimeUnavailable",
    "StaleCheckpoint",
    "TooLarge",
    "Unsupported",
    "from_contract",
    "from_core",
]


class DocketError(CodedError):
    """Base of every error the facade raises. ``code`` is stable and machine-readable."""

    code: ClassVar[str] = "docket_error"


# -- the contract's error algebra ----------------------------------------------------------


class NotFound(DocketError):
    """No such run, graph, event or interrupt in your scope (``details["what"]``).

    A resource of another tenant is indistinguishable from a missing one."""

    code = "not_found"


class InvalidTransition(DocketError):
    """The store refused a proposal as malformed (``details["reasons"]``)."""

    code = "invalid_transition"


class StaleCheckpoint(DocketError):
    """The run kept moving under a signal: every evaluation lost the checkpoint race."""

    code = "stale_checkpoint"


class Conflict(DocketError):
    """The run id is taken in this scope (or a transition id was reused)."""

    code = "conflict"


class EventConflict(DocketError):
    """Different content at an event sequence that is already stored."""

    code = "event_conflict"


class TooLarge(DocketError):
    """A declared size limit was exceeded (``details``: limit, size, maximum)."""

    code = "too_large"


class Retryable(DocketError):
    """The store stayed unavailable through every retry; nothing was changed by the last
    try, and trying again later is safe."""

    code = "retryable"


class Permanent(DocketError):
    """The store failed in a way retrying will not fix (schema, corruption, access)."""

    code = "permanent"


class GraphContentConflict(DocketError):
    """A stored graph's bytes differ from the document with the same hash (corruption)."""

    code = "graph_content_conflict"


class CorruptData(DocketError):
    """A stored graph or event cannot be decoded."""

    code = "corrupt_data"


# -- the core's errors ----------------------------------------------------------------------


class InvalidGraph(DocketError):
    """The graph does not compile (``details["diagnostics"]``); nothing was stored."""

    code = "invalid_graph"


class GraphMismatch(DocketError):
    """A run or stored document is pinned to another graph than the one given."""

    code = "graph_mismatch"


class InvalidInput(DocketError):
    """A run input, metadata or interrupt answer was rejected (``details["reasons"]``)."""

    code = "invalid_input"


class GuardEvaluationFailed(DocketError):
    """A start edge's guard could not be evaluated; no run was created."""

    code = "guard_evaluation_failed"


class InvalidRun(DocketError):
    """The run cannot be changed in its present form."""

    code = "invalid_run"


class InvalidPolicy(DocketError):
    """A node policy is unusable."""

    code = "invalid_policy"


class AlreadyResolved(DocketError):
    """The interrupt was answered before."""

    code = "already_resolved"


class InactiveRun(DocketError):
    """The run is done, failed or cancelled; nothing can change it."""

    code = "inactive_run"


class NotRetryable(DocketError):
    """The run is running or waiting and not poisoned: there is nothing to retry."""

    code = "not_retryable"


class IncompatibleExecutionPolicy(DocketError):
    """A node declares a timeout above this host's ``max_attempt_time``."""

    code = "incompatible_execution_policy"


# -- the facade's own -----------------------------------------------------------------------


class InvalidTenant(DocketError):
    """``tenant_id`` is missing in ``tenant_mode="required"`` or given in ``"none"``."""

    code = "invalid_tenant"


class InvalidOptions(DocketError):
    """An argument is out of range (a limit, a cursor, a status, a timeout)."""

    code = "invalid_options"


class InvalidSettings(DocketError, ValueError):
    """The runtime settings cannot work (``details["problems"]``)."""

    code = "invalid_settings"


class InvalidBackend(DocketError):
    """The backend cannot be found, or does not honour the contract."""

    code = "invalid_backend"


class RuntimeUnavailable(DocketError):
    """The :class:`~docket.Docket` is not open (or already closed)."""

    code = "runtime_unavailable"


class Unsupported(DocketError):
    """The backend does not declare the feature an operation needs
    (``details["feature"]``); nothing was written."""

    code = "unsupported"


class InvalidSchedule(DocketError):
    """A schedule's cron expression, time zone or options are unusable
    (``details["reasons"]``); nothing was stored."""

    code = "invalid_schedule"


class AwaitTimeout(DocketError):
    """``await_run`` gave up before the run paused or finished."""

    code = "timeout"


class RunPoisoned(DocketError):
    """The run was poisoned (claimed too often without progress). ``info`` holds the
    operational facts; ``retry_poisoned_run`` makes it due again."""

    code = "poisoned"

    def __init__(self, message: str, info: RunInfo, *, details: JSONDict | None = None) -> None:
        super().__init__(message, details=details)
        self.info = info


# -- conversions ----------------------------------------------------------------------------

_CORE: Final[dict[type[core.CoreError], type[DocketError]]] = {
    core.UncompilableGraph: InvalidGraph,
    core.GraphMismatch: GraphMismatch,
    core.InvalidInput: InvalidInput,
    core.GuardEvaluationFailed: GuardEvaluationFailed,
    core.UnusableRun: InvalidRun,
    core.InvalidPolicy: InvalidPolicy,
    core.InterruptNotFound: NotFound,
    core.AlreadyResolved: AlreadyResolved,
    core.TerminalRun: InactiveRun,
    core.NotRetryable: NotRetryable,
    core.IncompatibleExecutionPolicy: IncompatibleExecutionPolicy,
}


def from_core(error: core.CoreError) -> DocketError:
    """The facade exception for a core error (same message, phase, node and details)."""
    kind = _CORE.get(type(error), DocketError)
    details = dict(error.details)
    if kind is NotFound:
        details.setdefault("what", "interrupt")
    return kind(error.message, phase=error.phase, node_id=error.node_id, details=details)


ContractError = (
    contract.NotFound
    | contract.InvalidTransition
    | contract.StaleCheckpoint
    | contract.Conflict
    | contract.EventConflict
    | contract.TooLarge
    | contract.Retryable
    | contract.Permanent
    | contract.InactiveRun
    | contract.InvalidGraph
    | contract.GraphContentConflict
    | contract.CorruptGraph
    | contract.CorruptEventRow
)


def from_contract(error: ContractError, *, subject: str = "") -> DocketError:
    """The facade exception for a store answer.

    ``subject`` is a noun phrase naming what was asked about (``"run 'r1'"``,
    ``"graph 'g'"``); the message is a sentence built around it, so it must not repeat
    the noun the error already says (``no such run 'r1'``, not ``no such run run 'r1'``).
    """
    on = f" on {subject}" if subject else ""
    of = f" of {subject}" if subject else ""
    match error:
        case contract.NotFound(what=what):
            return NotFound(f"no such {_named(what, subject)}", details={"what": what})
        case contract.InvalidTransition(reasons=reasons):
            return InvalidTransition(
                f"the store refused the transition{on}: " + "; ".join(reasons),
                details={"reasons": list(reasons)},
            )
        case contract.StaleCheckpoint(reason=reason):
            return StaleCheckpoint(f"{subject or 'the run'} moved on: {reason}")
        case contract.Conflict(reason=reason):
            # the stores' reasons name the run or transition already ("run 'x' already exists")
            told = reason if not subject or subject in reason else f"{subject}: {reason}"
            return Conflict(told, details={"reason": reason})
        case contract.EventConflict(seq=seq):
            return EventConflict(f"event {seq}{of} is stored with other content")
        case contract.TooLarge(limit=limit, size=size, maximum=maximum):
            return TooLarge(
                f"{subject or 'the request'} exceeds {limit}: {size} > {maximum}",
                details={"limit": limit, "size": size, "maximum": maximum},
            )
        case contract.Retryable(reason=reason):
            return Retryable(f"the store is unavailable{on}: {reason}")
        case contract.Permanent(reason=reason):
            return Permanent(f"the store failed{on}: {reason}")
        case contract.InactiveRun():
            return InactiveRun(f"{subject or 'the run'} is finished and cannot change")
        case contract.InvalidGraph(reasons=reasons):
            return InvalidGraph(
                f"the store refused {subject or 'the graph'}: " + "; ".join(reasons),
                details={"reasons": list(reasons)},
            )
        case contract.GraphContentConflict():
            return GraphContentConflict(
                f"the stored bytes of {subject or 'the graph'} differ from its document"
            )
        case contract.CorruptGraph(reason=reason):
            return CorruptData(f"the stored {subject or 'graph'} is corrupt: {reason}")
        case contract.CorruptEventRow(seq=seq, reason=reason):
            return CorruptData(f"event {seq}{of} is corrupt: {reason}", details={"seq": seq})
        case _:
            assert_never(error)  # mypy names any store answer added without a message


def _named(what: str, subject: str) -> str:
    """``run 'x'`` for what="run", subject="run 'x'"; ``event for run 'x'`` otherwise."""
    if not subject:
        return what
    if subject == what or subject.startswith(f"{what} "):
        return subject
    return f"{what} for {subject}"
