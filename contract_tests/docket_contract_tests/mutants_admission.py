"""Negative controls for admission limits (ADMIT-*): ledgers that keep the admission
rules almost, but not exactly.

Like :mod:`.mutants_queues` — whose ``_WithQueues`` copy of the memory backend these
extend — each class breaks exactly one rule, names the invariant ids meant to catch it,
and is exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_admission:over_admit_by_one

``python -m docket_contract_tests.negative`` runs them with the others. The rule bugs
swap in an :class:`~docket.contract.admission.AdmissionBook` with one rule broken
(``book``); the store bugs a :class:`~docket.contract.memory_queues.MemoryAdmissions`
(``admission_store``) or the queue store (``store``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import ClassVar

import attrs

from docket.contract import NotFound
from docket.contract.admission import AdmissionBook, admits, promotion_key, require_run_ids
from docket.contract.capabilities import Limits
from docket.contract.memory_queues import MemoryAdmissions
from docket.contract.queues import default_config, require_queue_name
from docket.records import (
    Admission,
    AdmissionView,
    HeldStart,
    QueueConfig,
    QueueStatus,
)
from docket_contract_tests.mutants import _factory, _Reference
from docket_contract_tests.mutants_queues import _Queues, _WithQueues

# -- books ----------------------------------------------------------------------------------


def _walk(
    book: AdmissionBook,
    config: QueueConfig,
    now: datetime,
    key: Callable[[HeldStart], tuple[int, ...]] = promotion_key,
    *,
    tenant_caps: bool = True,
    stop_at_skip: bool = False,
    restamp: bool = True,
) -> list[HeldStart]:
    """``AdmissionBook.promote`` with its rules as switches (all on: the reference)."""
    counts = Counter(s.tenant for s in book.admitted.values())
    promoted: list[HeldStart] = []
    for entry in sorted(book.held.values(), key=key):
        if config.admission_limit is not None and len(book.admitted) >= config.admission_limit:
            break
        tenant_count = counts[entry.tenant] if tenant_caps else 0
        if not admits(config, len(book.admitted), tenant_count):
            if stop_at_skip:
                break
            continue
        del book.held[entry.run_id]
        if restamp:
            entry = attrs.evolve(entry, at=now)
        book.admitted[entry.run_id] = entry
        counts[entry.tenant] += 1
        promoted.append(entry)
    return promoted


class _OverAdmittingBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        if config.admission_limit is not None:  # the bug: one more than the limit
            config = attrs.evolve(config, admission_limit=config.admission_limit + 1)
        return super().admit(config, run_id, tenant, priority, start, now)


class _TenantBlindBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        # the bug: only the queue's cap is counted at admit
        config = attrs.evolve(config, tenant_admission_limit=None)
        return super().admit(config, run_id, tenant, priority, start, now)


class _FifoBook(AdmissionBook):
    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        return _walk(self, config, now, key=lambda s: (s.seq,))  # the bug: no priority


class _TenantBlindPromotionBook(AdmissionBook):
    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        return _walk(self, config, now, tenant_caps=False)  # the bug: promotes over a tenant cap


class _StopAtSkipBook(AdmissionBook):
    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        return _walk(self, config, now, stop_at_skip=True)  # the bug: waits for a capped tenant


class _KeepsHeldTimeBook(AdmissionBook):
    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        return _walk(self, config, now, restamp=False)  # the bug: at stays the time it was held


class _NoPromoteOnFinishBook(AdmissionBook):
    def finish(self, config: QueueConfig, run_ids: Sequence[str], now: datetime) -> list[HeldStart]:
        for run_id in run_ids:  # the bug: frees, but leaves promotion to promote_held
            self.admitted.pop(run_id, None)
        return []


class _FinishDropsHeldBook(AdmissionBook):
    def finish(self, config: QueueConfig, run_ids: Sequence[str], now: datetime) -> list[HeldStart]:
        for run_id in run_ids:  # the bug: a held start named in a finish is forgotten
            self.held.pop(run_id, None)
        return super().finish(config, run_ids, now)


class _ReadmitCountedBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        known = self.admitted.get(run_id)
        if known is not None:  # the bug: a retried start takes a second place
            self.admitted[f"{run_id}\x00again{len(self.admitted)}"] = known
        return super().admit(config, run_id, tenant, priority, start, now)


class _ReadmitRefreshesBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        for entries in (self.admitted, self.held):
            known = entries.get(run_id)
            if known is not None:  # the bug: a retried start overwrites the one kept
                entries[run_id] = attrs.evolve(known, tenant=tenant, priority=priority, start=start)
        return super().admit(config, run_id, tenant, priority, start, now)


class _OvertakingBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        if run_id in self.admitted or run_id in self.held:
            return super().admit(config, run_id, tenant, priority, start, now)
        # the bug: a new start overtakes its own tenant's held starts when it fits
        if admits(config, len(self.admitted), self.tenant_admitted(tenant)):
            entry = HeldStart(
                queue=config.name,
                run_id=run_id,
                tenant=tenant,
                priority=priority,
                seq=self.next_seq,
                start=start,
                at=now,
            )
            self.next_seq += 1
            self.admitted[run_id] = entry
            return Admission.ADMITTED
        return super().admit(config, run_id, tenant, priority, start, now)


class _PauseHoldsBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        if config.paused:  # the bug: a pause holds every new start, as if at the cap
            config = attrs.evolve(config, admission_limit=max(1, len(self.admitted)))
        return super().admit(config, run_id, tenant, priority, start, now)

    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        return [] if config.paused else super().promote(config, now)


class _DropsAdmittedBook(AdmissionBook):
    def drop(self, run_id: str) -> HeldStart | None:
        # the bug: an admitted start is dropped too, freeing its place uncounted
        return self.held.pop(run_id, None) or self.admitted.pop(run_id, None)


class _FifoViewBook(AdmissionBook):
    def view(self, limit: int) -> AdmissionView:
        held = sorted(self.held.values(), key=lambda s: s.seq)[:limit]  # the bug: by seq
        return attrs.evolve(super().view(limit), held=tuple(held))


class _UnlimitedViewBook(AdmissionBook):
    def view(self, limit: int) -> AdmissionView:
        return super().view(len(self.admitted) + len(self.held) + 1)  # the bug: no limit


class _TextStartBook(AdmissionBook):
    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        start = start.decode("utf-8", "replace").encode()  # the bug: kept as text
        return super().admit(config, run_id, tenant, priority, start, now)


# -- stores ---------------------------------------------------------------------------------


class _Admissions(MemoryAdmissions):
    """The reference admission store, its books of class ``book``."""

    book: ClassVar[type[AdmissionBook]] = AdmissionBook

    def _book(self, name: str) -> AdmissionBook:
        return self._queues.books.setdefault(name, self.book())


class _NonAtomicFinish(_Admissions):
    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        require_queue_name(name)
        require_run_ids(run_ids)
        at = self._queues._now(now)
        with self._queues._lock:
            book = self._queues.books.get(name)
            if book is None:
                return []
            for run_id in run_ids:
                book.admitted.pop(run_id, None)
        await asyncio.sleep(0)  # the bug: the freed place is open to anyone for a moment
        return await self.promote_held(name, at)


class _TenantBlindFind(_Admissions):
    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        require_run_ids([run_id])
        with self._queues._lock:  # the bug: any tenant's start is found
            for _, book in sorted(self._queues.books.items()):
                for entries in (book.admitted, book.held):
                    if run_id in entries:
                        return entries[run_id]
        return None


class _UnknownQueueAdmits(_Admissions):
    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        answer = await super().admit(name, run_id, tenant, priority, start, now)
        if not isinstance(answer, NotFound):
            return answer
        at = self._queues._now(now)
        with self._queues._lock:  # the bug: an unknown queue admits as an unlimited one
            return self._book(name).admit(default_config(name), run_id, tenant, priority, start, at)


class _UncheckedAdmit(_Admissions):
    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        require_queue_name(name)  # the bug: the run id, tenant, priority and start unchecked
        at = self._queues._now(now)
        with self._queues._lock:
            config = self._config(name, at)
            if config is None:
                return NotFound("queue")
            return self._book(name).admit(config, run_id, tenant, priority, start, at)


class _CountlessQueues(_Queues):
    async def list_queues(self) -> Sequence[QueueStatus]:
        # the bug: list_queues leaves out the admission counts
        return [attrs.evolve(s, admitted=0, held=0) for s in await super().list_queues()]


class _LedgerResettingQueues(_Queues):
    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        answer = await super().set_queue(config)
        with self._lock:  # the bug: a new config starts a new admission ledger
            self.books.pop(config.name, None)
        return answer


class _WithAdmissions(_WithQueues):
    """The reference backend with another admission store and book class."""

    admission_store: ClassVar[type[_Admissions]] = _Admissions
    book: ClassVar[type[AdmissionBook]] = AdmissionBook

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        kind = type("Admissions", (self.admission_store,), {"book": self.book})
        self.admissions = kind(self.queues)


# -- book mutants ---------------------------------------------------------------------------


class OverAdmitByOne(_WithAdmissions):
    bug = "admit admits one start more than the admission limit"
    catches = ("ADMIT-LIMIT",)
    book = _OverAdmittingBook


class TenantCapIgnored(_WithAdmissions):
    bug = "admit counts the queue's cap but not the tenant's"
    catches = ("ADMIT-TENANT",)
    book = _TenantBlindBook


class PromotionFifo(_WithAdmissions):
    bug = "held starts are promoted in seq order, whatever their priority"
    catches = ("ADMIT-ORDER",)
    book = _FifoBook


class PromotionOverTenantCap(_WithAdmissions):
    bug = "promotion does not skip a start whose tenant is at its cap"
    catches = ("ADMIT-ORDER", "ADMIT-TENANT")
    book = _TenantBlindPromotionBook


class PromotionStopsAtCappedTenant(_WithAdmissions):
    bug = "promotion stops at a start whose tenant is at its cap instead of skipping it"
    catches = ("ADMIT-ORDER",)
    book = _StopAtSkipBook


class PromotedKeepsHeldTime(_WithAdmissions):
    bug = "a promoted start's at stays the time it was held, not the promotion's"
    catches = ("ADMIT-ORDER", "ADMIT-FINISH", "ADMIT-FIND", "ADMIT-RAISE")
    book = _KeepsHeldTimeBook


class FinishWithoutPromotion(_WithAdmissions):
    bug = "finish_admitted frees the places but promotes nothing (left to promote_held)"
    catches = ("ADMIT-FINISH", "ADMIT-LIMIT")
    book = _NoPromoteOnFinishBook


class FinishDropsHeld(_WithAdmissions):
    bug = "finish_admitted of a held start's run id forgets that start"
    catches = ("ADMIT-FINISH",)
    book = _FinishDropsHeldBook


class ReadmitCountedTwice(_WithAdmissions):
    bug = "admit of an admitted run id counts it a second time"
    catches = ("ADMIT-AGAIN",)
    book = _ReadmitCountedBook


class ReadmitOverwrites(_WithAdmissions):
    bug = "admit of a known run id overwrites its tenant, priority and start"
    catches = ("ADMIT-AGAIN",)
    book = _ReadmitRefreshesBook


class OvertakesOwnTenant(_WithAdmissions):
    bug = "a new start is admitted past its own tenant's held starts when it fits"
    catches = ("ADMIT-RAISE",)
    book = _OvertakingBook


class PauseHoldsStarts(_WithAdmissions):
    bug = "a paused queue holds new starts and promotes none"
    catches = ("ADMIT-RAISE",)
    book = _PauseHoldsBook


class DropAdmittedToo(_WithAdmissions):
    bug = "drop_held drops an admitted start as well as a held one"
    catches = ("ADMIT-DROP",)
    book = _DropsAdmittedBook


class HeldViewBySeq(_WithAdmissions):
    bug = "admissions() lists held starts by seq, not in promotion order"
    catches = ("ADMIT-STATUS", "ADMIT-ORDER")
    book = _FifoViewBook


class ViewIgnoresLimit(_WithAdmissions):
    bug = "admissions(limit=) answers every start"
    catches = ("ADMIT-STATUS",)
    book = _UnlimitedViewBook


class StartKeptAsText(_WithAdmissions):
    bug = "a start's bytes are kept as UTF-8 text (invalid bytes replaced)"
    catches = ("ADMIT-START-BYTES",)
    book = _TextStartBook


# -- store mutants --------------------------------------------------------------------------


class FinishNotAtomic(_WithAdmissions):
    bug = "finish_admitted frees and promotes in two steps: a new start can take the place"
    catches = ("ADMIT-FINISH",)
    admission_store = _NonAtomicFinish


class HeldStartAnyTenant(_WithAdmissions):
    bug = "held_start finds a run's start whatever tenant asks"
    catches = ("ADMIT-FIND",)
    admission_store = _TenantBlindFind


class UnknownQueueAdmits(_WithAdmissions):
    bug = "admit in a queue never configured admits (and keeps) the start"
    catches = ("ADMIT-BAD-INPUT",)
    admission_store = _UnknownQueueAdmits


class AdmitUnchecked(_WithAdmissions):
    bug = "admit checks the queue name only: a bad run id, tenant, priority or start is kept"
    catches = ("ADMIT-BAD-INPUT",)
    admission_store = _UncheckedAdmit


class StatusWithoutCounts(_WithAdmissions):
    bug = "list_queues reports admitted and held as 0"
    catches = ("ADMIT-STATUS", "ADMIT-TENANT", "ADMIT-AGAIN")
    store = _CountlessQueues


class ReconfigureForgetsLedger(_WithAdmissions):
    bug = "set_queue of a queue starts a new admission ledger: admitted and held are lost"
    catches = ("ADMIT-RAISE", "ADMIT-DROP")
    store = _LedgerResettingQueues


over_admit_by_one = _factory(OverAdmitByOne)
tenant_cap_ignored = _factory(TenantCapIgnored)
promotion_fifo = _factory(PromotionFifo)
promotion_over_tenant_cap = _factory(PromotionOverTenantCap)
promotion_stops_at_capped_tenant = _factory(PromotionStopsAtCappedTenant)
promoted_keeps_held_time = _factory(PromotedKeepsHeldTime)
finish_without_promotion = _factory(FinishWithoutPromotion)
finish_drops_held = _factory(FinishDropsHeld)
readmit_counted_twice = _factory(ReadmitCountedTwice)
readmit_overwrites = _factory(ReadmitOverwrites)
overtakes_own_tenant = _factory(OvertakesOwnTenant)
pause_holds_starts = _factory(PauseHoldsStarts)
drop_admitted_too = _factory(DropAdmittedToo)
held_view_by_seq = _factory(HeldViewBySeq)
view_ignores_limit = _factory(ViewIgnoresLimit)
start_kept_as_text = _factory(StartKeptAsText)
finish_not_atomic = _factory(FinishNotAtomic)
held_start_any_tenant = _factory(HeldStartAnyTenant)
unknown_queue_admits = _factory(UnknownQueueAdmits)
admit_unchecked = _factory(AdmitUnchecked)
status_without_counts = _factory(StatusWithoutCounts)
reconfigure_forgets_ledger = _factory(ReconfigureForgetsLedger)

#: These mutants by factory name (all of them must be caught).
ADMISSION_MUTANTS: dict[str, type[_Reference]] = {
    "over_admit_by_one": OverAdmitByOne,
    "tenant_cap_ignored": TenantCapIgnored,
    "promotion_fifo": PromotionFifo,
    "promotion_over_tenant_cap": PromotionOverTenantCap,
    "promotion_stops_at_capped_tenant": PromotionStopsAtCappedTenant,
    "promoted_keeps_held_time": PromotedKeepsHeldTime,
    "finish_without_promotion": FinishWithoutPromotion,
    "finish_drops_held": FinishDropsHeld,
    "readmit_counted_twice": ReadmitCountedTwice,
    "readmit_overwrites": ReadmitOverwrites,
    "overtakes_own_tenant": OvertakesOwnTenant,
    "pause_holds_starts": PauseHoldsStarts,
    "drop_admitted_too": DropAdmittedToo,
    "held_view_by_seq": HeldViewBySeq,
    "view_ignores_limit": ViewIgnoresLimit,
    "start_kept_as_text": StartKeptAsText,
    "finish_not_atomic": FinishNotAtomic,
    "held_start_any_tenant": HeldStartAnyTenant,
    "unknown_queue_admits": UnknownQueueAdmits,
    "admit_unchecked": AdmitUnchecked,
    "status_without_counts": StatusWithoutCounts,
    "reconfigure_forgets_ledger": ReconfigureForgetsLedger,
}

__all__ = ["ADMISSION_MUTANTS", *ADMISSION_MUTANTS]
