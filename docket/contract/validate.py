"""The one proposal validator every backend calls, and the shared post-lookup rules.

Order (normative, the same for every backend):

1. :func:`validate_initialize` / :func:`validate_commit_claimed` /
   :func:`validate_commit_unclaimed` — pure, before any lookup: proposal shape, run
   durable validity, sequence arithmetic, schedule vs status, then event identity
   (proposal errors win over event errors), then size limits. On success they return a
   :class:`ValidTransition` holding the canonical bytes a backend stores, so nothing is
   encoded twice.
2. The backend looks the run up in the owner's scope (absent → ``NotFound``).
3. :func:`check_replay` — a ``transition_id`` already committed for this run answers
   with the stored run (same content) or ``Conflict`` (other content).
4. :func:`check_identity` — immutable identity before fences.
5. Fences (checkpoint sequence, claim token) → ``StaleCheckpoint``; backend-native.
6. :func:`split_events` — sequence discipline against the stored ``event_seq``; then
   :func:`compare_event` for each re-sent stored event → ``EventConflict``.
7. The backend publishes everything in one atomic write, or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import attrs

from docket.contract.capabilities import Limits
from docket.contract.errors import (
    Conflict,
    EventConflict,
    InvalidGraph,
    InvalidTransition,
    TooLarge,
)
from docket.contract.proposals import (
    WAKE_STATUSES,
    At,
    ClaimedProposal,
    External,
    Immediate,
    InitProposal,
    ReleaseClaim,
    RetainClaim,
    Schedule,
    Terminal,
    UnclaimedProposal,
)
from docket.records import (
    DEFAULT_QUEUE,
    MAX_COUNTER,
    CheckpointType,
    Event,
    GraphRef,
    OwnerScope,
    Run,
    RunStatus,
    checked_event_encodings,
    event_encodings,
    format_timestamp,
    priority_problem,
    queue_name_problem,
    require_owner,
    run_problems,
    run_to_json,
    shown,
    tenant_id_of,
)
from docket.values import (
    JSONValue,
    NonDurableValue,
    canonical_json,
    content_hash,
    sha256_hex,
)

MAX_TOKEN_BYTES = 128


@attrs.frozen(kw_only=True)
class ValidTransition:
    """A proposal that passed pure validation, with the bytes a backend stores."""

    run: Run
    run_json: bytes
    events: tuple[Event, ...]  # unique by seq, ascending
    event_json: tuple[bytes, ...]  # parallel to ``events``
    event_contents: tuple[bytes, ...]  # parallel; equality of events is equality of these
    digest: str  # identifies the proposal's content under its transition_id
    # The proposal's own fields, checked, so a backend applies one value, not three shapes:
    transition_id: str
    checkpoint_type: CheckpointType
    expected_checkpoint_seq: int | None = None  # None: initialize
    claim_token: str | None = None  # set for claimed commits and claimed starts only
    schedule: Schedule | None = None  # None: initialize (which uses wake_at)
    wake_at: datetime | None = None  # initialize only
    queue: str = DEFAULT_QUEUE  # initialize only (Feature.QUEUES)
    priority: int = 0  # initialize only (Feature.QUEUES)


def _invalid(*reasons: str) -> InvalidTransition:
    return InvalidTransition(tuple(reasons))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNTER


def _is_aware(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


def _id_problem(name: str, value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{name}: must be a non-empty string"
    return text_problem(name, value)


def text_problem(name: str, value: object) -> str | None:
    """Text every store can hold: no NUL (PostgreSQL text cannot), no lone surrogate (a
    ``str`` that no store can encode as UTF-8)."""
    if isinstance(value, str) and "\x00" in value:
        return f"{name}: must not contain NUL characters"
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name}: is not valid Unicode text (it holds a lone surrogate)"
    return None


def _owner_problems(owner: OwnerScope) -> list[str]:
    """A tenant id is an id like any other (``Tenant`` only insists on a non-empty str):
    refused before any lookup, so a store never sees text it cannot hold."""
    problem = text_problem("tenant_id", tenant_id_of(require_owner(owner)))
    return [problem] if problem else []


def _oversized_id(limits: Limits, *values: object) -> TooLarge | None:
    """Ids are bounded in UTF-8 bytes; an over-long id is a size limit, like any other."""
    for value in values:
        # surrogatepass: measuring must not raise; _id_problem reports unencodable ids.
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0
        if size > limits.max_id_bytes:
            return TooLarge("max_id_bytes", size, limits.max_id_bytes)
    return None


def token_problem(token: object) -> str | None:
    """Tokens are opaque: 1..128 printable ASCII bytes; never invalid for not being ours."""
    if (
        not isinstance(token, str)
        or not 0 < len(token) <= MAX_TOKEN_BYTES
        or not token.isascii()
        or not token.isprintable()
    ):
        return "claim_token: must be 1..128 printable ASCII characters"
    return None


def _schedule_problem(schedule: object, status: object, *, claimed: bool) -> str | None:
    if isinstance(schedule, RetainClaim):
        if not claimed:
            return "schedule: retain_claim needs a claim; an unclaimed commit must release"
        return None if status is RunStatus.RUNNING else "schedule: retain_claim needs running"
    if not isinstance(schedule, ReleaseClaim):
        return f"schedule: {shown(schedule)} is not RetainClaim or ReleaseClaim"
    wake = schedule.wake
    if not isinstance(wake, Immediate | At | External | Terminal):
        return f"schedule: {shown(wake)} is not Immediate, At, External or Terminal"
    if isinstance(wake, At) and not _is_aware(wake.wake_at):
        return "schedule: At.wake_at must be an aware datetime"
    if status not in WAKE_STATUSES[type(wake)]:
        return f"schedule: {type(wake).__name__} does not fit a {shown(status)} run"
    return None


def _schedule_doc(schedule: Schedule) -> JSONValue:
    if isinstance(schedule, RetainClaim):
        return "retain"
    wake = schedule.wake
    if isinstance(wake, At):
        return ["at", format_timestamp(wake.wake_at)]
    return type(wake).__name__.lower()


def _common(
    transition_id: object,
    run: object,
    checkpoint_type: object,
    events: object,
    limits: Limits,
    extra: list[str],
) -> list[str]:
    problems = list(extra)
    id_problem = _id_problem("transition_id", transition_id)
    if id_problem:
        problems.append(id_problem)
    if not isinstance(checkpoint_type, CheckpointType):
        problems.append(f"checkpoint_type: {shown(checkpoint_type)} is not a checkpoint type")
    problems.extend(run_problems(run))
    if isinstance(run, Run):
        for name in ("id", "graph_id", "graph_hash"):
            text = text_problem(name, getattr(run, name))
            if text:
                problems.append(text)
    if not isinstance(events, Sequence) or isinstance(events, str | bytes):
        problems.append(f"events: expected a sequence of Event, got {type(events).__name__}")
    return problems


def _finish(
    kind: str,
    transition_id: str,
    header: JSONValue,
    run: Run,
    events: Sequence[object],
    limits: Limits,
    *,
    checkpoint_type: CheckpointType,
    expected_checkpoint_seq: int | None = None,
    claim_token: str | None = None,
    schedule: Schedule | None = None,
    wake_at: datetime | None = None,
) -> ValidTransition | InvalidTransition | EventConflict | TooLarge:
    """Event identity, then limits, then the canonical bytes and the digest; the keyword
    arguments are the checked proposal fields the result carries."""
    oversized = _oversized_id(limits, transition_id, run.id, run.graph_id, run.graph_hash)
    if oversized is not None:
        return oversized
    if len(events) > limits.max_events_per_transition:
        return TooLarge("max_events_per_transition", len(events), limits.max_events_per_transition)
    by_seq: dict[int, tuple[Event, bytes, bytes]] = {}
    for item in events:
        # The event's checks and, usually, its encodings in one go: one encoding of
        # payload and metadata gives the stored JSON, the content and the size.
        checked = checked_event_encodings(item, run.id)
        if isinstance(checked, list):
            return InvalidTransition(tuple(checked))
        assert isinstance(item, Event)
        if item.seq > run.event_seq:
            return _invalid(f"event[{item.seq}]: seq is past the run's event_seq {run.event_seq}")
        if checked is None:
            try:
                checked = event_encodings(item)
            except ValueError as exc:  # e.g. a lone surrogate: durable in shape, not encodable
                return _invalid(f"event[{item.seq}]: cannot be encoded ({exc})")
        stored, content, size = checked
        if size > limits.max_event_bytes:
            return TooLarge("max_event_bytes", size, limits.max_event_bytes)
        seen = by_seq.get(item.seq)
        if seen is not None and seen[2] != content:
            return EventConflict(item.seq)
        by_seq[item.seq] = (item, stored, content)
    try:
        run_json = run_to_json(run)
    except (NonDurableValue, ValueError, TypeError) as exc:  # belt and braces after validation
        return _invalid(f"run: cannot be encoded ({exc})")
    if len(run_json) > limits.max_run_bytes:
        return TooLarge("max_run_bytes", len(run_json), limits.max_run_bytes)
    ordered = [by_seq[seq] for seq in sorted(by_seq)]
    contents = tuple(content for _, _, content in ordered)
    event_digests: list[JSONValue] = [[e.seq, sha256_hex(c)] for e, _, c in ordered]
    digest = content_hash(
        {"kind": kind, "header": header, "run": sha256_hex(run_json), "events": event_digests}
    )
    return ValidTransition(
        run=run,
        run_json=run_json,
        events=tuple(e for e, _, _ in ordered),
        event_json=tuple(stored for _, stored, _ in ordered),
        event_contents=contents,
        digest=digest,
        transition_id=transition_id,
        checkpoint_type=checkpoint_type,
        expected_checkpoint_seq=expected_checkpoint_seq,
        claim_token=claim_token,
        schedule=schedule,
        wake_at=wake_at,
    )


ValidationResult = ValidTransition | InvalidTransition | EventConflict | TooLarge


def validate_initialize(
    owner: OwnerScope, proposal: object, events: Sequence[Event], limits: Limits
) -> ValidationResult:
    """Pure checks of an ``initialize`` call. Raises only for a non-owner scope (misuse)."""
    return _validate_initialize(owner, proposal, events, limits, claimed=False)


def validate_initialize_claimed(
    owner: OwnerScope,
    proposal: object,
    events: Sequence[Event],
    claim_token: object,
    limits: Limits,
) -> ValidationResult:
    """``initialize_claimed`` (``ClaimedStarts``): ``initialize``'s checks and the token's.
    The token is part of the digest, and the result carries it as ``claim_token``."""
    return _validate_initialize(
        owner, proposal, events, limits, claimed=True, claim_token=claim_token
    )


def _validate_initialize(
    owner: OwnerScope,
    proposal: object,
    events: Sequence[Event],
    limits: Limits,
    *,
    claimed: bool,
    claim_token: object = None,
) -> ValidationResult:
    oversized = _oversized_id(limits, tenant_id_of(require_owner(owner)))
    if oversized is not None:
        return oversized
    if not isinstance(proposal, InitProposal):
        return _invalid(f"proposal: expected InitProposal, got {type(proposal).__name__}")
    extra = _owner_problems(owner)
    if claimed:
        token = token_problem(claim_token)
        if token:
            extra.append(token)
    if proposal.checkpoint_type is not CheckpointType.RUN_INITIALIZED:
        extra.append("checkpoint_type: initialize commits run_initialized")
    if not _is_aware(proposal.wake_at):
        extra.append("wake_at: must be an aware datetime")
    extra.extend(
        p for p in (queue_name_problem(proposal.queue), priority_problem(proposal.priority)) if p
    )
    run = proposal.run
    if isinstance(run, Run):
        if run.status is not RunStatus.RUNNING:
            extra.append(f"status: a new run starts running, not {shown(run.status)}")
        if _is_count(run.checkpoint_seq) and run.checkpoint_seq < 1:
            extra.append("checkpoint_seq: initialize commits sequence 1 or later")
    problems = _common(proposal.transition_id, run, proposal.checkpoint_type, events, limits, extra)
    if problems:
        return InvalidTransition(tuple(problems))
    assert isinstance(run, Run)
    seqs = sorted({e.seq for e in events if isinstance(e, Event) and isinstance(e.seq, int)})
    header: JSONValue = format_timestamp(proposal.wake_at)
    if claimed:
        header = [header, str(claim_token)]
    if proposal.queue != DEFAULT_QUEUE or proposal.priority != 0:
        # only then, so the digests of plain starts stay what they always were
        header = [header, proposal.queue, proposal.priority]
    result = _finish(
        "initialize_claimed" if claimed else "initialize",
        proposal.transition_id,
        header,
        run,
        events,
        limits,
        checkpoint_type=CheckpointType.RUN_INITIALIZED,
        claim_token=str(claim_token) if claimed else None,
        wake_at=proposal.wake_at,
    )
    if not isinstance(result, ValidTransition):
        return result
    result = attrs.evolve(result, queue=proposal.queue, priority=proposal.priority)
    if seqs != list(range(1, run.event_seq + 1)):
        return _invalid(f"events: a new run publishes seqs 1..{run.event_seq} exactly, got {seqs}")
    return result


def validate_commit_claimed(
    owner: OwnerScope, proposal: object, events: Sequence[Event], limits: Limits
) -> ValidationResult:
    require_owner(owner)
    if not isinstance(proposal, ClaimedProposal):
        return _invalid(f"proposal: expected ClaimedProposal, got {type(proposal).__name__}")
    extra = _owner_problems(owner)
    expected = proposal.expected_checkpoint_seq
    if not _is_count(expected):
        extra.append("expected_checkpoint_seq: must be a non-negative integer")
    token = token_problem(proposal.claim_token)
    if token:
        extra.append(token)
    run = proposal.run
    if isinstance(run, Run):
        if _is_count(expected) and run.checkpoint_seq != expected + 1:
            extra.append(f"checkpoint_seq: must be expected + 1 = {expected + 1}")
        schedule = _schedule_problem(proposal.schedule, run.status, claimed=True)
        if schedule:
            extra.append(schedule)
    problems = _common(proposal.transition_id, run, proposal.checkpoint_type, events, limits, extra)
    if problems:
        return InvalidTransition(tuple(problems))
    assert isinstance(run, Run)
    header: JSONValue = [
        expected,
        proposal.claim_token,
        str(proposal.checkpoint_type),
        _schedule_doc(proposal.schedule),
    ]
    return _finish(
        "commit_claimed",
        proposal.transition_id,
        header,
        run,
        events,
        limits,
        checkpoint_type=proposal.checkpoint_type,
        expected_checkpoint_seq=expected,
        claim_token=proposal.claim_token,
        schedule=proposal.schedule,
    )


def validate_commit_unclaimed(
    owner: OwnerScope,
    expected_checkpoint_seq: object,
    proposal: object,
    events: Sequence[Event],
    limits: Limits,
) -> ValidationResult:
    require_owner(owner)
    if not isinstance(proposal, UnclaimedProposal):
        return _invalid(f"proposal: expected UnclaimedProposal, got {type(proposal).__name__}")
    extra = _owner_problems(owner)
    expected = expected_checkpoint_seq
    if not _is_count(expected):
        extra.append("expected_checkpoint_seq: must be a non-negative integer")
    run = proposal.run
    if isinstance(run, Run):
        if isinstance(expected, int) and _is_count(expected) and run.checkpoint_seq != expected + 1:
            extra.append(f"checkpoint_seq: must be expected + 1 = {expected + 1}")
        schedule = _schedule_problem(proposal.schedule, run.status, claimed=False)
        if schedule:
            extra.append(schedule)
    problems = _common(
        proposal.transition_id,
        run,
        proposal.checkpoint_type,
        events,
        limits,
        extra,
    )
    if problems:
        return InvalidTransition(tuple(problems))
    assert isinstance(run, Run)
    header: JSONValue = [
        expected if isinstance(expected, int) else None,
        str(proposal.checkpoint_type),
        _schedule_doc(proposal.schedule),
    ]
    assert isinstance(expected, int)  # checked above
    return _finish(
        "commit_unclaimed",
        proposal.transition_id,
        header,
        run,
        events,
        limits,
        checkpoint_type=proposal.checkpoint_type,
        expected_checkpoint_seq=expected,
        schedule=proposal.schedule,
    )


# -- shared post-lookup rules ---------------------------------------------------------------


@attrs.frozen
class Replay:
    """The transition already committed with identical content: answer the stored run."""


def check_replay(
    committed: Mapping[str, str], transition_id: str, digest: str
) -> Replay | Conflict | None:
    """``committed`` maps the run's recorded transition ids to their content digests."""
    stored = committed.get(transition_id)
    if stored is None:
        return None
    if stored == digest:
        return Replay()
    return Conflict(f"transition_id {transition_id!r} was committed with different content")


