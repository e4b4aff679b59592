"""The key layout: which Redis key holds what, and which hash tag it carries.

Every key of one owner scope carries the hash tag ``{<prefix>:<owner>}``, so every
script — which only ever touches one scope's keys — runs on a single Redis Cluster
slot. ``<owner>`` is ``-`` for tenantless rows and ``t:<tenant id>`` for a tenant, with
``%``, ``{`` and ``}`` percent-escaped so a tenant id can neither end the tag early nor
make two scopes' keys collide; inside tags the prefix has ``%`` and ``:`` escaped, so
two namespaces never share a key either. The namespace's own keys (the registry of scopes and
the listing-order counter, the layout version) carry the tag ``{<prefix>}``.

Per scope (tag ``T``):

========================  ======  =====================================================
key                       type    content
========================  ======  =====================================================
``T:r:<run_id>``          hash    run document, identity, operational state
``T:tx:<run_id>``         hash    transition_id -> digest of the committed proposal
``T:ev:<run_id>``         hash    ``<seq>`` -> event JSON, ``d<seq>`` -> content digest
``T:ei:<run_id>``         zset    seq -> seq (retained sequences, for paging and bounds)
``T:ready``               zset    run_id -> wake_at us (healthy, unclaimed, with a wake)
``T:claimed``             zset    run_id -> claimed_at us (healthy, claimed)
``T:sum``                 hash    run_id -> ``<order>|<summary JSON>`` (list_runs)
``T:ix``                  zset    ``<time key of started_at>:<run_id>``, one score (lex)
``T:ix:s:<status>``       zset    the same, runs of one status
``T:ix:g:<graph_id>``     zset    the same, runs of one graph id
``T:ix:h:<graph_hash>``   zset    the same, runs of one graph hash
``T:g:<graph_id>``        hash    ``d:<hash>`` -> document, ``p:<hash>`` -> published us
``T:gv:<graph_id>``       zset    ``<time key of published_at>:<hash>``, one score (lex)
``T:ew``                  zset    run_id -> written us of its oldest retained events (4)
``T:ew:<run_id>``         zset    ``<first seq>:<last seq>`` -> written us, one per commit (4)
``T:fin``                 zset    run_id -> us it last became terminal (4)
``T:ready:<q>:<p>``       zset    as ``T:ready``, runs of queue q at priority p (5)
``T:claimed:<q>:<p>``     zset    as ``T:claimed``, runs of queue q at priority p (5)
``T:lanes``               set     ``<q>:<p>`` of the two above holding a run (5)
========================  ======  =====================================================

``T:ready`` holds every unclaimed run with a wake: running runs, and (layout 3, durable
time) waiting runs due at a time — a deadline or a message wait's timeout. A waiting run
without a wake (``External``) is in neither zset, so it is never claimed.

**Schedules** (layout 3) are not per scope: every tenant's schedules are listed and
due-indexed together, so they all live under one tag ``S = {<prefix>:schedules}`` and
one script can fence a write and move its indexes atomically. The trade-off: all
schedules sit on one cluster slot (one primary). They are few and change once per tick,
so that node serves them easily; a deployment with very many schedules would spread
them by sharding the tag, which costs the single ordered ``due_schedules`` read.
(``schedules`` cannot be an owner part, which is ``-`` or ``t:…``.)

========================  ======  =====================================================
key                       type    content
========================  ======  =====================================================
``S:doc``                 hash    member -> schedule JSON (``schedule_to_json``)
``S:ix``                  zset    member, one score (lex): every schedule
``S:ix:<owner part>``     zset    member, one score (lex): one owner scope's
``S:due``                 zset    member -> ``due_at`` us (paused or done: absent)
========================  ======  =====================================================

**Retention** (layout 4, :mod:`docket_redis._retention`) needs when each event was
written and when each finished run ended. Both are indexed per scope, in the scope's own
tag, by the same script that writes them: ``T:fin`` holds every terminal run by the time
it (last) became terminal; ``T:ew:<run_id>`` holds one member per commit that wrote
events — the range of sequences it wrote, scored by the time it wrote them — and
``T:ew`` holds each run with retained events scored by its oldest such commit
(``ZADD LT``), so a pass finds the old events of a scope without visiting its other
runs. A pass walks the scope registry (``<prefix>:scopes``), so in a Cluster it finds
every scope's indexes from any node, each script staying on its scope's slot; no key
spans scopes.

The **feed** (layout 4, :mod:`docket_redis._feed`) is the channel ``<prefix>:feed``:
classic ``PUBLISH``, which a Cluster broadcasts to every node, so one subscription on any
node hears every scope.

**Queues** (layout 5). A run's queue and priority are fields ``q`` and ``p`` of its run
hash, written at initialize unless they are ``default`` and 0 and never changed after.
Its *lane* is where it waits: the default queue at priority 0 (so every run written
before layout 5) uses ``T:ready`` / ``T:claimed`` as ever, any other pair the lane
zsets above, which every script that moves a run picks from the run hash
(``lua/lanes.lua``). ``claim_peek`` reads the lanes of the wanted queues (``T:lanes``
lists them, so a scope with only default runs costs one empty ``SMEMBERS`` more).
The queue ledger, like schedules, is namespace-wide under one tag
``Q = {<prefix>:queues}``, so each operation on it is one script on one slot:

========================  ======  =====================================================
key                       type    content
========================  ======  =====================================================
``Q:cfg``                 hash    queue name -> config JSON (``queue_config_to_json``)
``Q:bucket``              hash    queue name -> ``<tokens> <refilled_at us>``
``Q:h:<name>``            zset    holder id -> expires_at us (live: score >= now)
``Q:aseq``                hash    queue name -> last admission ``seq`` given (ADMISSION)
``Q:aw``                  hash    run id -> the queues whose ledger has it (space-sep.)
``Q:ae:<name>``           hash    run id -> ``<A|H> <priority> <seq> <at us> <tenant>``
``Q:as:<name>``           hash    run id -> its opaque ``start`` bytes
``Q:ah:<name>``           zset    held starts, one score (lex): promotion order
``Q:aa:<name>``           zset    admitted run id -> seq
``Q:at:<name>``           hash    ``a<tenant>`` / ``h<tenant>`` -> admitted / held count
========================  ======  =====================================================

The **admission ledger** (``Feature.ADMISSION``, :mod:`docket_redis._admissions`) lives
beside the queue ledger under ``Q``, so each operation — reading the queue's config from
``Q:cfg`` and moving its entries — is one script on one slot, atomic against
``set_queue``. ``<tenant>`` is ``-`` for tenantless starts and ``t`` + the tenant id
(last in an entry, as an id may hold spaces). A held member is ``<100 - priority, 3
digits><seq, 20 digits><run id>``: its lexical order is exactly
``promotion_key`` (priority descending, then seq) with no float score to round. The
admitted count is ``ZCARD Q:aa:<name>``, the held one ``ZCARD Q:ah:<name>``; the
per-tenant counts are kept by the same scripts that move entries. These keys are new
and nothing else changed meaning, so the layout stays 5 (see ``_schema``).

A member is :func:`schedule_member`: ``(id, tenant or "")`` in bytes whose lexical order
is that tuple's order, the listing order (``ScheduleCursor``); equal ``due_at`` scores
therefore come back in listing order too.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote

from docket.records import DURABLE_STATUSES, OwnerScope, RunStatus, Tenant, Tenantless

#: The status indexes a commit may move a run between, in the order commit.lua expects.
STATUS_ORDER: Final = (
    RunStatus.RUNNING,
    RunStatus.WAITING,
    RunStatus.DONE,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
)
assert frozenset(STATUS_ORDER) == DURABLE_STATUSES

_TIME_OFFSET: Final = 10**19


def time_key(micros: int) -> str:
    """A fixed-width string whose lexical order is the numeric order of ``micros``.

    Non-negative times are ``1`` + 19 digits; negative ones ``0`` + 19 digits of
    ``micros + 10**19``. (Scripts build the non-negative form from the server clock.)
    """
    if not -_TIME_OFFSET < micros < _TIME_OFFSET:
        raise ValueError(f"time {micros} us is out of range")
    return f"1{micros:019d}" if micros >= 0 else f"0{micros + _TIME_OFFSET:019d}"


#: Length of ``time_key(...) + ':'`` — where the id starts in an index member.
TIME_KEY_WIDTH: Final = 21


def index_member(micros: int, ident: str) -> str:
    return f"{time_key(micros)}:{ident}"


def member_ident(member: bytes | str) -> str:
    text = member.decode() if isinstance(member, bytes) else member
    return text[TIME_KEY_WIDTH:]


def member_micros(member: bytes | str) -> int:
    text = member.decode() if isinstance(member, bytes) else member
    digits = int(text[1 : TIME_KEY_WIDTH - 1])
    return digits if text[0] == "1" else digits - _TIME_OFFSET


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def owner_part(owner: OwnerScope) -> str:
    """The scope's part of its hash tag: ``-`` or ``t:<escaped tenant id>``."""
    if isinstance(owner, Tenant):
        return f"t:{_escape(owner.id)}"
    if isinstance(owner, Tenantless):
        return "-"
    raise TypeError(f"expected Tenantless or Tenant, got {owner!r}")


