"""The pure superstep core (layer 3): no I/O, no clock reads, no randomness.

Given a compiled :class:`~docket.graph.compiler.RuntimeGraph`, a committed
:class:`~docket.records.Run`, node outcomes and ``now``, the core computes the next
moment: the proposed run, its events, its checkpoint and what happens after the commit.

Typical loop (what the inline runner and the worker do)::

    moment = initialize(rtg, build_initial_run(rtg, input, run_id=..., now=now), now=now)
    while True:
        step = advance(rtg, run, now=clock(), limits=limits)
        if isinstance(step, Dispatch):
            outcomes = await execute(rtg, step.activations, ...)   # runtime layer
            step = settle(rtg, step, outcomes, now=clock(), ids=ids)
        ...commit the moment, follow its disposition...
"""

from docket.core.advance import Step, advance
from docket.core.errors import (
    AlreadyResolved,
    CoreError,
    GraphMismatch,
    GuardEvaluationFailed,
    IncompatibleExecutionPolicy,
    InterruptNotFound,
    InvalidInput,
    InvalidPolicy,
    MalformedMoment,
    NotContinue,
    NotRetryable,
    TerminalRun,
    UncompilableGraph,
    UnusableRun,
)
from docket.core.init import build_initial_run, initialize, parse_input
from docket.core.moment import (
    Continue,
    Disposition,
    Moment,
    NotDue,
    Park,
    ParkReason,
    Terminated,
    Unchanged,
    Wait,
    ceil_ms,
    envelope,
    wake_name,
    yield_moment,
)
from docket.core.mutations import cancel_run, resolve_interrupt
from docket.core.outcomes import (
    Completed,
    Failed,
    Interrupted,
    TaskOutcome,
    classify_return,
    describe_exception,
    format_reason,
)
from docket.core.plan import (
    DEFAULT_TIMEOUT_MS,
    Activation,
    Dispatch,
    HostLimits,
    check_execution_policy,
    superstep_limit,
)
from docket.core.proposals import (
    claimed_proposal,
    init_proposal,
    initial_wake,
    schedule_for,
    unclaimed_proposal,
)
from docket.core.reopen import reopen_failed_run
from docket.core.settle import settle
from docket.core.state import project_outputs, snapshot, source_versions

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "Activation",
    "AlreadyResolved",
    "Completed",
    "Continue",
    "CoreError",
    "Dispatch",
    "Disposition",
    "Failed",
    "GraphMismatch",
    "GuardEvaluationFailed",
    "HostLimits",
    "IncompatibleExecutionPolicy",
    "InterruptNotFound",
    "Interrupted",
    "InvalidInput",
    "InvalidPolicy",
    "MalformedMoment",
    "Moment",
    "NotContinue",
    "NotDue",
    "NotRetryable",
    "Park",
    "ParkReason",
    "Step",
    "TaskOutcome",
    "TerminalRun",
    "Terminated",
    "Unchanged",
    "UncompilableGraph",
    "UnusableRun",
    "Wait",
    "advance",
    "build_initial_run",
    "cancel_run",
    "ceil_ms",
    "check_execution_policy",
    "claimed_proposal",
    "classify_return",
    "describe_exception",
    "envelope",
    "format_reason",
    "init_proposal",
    "initial_wake",
    "initialize",
    "parse_input",
    "project_outputs",
    "reopen_failed_run",
    "resolve_interrupt",
    "schedule_for",
    "settle",
    "snapshot",
    "source_versions",
    "superstep_limit",
    "unclaimed_proposal",
    "wake_name",
    "yield_moment",
]