def check_identity(stored: Run, proposed: Run) -> InvalidTransition | None:
    """Immutable identity (id, graph, hash, started_at) is checked before any fence."""
    if stored.immutable_identity != proposed.immutable_identity:
        return _invalid("run: immutable identity (graph_id, graph_hash, started_at) changed")
    return None


def split_events(
    stored_event_seq: int, valid: ValidTransition
) -> tuple[list[int], list[int]] | InvalidTransition:
    """Indices of (new, re-sent) events, enforcing the sequence discipline.

    New sequences are exactly ``stored_event_seq + 1 .. run.event_seq`` (contiguous,
    complete); events at or below ``stored_event_seq`` are re-sends, which must match
    what is stored (:func:`compare_event`); a re-send of a pruned event is dropped.
    """
    proposed = valid.run.event_seq
    if proposed < stored_event_seq:
        return _invalid(f"event_seq: {proposed} goes back from the stored {stored_event_seq}")
    new = [i for i, e in enumerate(valid.events) if e.seq > stored_event_seq]
    old = [i for i, e in enumerate(valid.events) if e.seq <= stored_event_seq]
    if [valid.events[i].seq for i in new] != list(range(stored_event_seq + 1, proposed + 1)):
        return _invalid(
            f"events: new seqs must be exactly {stored_event_seq + 1}..{proposed}, got "
            f"{[valid.events[i].seq for i in new]}"
        )
    return new, old


