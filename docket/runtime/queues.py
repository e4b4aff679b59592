"""Claiming under named queues' limits (``Feature.QUEUES``): the runtime side of the ledger.

A backend enforces a queue's limits through its slot ledger
(:mod:`docket.contract.queues`); this module is how every claimer of this process uses it
(the worker, ``Docket.drain_due``, eager starts of runs and of children):

* :class:`QueueView` — the queue configs, read with ``queue_configs`` at most every
  ``Settings.queue_refresh`` seconds (a limit change takes effect within that);
* :class:`SlotBook` — which slot (queue, holder id) each claim holds, by claim token. The
  drain that ends a claim releases its slot (``release_slots``), its heartbeat renews it;
* :class:`QueueClaimer` — one claim round. No limited queue among those served: exactly
  one ``claim_due`` as without queues (no extra round trip). Else, per limited queue
  (rotating, so one cannot take every round's demand): take slots under fresh random
  holder ids, claim at most that many runs of that queue, give back the unused slots
  with their rate tokens (``refund=True``); then one ``claim_due`` over the unlimited
  served queues for the rest of the demand. A store with the optional fused claim
  (:class:`~docket.contract.protocols.SlotClaims`, PostgreSQL's) does a queue's round in
  one transaction instead, and carries the slots of the claims that ended since
  (*release-with-next*: while a worker dispatches, :meth:`SlotBook.release` only notes
  the slot, and the next round in its queue frees it; :data:`RELEASE_WITHIN` bounds how
  long a noted slot waits when no round comes). Other stores compose the three calls
  (:func:`claim_with_slots`), exactly as before.

Priorities need nothing here: the backend's ``claim_due`` orders by them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Final, cast

import attrs

from docket import errors
from docket.contract.capabilities import Feature
from docket.contract.errors import NotFound, Permanent, Retryable
from docket.contract.proposals import ClaimBatch, ClaimClass, ClaimPolicy, Lease, PoisonedClaim
from docket.contract.protocols import Backend, QueueStore, SlotClaims
from docket.errors import InvalidOptions
from docket.graph.compiler import RuntimeGraph, queue_policies
from docket.records import DEFAULT_QUEUE, QueueConfig, queue_name_problem
from docket.telemetry import stamp_logger

__all__ = [
    "QueueClaimer",
    "QueueRuntime",
    "QueueView",
    "SlotBook",
    "admission_unsupported",
    "claim_with_slots",
    "new_holder",
    "require_served",
    "require_store",
    "run_queue",
    "served_queues",
    "uses_queues",
]

log = stamp_logger(logging.getLogger("docket.worker"))

#: What a run's start asks for when neither the caller nor the graph names a queue.
DEFAULTS: Final = (DEFAULT_QUEUE, 0)

#: Seconds a noted release waits for the next round in its queue to carry it before it
#: is sent alone. Short: the slot counts against the limit (for every claimer) until then.
RELEASE_WITHIN: Final = 0.05


def new_holder() -> str:
    """A slot holder id no other claimer uses."""
    return uuid.uuid4().hex


def run_queue(rtg: RuntimeGraph, queue: str | None, priority: int | None) -> tuple[str, int]:
    """A start's queue and priority: the caller's, else the graph's ``queue``/``priority``
    policies, else ``("default", 0)`` (the policies were validated when the graph was)."""
    own_queue, own_priority, _ = queue_policies(rtg.policies) if rtg.policies else (None, None, ())
    chosen_queue = queue if queue is not None else own_queue
    chosen_priority = priority if priority is not None else own_priority
    return (
        DEFAULT_QUEUE if chosen_queue is None else chosen_queue,
        0 if chosen_priority is None else chosen_priority,
    )


def uses_queues(queue: str, priority: int) -> bool:
    """Whether a start needs ``Feature.QUEUES`` (anything but the defaults)."""
    return (queue, priority) != DEFAULTS


class QueueView:
    """The queue configs as this process last read them (``None`` on a backend without
    queues), re-read at most every ``refresh`` seconds."""

    def __init__(
        self, backend: Backend, refresh: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._backend = backend
        self._refresh = refresh
        self._clock = clock
        self._store: QueueStore | None = None
        self._known = False  # whether the backend's features were looked at
        self._configs: dict[str, QueueConfig] | None = None
        self._read_at = 0.0
        self._reading: asyncio.Future[dict[str, QueueConfig]] | None = None

    @property
    def store(self) -> QueueStore | None:
        """``backend.queues`` when the backend declares queues (looked up once)."""
        if not self._known:
            if Feature.QUEUES in self._backend.capabilities().features:
                self._store = getattr(self._backend, "queues")  # noqa: B009  # optional store
            self._known = True
        return self._store

    @property
    def fused(self) -> SlotClaims | None:
        """The store again when it offers the fused claim (``SlotClaims``), else ``None``."""
        store = self.store
        return store if isinstance(store, SlotClaims) else None

    async def configs(self) -> Mapping[str, QueueConfig] | None:
        """Every configured queue by name; re-read when older than ``refresh``. A failed
        read keeps the last view (and raises when there is none)."""
        store = self.store
        if store is None:
            return None
        now = self._clock()
        if self._configs is not None and now - self._read_at < self._refresh:
            return self._configs
        if self._reading is None or self._reading.done():
            # one read at a time: claimers sharing the view wait for the same answer
            self._reading = asyncio.ensure_future(self._read(store))
        try:
            return await asyncio.shield(self._reading)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._configs is None:
                raise
            log.warning("reading the queue configs failed (%s); using the last ones", exc)
            return self._configs

    async def _read(self, store: QueueStore) -> dict[str, QueueConfig]:
        configs = await store.queue_configs()  # configs only: no depth counting
        self._configs = {config.name: config for config in configs}
        self._read_at = self._clock()
        return self._configs

    async def config(self, name: str) -> QueueConfig | None:
        """``name``'s config in the view (an unknown name reads as unlimited: ``None``)."""
        configs = await self.configs()
        return None if configs is None else configs.get(name)


