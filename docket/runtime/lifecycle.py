"""Commit discipline: how the runtime sends proposals to a store and reads the answers.

Two rules, shared by workers and the facade:

* **An ambiguous commit is replayed, never recomputed.** When a store answers
  ``Retryable`` — or the call raises, so nobody knows whether it landed — the *same*
  proposal (same ``transition_id``, same bytes) is sent again, a bounded number of times
  with a doubling pause. If the first try had landed, the store recognises the transition
  id and answers the stored run; if not, the proposal is applied now. Recomputing would
  risk committing a *different* successor of the same checkpoint.
* **A signal that loses the checkpoint race is re-evaluated.** ``resolve_interrupt`` and
  ``cancel_run`` are pure mutations of the committed run; on ``StaleCheckpoint`` the run
  is read again and the mutation evaluated again on what is now committed (1 + 3 tries by
  default), because the answer may differ (a cancelled run cannot be resolved).

Claimed commits never re-evaluate: ``StaleCheckpoint`` there means another holder owns
the run, and the drain stops.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import random
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Literal, TypeAlias, TypeVar

import attrs

from docket.contract.errors import (
    NotFound,
    Retryable,
    StaleCheckpoint,
    TransitionError,
    TransitionResult,
)
from docket.contract.protocols import Backend, SampledNow
from docket.core.errors import CoreError
from docket.core.moment import Moment, Unchanged
from docket.core.outcomes import describe_exception
from docket.core.proposals import unclaimed_proposal
from docket.records import Checkpoint, OwnerScope, Run, tenant_id_of
from docket.telemetry import Telemetry, stamp_logger

__all__ = [
    "CommitContext",
    "CommitPolicy",
    "Ids",
    "Mutation",
    "Observer",
    "Observers",
    "SignalResult",
    "commit",
    "random_ids",
    "signal",
    "stamp_clock",
]

log = stamp_logger(logging.getLogger("docket.runtime"))

_T = TypeVar("_T")

#: An id generator: ``ids("run")`` → a fresh run id. Kinds: run, transition, interrupt.
Ids: TypeAlias = Callable[[str], str]


class _IdSource:
    """64 random bits per id from a generator seeded with 128 bits of OS entropy, and
    seeded afresh in a forked child (which would otherwise repeat its parent's ids).

    Ids need to be unique, not secret (every run is reached through its owner scope),
    and one per transition adds up: ``secrets`` is a system call per id, which under a
    busy worker's GIL contention showed as several percent of its time."""

    def __init__(self) -> None:
        self._random = random.Random(secrets.randbits(128))

    def reseed(self) -> None:
        self._random.seed(secrets.randbits(128))

    def hex16(self) -> str:
        return f"{self._random.getrandbits(64):016x}"


_ID_SOURCE = _IdSource()
os.register_at_fork(after_in_child=_ID_SOURCE.reseed)


def stamp_clock(backend: Backend) -> Callable[[], Awaitable[datetime]]:
    """What the runtime stamps new work with: the store's clock, through its cheap
    ``sampled_now()`` where it has one (a server backend, see ``SampledNow``)."""
    return backend.sampled_now if isinstance(backend, SampledNow) else backend.now


def random_ids(kind: str) -> str:
    """``"<kind>_<16 random hex digits>"``: unique across processes without coordination."""
    return f"{kind}_{_ID_SOURCE.hex16()}"


@attrs.frozen(kw_only=True)
class CommitPolicy:
    """Tries of one proposal, and the first pause between two (doubling, capped)."""

    attempts: int = 5
    backoff: float = 0.05
    cap: float = 2.0


async def commit(
    send: Callable[[], Awaitable[_T | Retryable]],
    policy: CommitPolicy,
    *,
    what: str = "commit",
) -> _T | Retryable:
    """Call ``send`` (which sends one fixed proposal) until the answer is definite.

    ``Retryable`` answers and raised exceptions (outcome unknown) are retried with the
    same proposal; after ``policy.attempts`` tries the last one is returned as
    ``Retryable``. Programming errors (``TypeError``, ``ValueError``, ``AssertionError``)
    propagate at once, as does cancellation.
    """
    last: Retryable = Retryable("no attempt was made")
    for attempt in range(max(policy.attempts, 1)):
        if attempt:
            await asyncio.sleep(min(policy.backoff * 2 ** (attempt - 1), policy.cap))
        try:
            result = await send()
        except (TypeError, ValueError, AssertionError):
            raise
        except Exception as exc:
            last = Retryable(f"outcome unknown: {describe_exception(exc)}")
            log.warning("%s failed (try %d, outcome unknown): %s", what, attempt + 1, last.reason)
            continue
        if isinstance(result, Retryable):
            last = result
            log.info("%s answered retryable (try %d): %s", what, attempt + 1, result.reason)
            continue
        return result
    return last


# -- observers ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CommitContext:
    """What an observer learns besides the checkpoint: whose run it is and what committed
    it (``start``, ``moment`` for a worker's step, ``signal`` for resolve and cancel)."""

    tenant_id: str | None
    operation: Literal["start", "moment", "signal"]


#: ``observer(checkpoint, context)``, sync or async; called after a commit, best effort.
Observer: TypeAlias = Callable[[Checkpoint, CommitContext], Awaitable[None] | None]


class Observers:
    """Delivers committed checkpoints to observers without ever delaying the committer.

    Each delivery is its own task (sync observers run in a thread); failures are logged
    and forgotten. Delivery may be lost (a crash right after the commit) or repeated
    (a replayed commit): observers are hints, the stored events are the truth.
    """

    def __init__(self, observers: tuple[Observer, ...] = ()) -> None:
        self._observers = observers
        self._pending: set[asyncio.Task[None]] = set()

    def __bool__(self) -> bool:
        return bool(self._observers)

    def deliver(self, checkpoint: Checkpoint, context: CommitContext) -> None:
        for observer in self._observers:
            task = asyncio.get_running_loop().create_task(_observe(observer, checkpoint, context))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def drain(self, timeout: float) -> None:
        """Let pending deliveries finish for up to ``timeout`` seconds, then cancel them."""
        if not self._pending:
            return
        pending = set(self._pending)
        _, late = await asyncio.wait(pending, timeout=timeout)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)


