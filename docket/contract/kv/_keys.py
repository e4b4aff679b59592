"""The key layout (see the package docstring for the table) and the per-run head record.

Every encoding here preserves order, so a range scan gives the contract's orders with no
sorting: a text component is its UTF-8 with NUL escaped as ``00 FF`` and a ``00``
terminator (so ``"a" < "ab"`` holds as bytes and no two tuples share a key); a time is
its microseconds since the epoch plus ``2**63``, 8 bytes big-endian (times before 1970
still sort first); a sequence number is 8 bytes big-endian. Components whose order
nothing scans by (owner scopes in run keys) are folded into a 16-byte digest, which keeps
every key within ``max_id_bytes + 26`` bytes (LMDB takes 511).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import attrs
import orjson

from docket.records import CheckpointType, OwnerScope, Run, RunStatus, RunSummary, tenant_id_of
from docket.values import from_micros, to_micros

LAYOUT_KEY = b"\x00layout"
LAYOUT = b"docket-kv 1"
DIGEST_BYTES = 16
KEY_OVERHEAD = 26  # tag + time + terminator + digest around the one id a key may hold

HEAD, DOC, EVENT, TRANSITION = b"h", b"d", b"e", b"t"
DUE, CLAIMED, RUNS, OWNER_RUNS = b"w", b"c", b"l", b"o"
GRAPH, VERSION = b"g", b"v"


def text(value: str) -> bytes:
    """An ordered, self-delimiting text component (surrogates pass: a read of an id no
    store could hold finds nothing instead of raising)."""
    return value.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + b"\x00"


def untext(component: bytes) -> str:
    """The text a :func:`text` component (the last of a key, or cut out of it) holds."""
    return component[:-1].replace(b"\x00\xff", b"\x00").decode("utf-8")


def time8(moment: datetime) -> bytes:
    return (to_micros(moment) + (1 << 63)).to_bytes(8, "big")


def read_time8(data: bytes) -> datetime:
    return from_micros(int.from_bytes(data[:8], "big") - (1 << 63))


def seq8(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


def owner_part(owner: OwnerScope) -> bytes:
    tenant = tenant_id_of(owner)
    return b"\x01" if tenant is None else b"\x02" + text(tenant)


def digest(*parts: bytes) -> bytes:
    return hashlib.sha256(b"".join(parts)).digest()[:DIGEST_BYTES]


def run_handle(owner: OwnerScope, run_id: str) -> bytes:
    """The 16 bytes that stand for ``(owner, run_id)`` in every per-run key."""
    return digest(b"r", owner_part(owner), text(run_id))


def owner_handle(owner: OwnerScope) -> bytes:
    return digest(b"o", owner_part(owner))


def graph_handle(owner: OwnerScope, graph_id: str) -> bytes:
    return digest(b"g", owner_part(owner), text(graph_id))


def after(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (an exclusive end)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\xff" * (len(prefix) + 1)
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _us(moment: datetime | None) -> int | None:
    return None if moment is None else to_micros(moment)


def _dt(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(value))


@attrs.define(kw_only=True)
class Head:
    """A run's summary and operational state: what claims and listings read and write,
    kept apart from the (large) run document so a claim rewrites a few hundred bytes."""

    tenant: str | None
    run_id: str
    graph_id: str
    graph_hash: str
    status: RunStatus
    step: int
    checkpoint_seq: int
    event_seq: int
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    checkpoint_type: CheckpointType
    wake_at: datetime | None = None
    claim_token: str | None = None
    claimed_at: datetime | None = None
    claim_attempts: int = 0
    claim_abandons: int = 0
    poisoned_at: datetime | None = None
    poison_reason: str | None = None

    @classmethod
    def of(cls, run: Run, tenant: str | None, checkpoint_type: CheckpointType) -> Head:
        return cls(
            tenant=tenant,
            run_id=run.id,
            graph_id=run.graph_id,
            graph_hash=run.graph_hash,
            status=run.status,
            step=run.step,
            checkpoint_seq=run.checkpoint_seq,
            event_seq=run.event_seq,
            started_at=run.started_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
            checkpoint_type=checkpoint_type,
        )

    def advance(self, run: Run, checkpoint_type: CheckpointType) -> None:
        """Take a committed run's summary; claim health resets on every commit."""
        self.status, self.step = run.status, run.step
        self.checkpoint_seq, self.event_seq = run.checkpoint_seq, run.event_seq
        self.updated_at, self.finished_at = run.updated_at, run.finished_at
        self.checkpoint_type = checkpoint_type
        self.claim_attempts = self.claim_abandons = 0
        self.poisoned_at = self.poison_reason = None

    def summary(self) -> RunSummary:
        return RunSummary(
            id=self.run_id,
            tenant_id=self.tenant,
            graph_id=self.graph_id,
            graph_hash=self.graph_hash,
            status=self.status,
            step=self.step,
            checkpoint_seq=self.checkpoint_seq,
            started_at=self.started_at,
            updated_at=self.updated_at,
            finished_at=self.finished_at,
        )

    def encode(self) -> bytes:
        data = attrs.asdict(self, recurse=False)
        for name in ("started_at", "updated_at", "finished_at", "wake_at", "claimed_at"):
            data[name] = _us(data[name])
        data["poisoned_at"] = _us(self.poisoned_at)
        data["status"], data["checkpoint_type"] = str(self.status), str(self.checkpoint_type)
        return orjson.dumps(data)

    @classmethod
    def decode(cls, data: bytes) -> Head:
        raw = orjson.loads(data)
        times = ("started_at", "updated_at", "finished_at", "wake_at", "claimed_at", "poisoned_at")
        for name in times:
            raw[name] = _dt(raw[name])
        raw["status"] = RunStatus(raw["status"])
        raw["checkpoint_type"] = CheckpointType(raw["checkpoint_type"])
        return cls(**raw)
