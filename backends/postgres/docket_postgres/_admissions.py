"""The admission ledger (``AdmissionStore``, ``Feature.ADMISSION``) of ``PostgresBackend``.

Schema version 10 keeps one row per start in ``queue_admissions`` (held or admitted) and
the queue's last ``seq`` on its ``queues`` row. Each write is one call of a PL/pgSQL
function (``admission_admit``, ``admission_finish``, ``admission_drop``; see
:mod:`docket_postgres._schema.v10`): one round trip, one transaction, under the queue
row's ``FOR UPDATE`` lock — the lock ``set_queue`` and the slot ledger take — so the
operations on one queue are serial whoever races, and a limit read from the config is
the config in force. The functions apply the rules of :mod:`docket.contract.admission`
in SQL; the memory backend's :class:`~docket.contract.admission.AdmissionBook` is the
reference they are tested against.

Run ids and tenants are stored as UTF-8 bytes (any string, NUL included); a tenantless
start's tenant is empty bytes. Times are the database's unless the call passes ``now``
or the backend runs on a test clock (:meth:`Engine.given`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from docket.contract import NotFound
from docket.contract.admission import require_admit_request, require_run_ids
from docket.contract.queues import default_config, require_queue_name
from docket.records import (
    DEFAULT_QUEUE,
    Admission,
    AdmissionView,
    HeldStart,
    queue_config_to_json,
)
from docket.values import utc
from docket_postgres._engine import Engine
from docket_postgres.arrays import ByteaArray

_ADMIT: Final = "SELECT @schema@.admission_admit(%s, %s, %s, %s::smallint, %s, %s::timestamptz, %s)"
_FINISH: Final = "SELECT * FROM @schema@.admission_finish(%s, %s::bytea[], %s::timestamptz)"
_DROP: Final = "SELECT * FROM @schema@.admission_drop(%s, %s)"
_COLUMNS: Final = "run_id, tenant, priority, seq, start, at"
# the first match in queue order (a run id is in at most one list of a queue)
_HELD_START: Final = (
    f"SELECT queue, {_COLUMNS} FROM @schema@.queue_admissions "
    "WHERE run_id = %s AND tenant = %s ORDER BY queue LIMIT 1"
)
# both lists in one statement, so they are read at one instant
_VIEW: Final = (
    f"(SELECT false, {_COLUMNS} FROM @schema@.queue_admissions "
    "WHERE queue = %s AND NOT held ORDER BY seq LIMIT %s) "
    "UNION ALL "
    f"(SELECT true, {_COLUMNS} FROM @schema@.queue_admissions "
    "WHERE queue = %s AND held ORDER BY priority DESC, seq LIMIT %s)"
)
_LIMIT_MAX: Final = 2**62  # past any ledger's size; a bigint for LIMIT
_DEFAULT_CONFIG: Final = queue_config_to_json(default_config()).decode()


def _key(text: str) -> bytes:
    # lone surrogates too: the memory reference keeps any ``str``
    return text.encode("utf-8", "surrogatepass")


def _text(raw: Any) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")


def _tenant_key(tenant: str | None) -> bytes:
    return b"" if tenant is None else _key(tenant)


def _start(queue: str, row: Sequence[Any]) -> HeldStart:
    run_id, tenant, priority, seq, start, at = row
    return HeldStart(
        queue=queue,
        run_id=_text(run_id),
        tenant=_text(tenant) or None,
        priority=int(priority),
        seq=int(seq),
        start=bytes(start),
        at=utc(at),
    )


class PostgresAdmissions:
    """``AdmissionStore`` over one backend's :class:`~docket_postgres._engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

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
        rows = await engine.fetch(
            engine.q(_ADMIT),
            (
                name,
                _key(run_id),
                _tenant_key(tenant),
                priority,
                start,
                engine.given(now),
                _DEFAULT_CONFIG if name == DEFAULT_QUEUE else None,
            ),
            write=True,
        )
        state = rows[0][0] if rows else None
        return NotFound("queue") if state is None else Admission(str(state))

    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        require_queue_name(name)
        require_run_ids(run_ids)
        return await self._finish(name, [_key(r) for r in run_ids], now)

    async def promote_held(self, name: str, now: datetime | None = None) -> Sequence[HeldStart]:
        require_queue_name(name)
        return await self._finish(name, [], now)

    async def _finish(
        self, name: str, run_ids: list[bytes], now: datetime | None
    ) -> list[HeldStart]:
        engine = self._engine
        rows = await engine.fetch(
            engine.q(_FINISH), (name, ByteaArray(run_ids), engine.given(now)), write=True
        )
        return [_start(name, row) for row in rows]

    async def drop_held(self, name: str, run_id: str) -> HeldStart | None:
        require_queue_name(name)
        require_run_ids([run_id])
        engine = self._engine
        rows = await engine.fetch(engine.q(_DROP), (name, _key(run_id)), write=True)
        return _start(name, rows[0]) if rows else None

    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        require_run_ids([run_id])
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            return None  # no start has such a tenant (and b"" is the tenantless key)
        engine = self._engine
        rows = await engine.fetch(
            engine.q(_HELD_START), (_key(run_id), _tenant_key(tenant)), write=False
        )
        return _start(str(rows[0][0]), rows[0][1:]) if rows else None

    async def admissions(self, name: str, limit: int = 1000) -> AdmissionView:
        require_queue_name(name)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit: expected a positive integer, got {limit!r}")
        engine = self._engine
        limit = min(limit, _LIMIT_MAX)
        rows = await engine.fetch(engine.q(_VIEW), (name, limit, name, limit), write=False)
        admitted = tuple(_start(name, row[1:]) for row in rows if not row[0])
        held = tuple(_start(name, row[1:]) for row in rows if row[0])
        return AdmissionView(admitted=admitted, held=held)


__all__ = ["PostgresAdmissions"]