def owner_of_part(part: str) -> str | None:
    """The tenant id behind an owner part (``None`` for tenantless); inverse of the above."""
    if part == "-":
        return None
    if not part.startswith("t:") or len(part) < 3:
        raise ValueError(f"not an owner key part: {part!r}")
    return unquote(part[2:])


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"prefix {prefix!r} must not contain '{{' or '}}' (it is a hash tag)")
    return prefix


class Namespace:
    """The keys of one docket namespace (one ``prefix``)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = check_prefix(prefix)
        # inside tags the prefix is escaped so that no prefix can end where another
        # namespace's prefix and owner part begin ("a" + "t:b" against "a:t" + "b")
        self.escaped = self.prefix.replace("%", "%25").replace(":", "%3A")
        home = f"{{{self.escaped}}}"
        self.registry = f"{home}:scopes"
        self.order = f"{home}:order"
        self.schema = f"{home}:schema"
        self.channel = f"{self.prefix}:wake"
        #: commit notices (from the transition scripts) and emissions (from clients)
        self.feed = f"{self.prefix}:feed"
        #: held by the one pruner of the namespace running a pass
        self.prune_lock = f"{home}:prune"
        self.schedules = ScheduleKeys(self.escaped)
        self.queues = QueueKeys(self.escaped)

    @property
    def scope_pattern(self) -> str:
        """A ``SCAN MATCH`` pattern for every key of every owner scope of this namespace."""
        return f"{{{self.escaped}:*"

    def scope(self, owner: OwnerScope) -> ScopeKeys:
        return ScopeKeys(self.escaped, owner_part(owner))

    def scope_of_part(self, part: str) -> ScopeKeys:
        owner_of_part(part)  # validates
        return ScopeKeys(self.escaped, part)


class ScopeKeys:
    """The keys of one owner scope; all share one hash tag."""

    def __init__(self, prefix: str, part: str) -> None:
        self.part = part
        self.tag = f"{{{prefix}:{part}}}"
        self.ready = f"{self.tag}:ready"
        self.claimed = f"{self.tag}:claimed"
        #: the lanes other than (default, 0) whose zsets hold a run (layout 5)
        self.lanes = f"{self.tag}:lanes"
        self.summaries = f"{self.tag}:sum"
        self.index = f"{self.tag}:ix"
        self.written = f"{self.tag}:ew"
        self.finished = f"{self.tag}:fin"

    @property
    def tenant_id(self) -> str | None:
        return owner_of_part(self.part)

    def run(self, run_id: str) -> str:
        return f"{self.tag}:r:{run_id}"

    def transitions(self, run_id: str) -> str:
        return f"{self.tag}:tx:{run_id}"

    def events(self, run_id: str) -> str:
        return f"{self.tag}:ev:{run_id}"

    def event_index(self, run_id: str) -> str:
        return f"{self.tag}:ei:{run_id}"

    def commits_written(self, run_id: str) -> str:
        return f"{self.tag}:ew:{run_id}"

    def by_status(self, status: RunStatus) -> str:
        return f"{self.tag}:ix:s:{status.value}"

    def by_graph(self, graph_id: str) -> str:
        return f"{self.tag}:ix:g:{graph_id}"

    def by_hash(self, graph_hash: str) -> str:
        return f"{self.tag}:ix:h:{graph_hash}"

    def graph(self, graph_id: str) -> str:
        return f"{self.tag}:g:{graph_id}"

    def versions(self, graph_id: str) -> str:
        return f"{self.tag}:gv:{graph_id}"


class ScheduleKeys:
    """The keys of every schedule of one namespace; all share one hash tag."""

    def __init__(self, prefix: str) -> None:
        self.tag = f"{{{prefix}:schedules}}"
        self.documents = f"{self.tag}:doc"
        self.index = f"{self.tag}:ix"
        self.due = f"{self.tag}:due"

    def by_owner(self, owner: OwnerScope) -> str:
        return f"{self.tag}:ix:{owner_part(owner)}"


class QueueKeys:
    """The keys of every queue of one namespace (layout 5); all share one hash tag."""

    def __init__(self, prefix: str) -> None:
        self.tag = f"{{{prefix}:queues}}"
        self.configs = f"{self.tag}:cfg"
        self.buckets = f"{self.tag}:bucket"
        #: a queue's holders key is this followed by its name
        self.holders_head = f"{self.tag}:h:"
        # the admission ledger (Feature.ADMISSION): per queue, each head + its name
        self.admit_seqs = f"{self.tag}:aseq"
        self.admit_where = f"{self.tag}:aw"
        self.entries_head = f"{self.tag}:ae:"
        self.starts_head = f"{self.tag}:as:"
        self.held_head = f"{self.tag}:ah:"
        self.admitted_head = f"{self.tag}:aa:"
        self.tenant_counts_head = f"{self.tag}:at:"

    def holders(self, name: str) -> str:
        return self.holders_head + name

    def admission(self, name: str) -> list[str]:
        """The KEYS of the admission scripts for queue ``name`` (``lua/admission.lua``)."""
        return [
            self.configs,
            self.admit_seqs,
            self.admit_where,
            self.entries_head + name,
            self.starts_head + name,
            self.held_head + name,
            self.admitted_head + name,
            self.tenant_counts_head + name,
        ]


def schedule_member(schedule_id: str, tenant_id: str | None) -> bytes:
    """``(schedule_id, tenant_id or "")`` as bytes whose lexical order is the tuple's.

    UTF-8 keeps code point order; a NUL in the id is written ``00 01`` and the two parts
    are joined by ``00 00``, so an id that is a prefix of another sorts first and the
    first ``00 00`` always ends the id.
    """
    head = schedule_id.encode().replace(b"\x00", b"\x00\x01")
    return head + b"\x00\x00" + (tenant_id or "").encode()


__all__ = [
    "STATUS_ORDER",
    "TIME_KEY_WIDTH",
    "Namespace",
    "QueueKeys",
    "ScheduleKeys",
    "ScopeKeys",
    "check_prefix",
    "index_member",
    "member_ident",
    "member_micros",
    "owner_of_part",
    "owner_part",
    "schedule_member",
    "time_key",
]