async def _observe(observer: Observer, checkpoint: Checkpoint, context: CommitContext) -> None:
    try:
        if inspect.iscoroutinefunction(observer) or inspect.iscoroutinefunction(
            type(observer).__call__
        ):
            result = observer(checkpoint, context)
            if inspect.isawaitable(result):
                await result
        else:
            result = await asyncio.to_thread(observer, checkpoint, context)
            if inspect.isawaitable(result):
                await result
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception(
            "observer %r failed on checkpoint %d of run %s",
            observer,
            checkpoint.seq,
            checkpoint.run.id,
        )


# -- signals --------------------------------------------------------------------------------

#: A pure mutation of the committed run at ``now``.
Mutation: TypeAlias = Callable[[Run, datetime], Moment | Unchanged | CoreError]


@attrs.frozen
class SignalResult:
    """A signal's answer: the run as now committed, and the checkpoint it made (``None``
    when nothing needed committing, e.g. cancelling a cancelled run)."""

    run: Run
    checkpoint: Checkpoint | None
    previous: Run | None = None  # the run the signal was evaluated on (when it committed)


async def signal(
    backend: Backend,
    owner: OwnerScope,
    run_id: str,
    mutate: Mutation,
    *,
    ids: Ids,
    policy: CommitPolicy,
    attempts: int = 4,
    observers: Observers | None = None,
    telemetry: Telemetry | None = None,
    clock: Callable[[], Awaitable[datetime]] | None = None,
) -> SignalResult | CoreError | TransitionError:
    """Read, evaluate, commit unclaimed; on ``StaleCheckpoint`` read and evaluate again.

    Errors of the mutation and of the store are returned (nothing was written); after
    ``attempts`` lost races the answer is ``StaleCheckpoint``. ``clock``: the store time
    the mutation is evaluated at (default ``backend.now``).
    """
    read_clock = clock if clock is not None else backend.now
    for _ in range(max(attempts, 1)):
        fetched = await backend.runs.fetch_run(owner, run_id)
        if isinstance(fetched, NotFound):
            return fetched
        now = await read_clock()
        outcome = mutate(fetched, max(now, fetched.updated_at))
        if isinstance(outcome, CoreError):
            return outcome
        if isinstance(outcome, Unchanged):
            return SignalResult(outcome.run, None)
        moment = outcome
        proposal = unclaimed_proposal(moment, transition_id=ids("transition"))
        send = functools.partial(
            backend.transitions.commit_unclaimed,
            owner,
            fetched.checkpoint_seq,
            proposal,
            moment.events,
        )
        stored: TransitionResult = await commit(send, policy, what=f"signal on run {run_id}")
        if isinstance(stored, Run):
            checkpoint = moment.checkpoint()
            if telemetry:
                telemetry.committed(checkpoint, operation="signal", tenant_id=tenant_id_of(owner))
            if observers:
                observers.deliver(
                    checkpoint, CommitContext(tenant_id=tenant_id_of(owner), operation="signal")
                )
            return SignalResult(stored, checkpoint, fetched)
        if isinstance(stored, StaleCheckpoint):
            continue
        return stored
    return StaleCheckpoint(f"the run kept moving through {attempts} evaluations of the signal")
