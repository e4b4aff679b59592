"""Negative controls for the rules of issue 22: claim edges, size, declared durability.

Like :mod:`.mutants` — whose ``_Reference`` copy of the memory backend these extend —
each class breaks exactly one rule and names the invariant ids meant to catch it, and
each is exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_promises:claims_durable

``python -m docket_contract_tests.negative`` runs them with the others. The durability
mutants take ``namespace=``, so the kit can open "the same store" again.
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import attrs

from docket.clock import Clock
from docket.contract import (
    AbandonOutcome,
    AbandonPolicy,
    ClaimedProposal,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Lease,
    Limits,
    TooLarge,
    TransitionResult,
    UnclaimedProposal,
)
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend, _Row
from docket.contract.validate import (
    ValidTransition,
    split_events,
    validate_commit_claimed,
    validate_commit_unclaimed,
)
from docket.records import Event, OwnerScope, require_owner
from docket_contract_tests.mutants import _factory, _Reference


class TooLargeLeavesEvents(_Reference):
    bug = "an oversized commit is refused only after the events its fences admit are written"
    catches = ("LIMITS-TOO-LARGE-NO-TRACE",)

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        answer = await super().commit_claimed(owner, proposal, events)
        if isinstance(answer, TooLarge):
            loose = attrs.evolve(self._limits, max_run_bytes=1 << 40)
            self._leak_events(owner, validate_commit_claimed(owner, proposal, events, loose))
        return answer

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        answer = await super().commit_unclaimed(owner, expected_checkpoint_seq, proposal, events)
        if isinstance(answer, TooLarge):
            loose = attrs.evolve(self._limits, max_run_bytes=1 << 40)
            valid = validate_commit_unclaimed(
                owner, expected_checkpoint_seq, proposal, events, loose
            )
            self._leak_events(owner, valid)
        return answer

    def _leak_events(self, owner: OwnerScope, valid: object) -> None:
        if not isinstance(valid, ValidTransition):
            return
        assert valid.expected_checkpoint_seq is not None
        with self._lock:
            row = self._row(owner, valid.run.id)
            if row is None or not self._fences_hold(
                row, valid.expected_checkpoint_seq, valid.claim_token
            ):
                return
            split = split_events(row.run.event_seq, valid)
            for index in split[0] if isinstance(split, tuple) else ():
                seq = valid.events[index].seq
                row.events[seq] = (valid.event_json[index], valid.event_contents[index])


class MillisecondClaims(_Reference):
    bug = "claimed_at is stored at millisecond precision (the lease reports the exact now)"
    catches = ("CLAIM-TTL-SUBMILLISECOND",)

    def _lease(self, row: _Row, now: datetime, policy: ClaimPolicy) -> Lease:
        lease = super()._lease(row, now, policy)
        row.claimed_at = now.replace(microsecond=now.microsecond // 1000 * 1000)
        return lease


class RefreshRevivesRelease(_Reference):
    bug = "refresh_claim with the token of a claim its holder released takes the run again"
    catches = ("REFRESH-AFTER-RELEASE",)

    def __init__(self, clock: Clock | None = None, limits: Limits | None = None) -> None:
        super().__init__(clock=clock, limits=limits)
        self._released: dict[tuple[str | None, str], str] = {}

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        with self._lock:
            row = self._row(require_owner(owner), run_id)
            if row is not None and row.claim_token == token:
                self._released[(row.tenant, run_id)] = token
        await super().release_claim(owner, run_id, token, now)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        moment = self._now(now)
        with self._lock:
            row = self._row(require_owner(owner), run_id)
            if (
                row is not None
                and row.claim_token is None
                and self._released.get((row.tenant, run_id)) == token
            ):
                row.claim_token, row.claimed_at, row.wake_at = token, moment, None
                return ClaimRefreshed(moment)
        return await super().refresh_claim(owner, run_id, token, now)


class AbandonFencedOnLease(_Reference):
    bug = "abandon_claim is fenced on the checkpoint the lease was taken at, not the current one"
    catches = ("ABANDON-AFTER-RETAINED-COMMIT",)

    def __init__(self, clock: Clock | None = None, limits: Limits | None = None) -> None:
        super().__init__(clock=clock, limits=limits)
        self._leased_at: dict[tuple[str | None, str], int] = {}

    def _lease(self, row: _Row, now: datetime, policy: ClaimPolicy) -> Lease:
        self._leased_at[(row.tenant, row.run.id)] = row.run.checkpoint_seq
        return super()._lease(row, now, policy)

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        with self._lock:
            row = self._row(require_owner(owner), run_id)
            key = (row.tenant, run_id) if row is not None else None
            leased = self._leased_at.get(key) if key is not None else None
            current = row.run.checkpoint_seq if row is not None else None
        if leased is not None and current is not None and isinstance(policy, AbandonPolicy):
            matches = policy.expected_checkpoint_seq == leased
            policy = attrs.evolve(
                policy, expected_checkpoint_seq=current if matches else current + 1
            )
        return await super().abandon_claim(owner, run_id, token, policy)


# -- feature mutants: declared promises that are not kept --------------------------------------


class ClaimsDurable(_Reference):
    bug = "declares durable, but a store opened again on the same namespace is empty"
    catches = ("FEATURE-DURABLE-REOPEN",)

    def __init__(
        self, clock: Clock | None = None, limits: Limits | None = None, namespace: str = ""
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.namespace = namespace

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features | {Feature.DURABLE})


class PersistsOnClose(ClaimsDurable):
    bug = "declares durable.fsync, but writes its store to disk only when closed"
    catches = ("FEATURE-DURABLE-FSYNC",)

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features | {Feature.DURABLE_FSYNC})

    @property
    def _file(self) -> Path:
        return _mutant_dir() / f"{self.namespace}.pickle"

    async def open(self) -> None:
        if self._file.exists():  # the last close's copy: the only one there is
            with self._lock:
                self._runs, self._graphs = pickle.loads(self._file.read_bytes())
            self._file.unlink()

    async def close(self) -> None:
        with self._lock:
            data = pickle.dumps((self._runs, self._graphs))
        self._file.write_bytes(data)


_DIR_ENV = "DOCKET_KIT_MUTANT_DIR"


def _mutant_dir() -> Path:
    """One directory per kit run, shared with its child processes (they inherit the
    variable) and removed when the process that made it exits."""
    if _DIR_ENV not in os.environ:
        made = tempfile.mkdtemp(prefix="docket-kit-mutants-")
        os.environ[_DIR_ENV] = made
        owner = os.getpid()

        def remove() -> None:
            if os.getpid() == owner:  # not a forked worker of the process that made it
                shutil.rmtree(made, ignore_errors=True)

        atexit.register(remove)
    return Path(os.environ[_DIR_ENV])


def claims_durable(
    clock: Clock | None = None, limits: Limits | None = None, namespace: str = ""
) -> MemoryBackend:
    """Declares durable without keeping anything (FEATURE-DURABLE-REOPEN catches it)."""
    return ClaimsDurable(clock=clock, limits=limits, namespace=namespace)


def persists_on_close(
    clock: Clock | None = None, limits: Limits | None = None, namespace: str = ""
) -> MemoryBackend:
    """Declares durable.fsync, saves only on close (FEATURE-DURABLE-FSYNC catches it)."""
    return PersistsOnClose(clock=clock, limits=limits, namespace=namespace)


millisecond_claims = _factory(MillisecondClaims)
refresh_revives_release = _factory(RefreshRevivesRelease)
abandon_fenced_on_lease = _factory(AbandonFencedOnLease)
too_large_leaves_events = _factory(TooLargeLeavesEvents)

#: These mutants by factory name (all of them must be caught).
PROMISE_MUTANTS: dict[str, type[_Reference]] = {
    "millisecond_claims": MillisecondClaims,
    "refresh_revives_release": RefreshRevivesRelease,
    "abandon_fenced_on_lease": AbandonFencedOnLease,
    "too_large_leaves_events": TooLargeLeavesEvents,
    "claims_durable": ClaimsDurable,
    "persists_on_close": PersistsOnClose,
}

__all__ = ["PROMISE_MUTANTS", *PROMISE_MUTANTS]
