"""Typed errors of the pure core (layer 3).

Core functions *return* these values (``Moment | InvalidInput | ...``) instead of raising,
so callers handle every case with ``match`` and nothing escapes by accident. They are also
``Exception`` subclasses, so the testing helpers and the facade can raise them as they are.

Each error has a stable ``code`` (the ``type`` string of runtime-spec §11), a human
``message``, and optionally the ``phase`` it arose in, the ``node_id`` it concerns and
durable ``details``. Two errors are equal when all of those are equal (pure functions give
equal errors for equal inputs).
"""

from __future__ import annotations

from typing import ClassVar

from docket.coded import CodedError
from docket.values import canonical_json

__all__ = [
    "AlreadyResolved",
    "CoreError",
    "GraphMismatch",
    "GuardEvaluationFailed",
    "IncompatibleExecutionPolicy",
    "InterruptNotFound",
    "InvalidInput",
    "InvalidPolicy",
    "MalformedMoment",
    "MapFailed",
    "MapTooLarge",
    "NotContinue",
    "NotRetryable",
    "TerminalRun",
    "UncompilableGraph",
    "UnusableRun",
]


class CoreError(CodedError):
    """Base of every core error. ``code`` is the stable machine-readable type."""

    code: ClassVar[str] = "core_error"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, CoreError)
        return canonical_json(self.to_dict()) == canonical_json(other.to_dict())

    def __hash__(self) -> int:
        return hash((self.code, self.message, self.phase, self.node_id))

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (
                ("phase", self.phase),
                ("node_id", self.node_id),
                ("details", self.details or None),
            )
            if value is not None
        )
        return f"{type(self).__name__}({self.message!r}{extra})"


class UncompilableGraph(CoreError):
    """The graph does not compile (``details["diagnostics"]``) or is missing."""

    code = "invalid_graph"


class GraphMismatch(CoreError):
    """The run is pinned to another graph id/hash than the one given."""

    code = "graph_mismatch"


class InvalidInput(CoreError):
    """A run input or an interrupt resolution value was rejected (``details["reasons"]``)."""

    code = "invalid_input"


class GuardEvaluationFailed(CoreError):
    """A start edge's guard could not be evaluated (no run is created)."""

    code = "guard_evaluation_failed"


class UnusableRun(CoreError):
    """The run cannot be advanced or changed in its present form (e.g. never initialized)."""

    code = "invalid_run"


class InvalidPolicy(CoreError):
    """A node policy of a (hand-made or corrupted) runtime graph is unusable."""

    code = "invalid_policy"


class InterruptNotFound(CoreError):
    """No open or resolved interrupt with that id exists on the run."""

    code = "not_found"


class AlreadyResolved(CoreError):
    """The interrupt exists and was resolved before."""

    code = "already_resolved"


class TerminalRun(CoreError):
    """The run is terminal (done, failed or cancelled): nothing can change it."""

    code = "inactive_run"


class NotRetryable(CoreError):
    """The run is running or waiting and not poisoned: there is nothing to retry."""

    code = "not_retryable"


class IncompatibleExecutionPolicy(CoreError):
    """A node's explicit timeout exceeds the host's maximum attempt time."""

    code = "incompatible_execution_policy"


class MapFailed(CoreError):
    """A map node's ``over`` holds no list when the node is activated."""

    code = "invalid_map_input"


class MapTooLarge(MapFailed):
    """A map node's list is longer than its ``max_items`` or the host's ceiling."""

    code = "map_too_large"


class NotContinue(CoreError):
    """Only a ``Continue`` moment can be turned into a drain-budget yield."""

    code = "not_continue"


class MalformedMoment(CoreError):
    """A moment whose events or envelope do not fit together."""

    code = "malformed_moment"