def compare_event(stored_content: bytes | None, valid: ValidTransition, index: int) -> bool:
    """Whether a re-sent event agrees with the stored one (absent = pruned = fine)."""
    return stored_content is None or stored_content == valid.event_contents[index]


def graph_document_id(document: Mapping[str, object]) -> object:
    """The graph id a stored graph document declares.

    A stored graph is the compiler's effective document, an envelope
    ``{"docket": 1, "kind": "graph", "graph": {"id": ..., ...}}`` (see
    ``docket.graph.compiler.effective_document``); anything else declares no id.
    """
    inner = document.get("graph")
    if document.get("kind") != "graph" or not isinstance(inner, dict):
        return None
    return inner.get("id")


def validate_graph_save(
    owner: OwnerScope, ref: object, document: object, limits: Limits
) -> bytes | InvalidGraph | TooLarge:
    """Pure checks of ``save_graph``; returns the canonical bytes to store.

    The document must be durable, be a graph envelope naming ``ref.graph_id``, and hash
    to ``ref.graph_hash``. (Compiling it is the facade's job: the store holds any
    well-identified document; whoever runs it compiles what it loads.)
    """
    oversized = _oversized_id(limits, tenant_id_of(require_owner(owner)))
    if oversized is not None:
        return oversized
    if not isinstance(ref, GraphRef):
        return InvalidGraph((f"ref: expected GraphRef, got {type(ref).__name__}",))
    problems = _owner_problems(owner)
    problems.extend(
        p
        for p in (_id_problem("graph_id", ref.graph_id), _id_problem("graph_hash", ref.graph_hash))
        if p
    )
    if not isinstance(document, dict):
        problems.append(f"document: expected an object, got {type(document).__name__}")
    if problems:
        return InvalidGraph(tuple(problems))
    assert isinstance(document, dict)
    oversized = _oversized_id(limits, ref.graph_id, ref.graph_hash)
    if oversized is not None:
        return oversized
    try:
        data = canonical_json(document)
    except NonDurableValue as exc:
        return InvalidGraph(exc.reasons)
    except ValueError as exc:  # e.g. a lone surrogate: durable in shape, not encodable
        return InvalidGraph((f"document: cannot be encoded ({exc})",))
    if len(data) > limits.max_graph_bytes:
        return TooLarge("max_graph_bytes", len(data), limits.max_graph_bytes)
    declared = graph_document_id(document)
    if declared != ref.graph_id:
        return InvalidGraph(
            (f"document: declares graph id {shown(declared)}, not {ref.graph_id!r}",)
        )
    if sha256_hex(data) != ref.graph_hash:
        return InvalidGraph(("graph_hash: does not match the document's content hash",))
    return data


__all__ = [
    "MAX_TOKEN_BYTES",
    "Replay",
    "ValidTransition",
    "ValidationResult",
    "check_identity",
    "check_replay",
    "compare_event",
    "graph_document_id",
    "split_events",
    "text_problem",
    "token_problem",
    "validate_commit_claimed",
    "validate_commit_unclaimed",
    "validate_graph_save",
    "validate_initialize",
    "validate_initialize_claimed",
]
