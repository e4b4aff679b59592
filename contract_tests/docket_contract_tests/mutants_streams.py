"""Negative controls for the live feed (STREAM-*): feeds that announce, scope, order or
bound their items almost, but not exactly, right.

Like :mod:`.mutants` — whose ``_Reference`` copy of the memory backend these extend —
each class breaks exactly one rule, names the invariant ids meant to catch it, and is
exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_streams:notice_before_write

``python -m docket_contract_tests.negative`` runs them with the others. The notice bugs
override the commit path (``commit_claimed``, ``commit_unclaimed``, ``_commit``); the
delivery bugs swap in a :class:`~docket.contract.feed.FeedHub` with one rule broken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import ClassVar

import attrs

from docket.contract import ClaimedProposal, TransitionResult, UnclaimedProposal
from docket.contract.capabilities import Limits
from docket.contract.feed import FeedHub, LocalSubscription
from docket.contract.proposals import InitProposal
from docket.contract.validate import ValidTransition, validate_commit_claimed
from docket.records import (
    MAX_EMISSION_BYTES,
    Emission,
    Event,
    FeedItem,
    OwnerScope,
    Run,
    Scope,
    System,
    bounded_emission,
    scope_admits,
)
from docket.values import canonical_json
from docket_contract_tests.mutants import _factory, _Reference

#: How long the late write of ``NoticeBeforeWrite`` trails its notice (a slow round trip).
LAG = 0.5


class _Hub(FeedHub):
    """The reference hub, with notices that can be muted for one call."""

    muted = False

    def notice(self, owner: OwnerScope, run_id: str, graph_id: str, first: int, last: int) -> None:
        if not self.muted:
            super().notice(owner, run_id, graph_id, first, last)


class _WithHub(_Reference):
    """The reference backend with another feed hub (``hub``)."""

    hub: ClassVar[type[_Hub]] = _Hub

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.feed = self.hub()

    @contextlib.contextmanager
    def _muted(self) -> Iterator[None]:
        hub = self.feed
        assert isinstance(hub, _Hub)
        hub.muted = True
        try:
            yield
        finally:
            hub.muted = False


# -- notices --------------------------------------------------------------------------------


class NoticeBeforeWrite(_WithHub):
    bug = "commit_claimed announces the commit, then writes it a round trip later"
    catches = ("STREAM-NOTICE-AFTER-COMMIT",)

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_commit_claimed(owner, proposal, events, self._limits)
        if isinstance(valid, ValidTransition):
            expected = valid.expected_checkpoint_seq
            assert expected is not None
            with self._lock:
                row = self._row(owner, valid.run.id)
                fenced = row is not None and self._fences_hold(row, expected, valid.claim_token)
            if row is not None and fenced and valid.run.event_seq > row.run.event_seq:
                first = row.run.event_seq + 1
                self.feed.notice(owner, row.run.id, row.run.graph_id, first, valid.run.event_seq)
                await asyncio.sleep(LAG)  # the bug: subscribers read before the write lands
        return await super().commit_claimed(owner, proposal, events)


class NoticeOnRefused(_WithHub):
    bug = "a commit refused by its fences still announces the events it proposed"
    catches = ("STREAM-NOTICE-REFUSED",)

    def _commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        result = super()._commit(owner, valid)
        if not isinstance(result, Run):
            with self._lock:
                row = self._row(owner, valid.run.id)
            if row is not None and valid.run.event_seq > row.run.event_seq:
                self.feed.notice(
                    owner, row.run.id, row.run.graph_id, row.run.event_seq + 1, valid.run.event_seq
                )
        return result


class NoNoticeOnUnclaimed(_WithHub):
    bug = "commit_unclaimed (a signal, an operator's edit) publishes no commit notice"
    catches = ("STREAM-NOTICE-AFTER-COMMIT",)

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        with self._muted():
            return await super().commit_unclaimed(owner, expected_checkpoint_seq, proposal, events)


class NoNoticeOnClaimedStart(_WithHub):
    bug = "initialize_claimed (a worker's direct start) publishes no commit notice"
    catches = ("STREAM-NOTICE-AFTER-COMMIT",)

    async def initialize_claimed(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event], claim_token: str
    ) -> TransitionResult:
        with self._muted():
            return await super().initialize_claimed(owner, proposal, events, claim_token)


# -- delivery -------------------------------------------------------------------------------


class _LeakyHub(_Hub):
    def deliver(self, item: FeedItem) -> None:
        with self._lock:
            targets = list(self._subscriptions)
        for subscription in targets:  # the bug: every subscription, whatever its scope
            subscription.offer(item)


class CrossTenantLeak(_WithHub):
    bug = "the feed delivers every item to every subscription, whatever its scope"
    catches = ("STREAM-SCOPE",)
    hub = _LeakyHub


class _ReversingSubscription(LocalSubscription):
    def _take(self) -> list[FeedItem]:
        items = super()._take()
        emissions = iter([i for i in items if isinstance(i, Emission)][::-1])
        # the bug: the emissions of one batch come out last first
        return [next(emissions) if isinstance(i, Emission) else i for i in items]


class _ReorderingHub(_Hub):
    def open(self, scope: Scope) -> LocalSubscription:
        subscription = _ReversingSubscription(self, scope, self._limit)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription


class EmissionsReordered(_WithHub):
    bug = "a subscription hands out a batch of emissions in reverse order"
    catches = ("STREAM-EMISSION-ORDER",)
    hub = _ReorderingHub


def _size(emission: Emission) -> int:
    return len(canonical_json(emission.data))


class _DroppingHub(_Hub):
    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        if _size(emission) > MAX_EMISSION_BYTES:
            return  # the bug: no overflow marker, the subscriber never learns
        await super().publish(owner, emission)


class LargeEmissionDropped(_WithHub):
    bug = "an emission over MAX_EMISSION_BYTES is dropped instead of sent as an overflow marker"
    catches = ("STREAM-EMISSION-BOUND",)
    hub = _DroppingHub


class _TruncatingHub(_Hub):
    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        if isinstance(emission.data, str) and _size(emission) > MAX_EMISSION_BYTES:
            # the bug: a long text is cut to fit rather than marked as overflowed
            emission = attrs.evolve(emission, data=emission.data[: MAX_EMISSION_BYTES - 2])
        await super().publish(owner, emission)


class LargeEmissionTruncated(_WithHub):
    bug = "a text emission over MAX_EMISSION_BYTES arrives cut to the bound, not as overflow"
    catches = ("STREAM-EMISSION-BOUND",)
    hub = _TruncatingHub


class _StrictBoundHub(_Hub):
    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        size = _size(emission)
        if size >= MAX_EMISSION_BYTES:  # the bug: >= where the rule says >
            emission = attrs.evolve(emission, data={"overflow": True, "bytes": size})
        await super().publish(owner, bounded_emission(emission))


class EmissionBoundOffByOne(_WithHub):
    bug = "an emission of exactly MAX_EMISSION_BYTES arrives as an overflow marker"
    catches = ("STREAM-EMISSION-BOUND",)
    hub = _StrictBoundHub


class _ForgetfulSubscription(LocalSubscription):
    async def close(self) -> None:
        return None  # the bug: a closed subscription goes on buffering and answering


class _UnclosableHub(_Hub):
    def open(self, scope: Scope) -> LocalSubscription:
        subscription = _ForgetfulSubscription(self, scope, self._limit)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription


class ClosedSubscriptionDelivers(_WithHub):
    bug = "close does not stop a subscription: get still returns what arrived after it"
    catches = ("STREAM-SUBSCRIPTION-CLOSE",)
    hub = _UnclosableHub


class _SystemPublishHub(_Hub):
    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        if isinstance(owner, System):  # the bug: System publishes to every scope
            with self._lock:
                targets = list(self._subscriptions)
            for subscription in targets:
                if scope_admits(subscription.scope, emission.tenant_id):
                    subscription.offer(bounded_emission(emission))
            return
        await super().publish(owner, emission)


class PublishAsSystem(_WithHub):
    bug = "publish accepts System as the owner instead of raising ValueError"
    catches = ("STREAM-BAD-INPUT",)
    hub = _SystemPublishHub


notice_before_write = _factory(NoticeBeforeWrite)
notice_on_refused = _factory(NoticeOnRefused)
no_notice_on_unclaimed = _factory(NoNoticeOnUnclaimed)
no_notice_on_claimed_start = _factory(NoNoticeOnClaimedStart)
cross_tenant_leak = _factory(CrossTenantLeak)
emissions_reordered = _factory(EmissionsReordered)
large_emission_dropped = _factory(LargeEmissionDropped)
large_emission_truncated = _factory(LargeEmissionTruncated)
emission_bound_off_by_one = _factory(EmissionBoundOffByOne)
closed_subscription_delivers = _factory(ClosedSubscriptionDelivers)
publish_as_system = _factory(PublishAsSystem)

#: These mutants by factory name (all of them must be caught).
STREAM_MUTANTS: dict[str, type[_Reference]] = {
    "notice_before_write": NoticeBeforeWrite,
    "notice_on_refused": NoticeOnRefused,
    "no_notice_on_unclaimed": NoNoticeOnUnclaimed,
    "no_notice_on_claimed_start": NoNoticeOnClaimedStart,
    "cross_tenant_leak": CrossTenantLeak,
    "emissions_reordered": EmissionsReordered,
    "large_emission_dropped": LargeEmissionDropped,
    "large_emission_truncated": LargeEmissionTruncated,
    "emission_bound_off_by_one": EmissionBoundOffByOne,
    "closed_subscription_delivers": ClosedSubscriptionDelivers,
    "publish_as_system": PublishAsSystem,
}

__all__ = ["STREAM_MUTANTS", *STREAM_MUTANTS]
