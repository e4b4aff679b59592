"""``RedisAdmissions``: the admission ledger (``AdmissionStore``, ``Feature.ADMISSION``).

Every queue's ledger sits beside its config under the queue hash tag
``{<prefix>:queues}`` (the layout is in :mod:`docket_redis.keys`), so each operation is
one Lua script on one cluster slot that reads the config ``queue_set.lua`` wrote and
decides with :mod:`docket.contract.admission`'s rules, mirrored in ``lua/admission.lua``
— atomic against every other operation on the queue and against ``set_queue``. The
clock is the server's ``TIME`` unless ``now=`` (or the backend's test clock) is given.

One bound the reference does not have: a promotion examines at most 1000 held starts
(``PROMOTE_WALK``). Starts skipped because their tenant is at its cap count towards it,
so when more than 1000 such starts lead the queue, starts behind them wait for a later
promotion even if they would fit. That keeps one script's work (and the server's pause)
bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from docket.contract.admission import require_admit_request, require_run_ids
from docket.contract.errors import NotFound
from docket.contract.queues import require_queue_name
from docket.records import Admission, AdmissionView, HeldStart
from docket.values import from_micros
from docket_redis._codec import text
from docket_redis._engine import RedisEngine
from docket_redis.errors import corrupt

#: How many held starts one promotion examines at most (``lua/admission.lua``).
PROMOTE_WALK: Final = 1000

_STATES: Final = {"A": Admission.ADMITTED, "H": Admission.HELD}


def tenant_key(tenant: str | None) -> str:
    """The tenant as the scripts key it: ``-`` or ``t`` + the id (never equal)."""
    return "-" if tenant is None else "t" + tenant


class RedisAdmissions:
    """The admission ledgers of one namespace's queues."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine
        self._keys = engine.ns.queues

    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        require_admit_request(name, run_id, tenant, priority, start)
        engine = self._engine
        reply = await engine.eval(
            "admit",
            self._keys.admission(name),
            [name, run_id, tenant_key(tenant), str(priority), start, engine.now_arg(now)],
        )
        if reply is None:
            return NotFound("queue")
        state = _STATES.get(text(reply))
        if state is None:
            raise corrupt(f"queue {name!r}: admit answered {reply!r}")
        return state

    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        require_queue_name(name)
        require_run_ids(run_ids)
        engine = self._engine
        reply = await engine.eval(
            "admit_finish", self._keys.admission(name), [name, engine.now_arg(now), *run_ids]
        )
        return [_entry(name, item) for item in reply]

    async def promote_held(self, name: str, now: datetime | None = None) -> Sequence[HeldStart]:
        require_queue_name(name)
        engine = self._engine
        reply = await engine.eval(
            "admit_promote", self._keys.admission(name), [name, engine.now_arg(now)]
        )
        return [_entry(name, item) for item in reply]

    async def drop_held(self, name: str, run_id: str) -> HeldStart | None:
        require_queue_name(name)
        require_run_ids([run_id])
        reply = await self._engine.eval("admit_drop", self._keys.admission(name), [name, run_id])
        return None if reply is None else _entry(name, reply)

    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        require_run_ids([run_id])
        keys = self._keys
        reply = await self._engine.eval(
            "admit_find",
            [keys.admit_where],
            [run_id, tenant_key(tenant), keys.entries_head, keys.starts_head],
        )
        found = sorted((text(item[0]), item[1:]) for item in reply)
        if not found:
            return None
        queue, (meta, start) = found[0]  # the first queue by name, as the reference
        return _entry(queue, [run_id, meta, start])

    async def admissions(self, name: str, limit: int = 1000) -> AdmissionView:
        require_queue_name(name)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit: expected a positive integer, got {limit!r}")
        admitted, held = await self._engine.eval(
            "admit_read", self._keys.admission(name), [str(limit)]
        )
        return AdmissionView(
            admitted=tuple(_entry(name, item) for item in admitted),
            held=tuple(_entry(name, item) for item in held),
        )


def _entry(queue: str, item: Any) -> HeldStart:
    """A ``{run_id, meta, start}`` reply as a record (meta: ``lua/admission.lua``)."""
    run_id, meta, start = item
    try:
        _state, priority, seq, at, tkey = text(meta).split(" ", 4)
        if not isinstance(start, bytes) or tkey[:1] not in ("-", "t"):
            raise ValueError(meta)
        return HeldStart(
            queue=queue,
            run_id=text(run_id),
            tenant=None if tkey == "-" else tkey[1:],
            priority=int(priority),
            seq=int(seq),
            start=start,
            at=from_micros(int(at)),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise corrupt(f"queue {queue!r}: unreadable admission entry {run_id!r}: {meta!r}") from exc


__all__ = ["PROMOTE_WALK", "RedisAdmissions", "tenant_key"]