@attrs.frozen
class _Slot:
    queue: str
    holder: str


class SlotBook:
    """The slot each claim of this process holds, by claim token; at most one release
    each (the first :meth:`release` of a claim forgets it)."""

    def __init__(self, view: QueueView) -> None:
        self._view = view
        self._held: dict[str, _Slot] = {}
        # release-with-next: slots of ended claims a round will carry, by queue
        self._noted: dict[str, list[str]] = {}
        self._carriers = 0  # dispatching workers (each polls again when a claim ends)
        self._sender: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, token: str, queue: str, holder: str) -> None:
        self._held[token] = _Slot(queue, holder)

    def holds(self, lease: Lease) -> bool:
        return lease.claim_token in self._held

    async def renew(self, lease: Lease) -> bool:
        """Move the claim's slot expiry on by ``orphan_ttl`` (with the claim's heartbeat).
        ``False`` when the slot had expired (a stall past ``orphan_ttl``) and could not be
        taken again: the claim must not go on running outside the limit. A store failure
        answers ``True`` (best effort: the next beat tries again)."""
        slot = self._held.get(lease.claim_token)
        store = self._view.store
        if slot is None or store is None:
            return True
        try:
            if await store.renew_slots(slot.queue, [slot.holder], lease.orphan_ttl):
                return True
            # expired: another claimer may have its place now; take one again if free
            return bool(await store.acquire_slots(slot.queue, [slot.holder], lease.orphan_ttl))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("renewing the queue slot of run %s failed: %s", lease.run_id, exc)
            return True

    async def release(self, lease: Lease) -> None:
        """Free the claim's slot (its claim ended). Best effort: a slot not released
        expires after ``orphan_ttl``, as a crashed claimer's does. While a worker
        dispatches on a store with the fused claim, the release is noted for the next
        round in the queue to carry (sent alone after :data:`RELEASE_WITHIN`)."""
        slot = self._held.pop(lease.claim_token, None)
        store = self._view.store
        if slot is None or store is None:
            return
        if self._carriers and self._view.fused is not None:
            self._noted.setdefault(slot.queue, []).append(slot.holder)
            if self._sender is None or self._sender.done():
                self._sender = asyncio.get_running_loop().create_task(self._send_later())
            return
        try:
            await store.release_slots(slot.queue, [slot.holder])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("releasing the queue slot of run %s failed: %s", lease.run_id, exc)

    def carried(self, queue: str) -> list[str]:
        """The noted releases of ``queue``, handed to a round that carries them."""
        return self._noted.pop(queue, [])

    def note(self, queue: str, holders: Sequence[str]) -> None:
        """Note releases again (a round that was to carry them did not)."""
        if holders:
            self._noted.setdefault(queue, []).extend(holders)
            if self._sender is None or self._sender.done():
                self._sender = asyncio.get_running_loop().create_task(self._send_later())

    def start_carrying(self) -> None:
        """A worker starts dispatching: releases may wait for its next round."""
        self._carriers += 1

    async def stop_carrying(self) -> None:
        """A worker stopped dispatching; the last one sends every noted release now."""
        self._carriers -= 1
        if self._carriers:
            return
        sender, self._sender = self._sender, None
        if sender is not None and not sender.done():
            sender.cancel()
            await asyncio.wait({sender})
        await self.send_noted()

    async def _send_later(self) -> None:
        await asyncio.sleep(RELEASE_WITHIN)
        await self.send_noted()

    async def send_noted(self) -> None:
        """Release every noted slot now (best effort, as :meth:`release`). Cancelled
        midway (a stop cancels the timed send), what was not sent is noted again."""
        store = self._view.store
        noted, self._noted = self._noted, {}
        if store is None:
            return
        pending = list(noted.items())
        try:
            while pending:
                queue, holders = pending[0]
                try:
                    await store.release_slots(queue, holders)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning(
                        "releasing %d slots of queue %s failed: %s", len(holders), queue, exc
                    )
                pending.pop(0)
        finally:
            for queue, holders in pending:  # a release again is harmless: unknown is ignored
                self._noted.setdefault(queue, []).extend(holders)

    async def acquire_one(self, queue: str, ttl: timedelta) -> str | None:
        """A slot in ``queue`` for a claim this process is about to make (an eager start):
        its holder id, ``None`` when not granted. Follow with :meth:`hold` or
        :meth:`refund`."""
        store = self._view.store
        if store is None:
            return None
        holder = new_holder()
        try:
            granted = await store.acquire_slots(queue, [holder], ttl)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("taking a slot of queue %s failed: %s", queue, exc)
            return None
        return holder if granted else None

    async def refund(self, queue: str, holders: Sequence[str]) -> None:
        """Give back slots that were never used for a claim (their rate tokens too)."""
        store = self._view.store
        if store is None or not holders:
            return
        try:
            await store.release_slots(queue, holders, refund=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("giving back %d slots of queue %s failed: %s", len(holders), queue, exc)


class QueueRuntime:
    """The queue view and slot book one Docket's claimers share."""

    def __init__(self, backend: Backend, refresh: float) -> None:
        self.view = QueueView(backend, refresh)
        self.slots = SlotBook(self.view)

    async def limited(self, queue: str) -> bool:
        """Whether a claim in ``queue`` needs a slot (as far as the view knows)."""
        config = await self.view.config(queue)
        return config is not None and config.limited


class QueueClaimer:
    """One claimer's rounds over the queues it serves (``None``: every queue)."""

    def __init__(
        self, backend: Backend, queues: QueueRuntime, served: Collection[str] | None = None
    ) -> None:
        self._backend = backend
        self._queues = queues
        self.served: frozenset[str] | None = None if served is None else frozenset(served)
        self._turn = 0

    async def claim(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        """A ``claim_due`` round for ``policy.limit`` runs of the served queues: a
        :class:`ClaimBatch`, or the store's refusal when nothing was claimed."""
        configs = await self._queues.view.configs()
        served = self.served
        if configs is None:  # no queues: what claim_due always was
            return await self._backend.runs.claim_due(policy)
        limited = [
            config
            for name, config in sorted(configs.items())
            if config.limited and (served is None or name in served)
        ]
        if not limited:
            return await self._backend.runs.claim_due(
                policy if served is None else attrs.evolve(policy, queues=served)
            )
        names = frozenset(c.name for c in limited)
        rest = (frozenset(configs) if served is None else served) - names
        return await self._rounds(policy, limited, rest)

    async def _rounds(
        self, policy: ClaimPolicy, limited: list[QueueConfig], rest: frozenset[str]
    ) -> ClaimBatch | Retryable | Permanent:
        leases: list[Lease] = []
        poisoned: list[PoisonedClaim] = []
        refusal: Retryable | Permanent | None = None
        demand = policy.limit
        start = self._turn % len(limited)
        self._turn += 1
        for config in [*limited[start:], *limited[:start]]:
            if demand <= 0:
                break
            if config.paused:
                continue  # it grants nothing: no round trip
            try:
                got = await self._limited(policy, config, demand)
            except asyncio.CancelledError:
                raise
            except Exception:
                if not leases and not poisoned:
                    raise
                log.exception("claiming in queue %s failed; keeping the claims made", config.name)
                break
            if isinstance(got, ClaimBatch):
                leases.extend(got.leases)
                poisoned.extend(got.poisoned)
                demand -= len(got.leases) + len(got.poisoned)
            elif got is not None:
                refusal = got
        if demand > 0 and rest:
            try:
                got = await self._backend.runs.claim_due(
                    attrs.evolve(policy, limit=demand, queues=rest, preference=_one(policy, demand))
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                if not leases and not poisoned:
                    raise
                log.exception("claiming in the unlimited queues failed; keeping the claims made")
                got = None
            if isinstance(got, ClaimBatch):
                leases.extend(got.leases)
                poisoned.extend(got.poisoned)
            elif got is not None:
                refusal = got
        if refusal is not None and not leases and not poisoned:
            return refusal
        return ClaimBatch(tuple(leases), tuple(poisoned))

    async def _limited(
        self, policy: ClaimPolicy, config: QueueConfig, demand: int
    ) -> ClaimBatch | Retryable | Permanent | None:
        """Slots, then claims, in one limited queue; ``None`` when no slot was granted."""
        store = self._queues.view.store
        assert store is not None
        want = demand if config.execution_limit is None else min(demand, config.execution_limit)
        holders = [new_holder() for _ in range(want)]
        slots = self._queues.slots
        fused = self._queues.view.fused
        carried = slots.carried(config.name) if fused is not None else []
        try:
            if fused is not None:
                asked = attrs.evolve(policy, preference=_one(policy, want))
                batch = await fused.claim_with_slots(asked, config.name, holders, carried)
            else:
                batch = await claim_with_slots(store, self._backend, policy, config.name, holders)
        except BaseException:
            slots.note(config.name, carried)  # released again (a no-op if they were)
            if fused is not None:  # if it did commit, its claims' slots go (they expire too)
                await asyncio.shield(slots.refund(config.name, holders))
            raise
        if not isinstance(batch, ClaimBatch):
            slots.note(config.name, carried)  # a refusal changed nothing
            return batch
        for lease, holder in zip(batch.leases, holders, strict=False):
            slots.hold(lease.claim_token, config.name, holder)
        return batch


async def claim_with_slots(
    store: QueueStore, backend: Backend, policy: ClaimPolicy, name: str, holders: Sequence[str]
) -> ClaimBatch | Retryable | Permanent | None:
    """The fused claim (:class:`~docket.contract.protocols.SlotClaims`) composed of the
    three calls every queue store has: ``acquire_slots``, ``claim_due`` for at most the
    granted, ``release_slots(refund=True)`` for the slots no lease took (a claim that
    raises gives every granted slot back). Not atomic as a whole, but never over the
    limit: the slots are held before the claim. ``policy.preference`` goes with a
    grant of one only (the worker's alternating preference is for a demand of one)."""
    granted = await store.acquire_slots(name, holders, policy.orphan_ttl)
    if not granted:
        return None
    held = list(holders[:granted])
    try:
        batch = await backend.runs.claim_due(
            attrs.evolve(
                policy,
                limit=granted,
                queues=frozenset({name}),
                preference=_one(policy, granted),
            )
        )
    except BaseException:
        await asyncio.shield(_refund(store, name, held))
        raise
    used = len(batch.leases) if isinstance(batch, ClaimBatch) else 0
    await _refund(store, name, held[used:])
    return batch


async def _refund(store: QueueStore, name: str, holders: Sequence[str]) -> None:
    if not holders:
        return
    try:
        await store.release_slots(name, holders, refund=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("giving back %d slots of queue %s failed: %s", len(holders), name, exc)


def _one(policy: ClaimPolicy, limit: int) -> ClaimClass | None:
    # the worker's alternating class preference means something for a demand of one only
    return policy.preference if limit == 1 else None


def served_queues(queues: object) -> frozenset[str] | None:
    """A worker's ``queues`` argument as a set of names (``None``: every queue), or
    ``InvalidOptions``."""
    if queues is None:
        return None
    if isinstance(queues, str) or not isinstance(queues, Collection) or not queues:
        raise InvalidOptions(
            f"queues: expected a non-empty collection of queue names or None, got {queues!r}",
            phase="queue",
        )
    problems = [p for p in (queue_name_problem(name) for name in queues) if p]
    if problems:
        raise InvalidOptions("; ".join(problems), phase="queue")
    return frozenset(cast(Collection[str], queues))


async def require_served(view: QueueView, served: frozenset[str] | None) -> None:
    """Every served queue exists: ``NotFound`` (details ``what=queue``) names the first
    that does not; ``Unsupported`` on a backend without queues."""
    if served is None:
        return
    store = require_store(view, "serve named queues")
    for name in sorted(served):
        found = await store.fetch_queue(name)
        if isinstance(found, NotFound):
            raise errors.NotFound(
                f"no queue {name!r}", phase="queue", details={"what": "queue", "queue": name}
            )


def queues_unsupported(action: str, backend_name: str = "") -> errors.Unsupported:
    """The one refusal of a queue operation on a backend without ``Feature.QUEUES``."""
    named = f" ({backend_name})" if backend_name else ""
    return errors.Unsupported(
        f"cannot {action}: this backend{named} does not declare the {Feature.QUEUES!s} "
        "feature named queues, priorities and limits need",
        phase="queue",
        details={"feature": str(Feature.QUEUES)},
    )


def admission_unsupported(action: str, backend_name: str = "") -> errors.Unsupported:
    """The one refusal of an admission operation on a backend without
    ``Feature.ADMISSION`` (docs/queues.md#admission-limits)."""
    named = f" ({backend_name})" if backend_name else ""
    return errors.Unsupported(
        f"cannot {action}: this backend{named} does not declare the {Feature.ADMISSION!s} "
        "feature admission limits need",
        phase="queue",
        details={"feature": str(Feature.ADMISSION)},
    )


def require_store(view: QueueView, action: str) -> QueueStore:
    """The queue store, or ``Unsupported`` when the backend does not declare queues."""
    store = view.store
    if store is None:
        raise queues_unsupported(action)
    return store
