"""The differential driver: a backend against the reference, one seeded stream at a time.

Where the kit's cases check one rule each, the driver checks that a backend answers
*every* call exactly as the reference :class:`~docket.contract.memory.MemoryBackend`
does, over long random sequences. One seed makes one stream of about 150 operations
(``STEPS``), sent to both backends under one shared :class:`~docket.clock.ManualClock`:

* graph saves and reads (``save_graph``, ``fetch_graph``, ``fetch_latest_graph_ref``,
  ``list_graph_versions``), in four owner scopes (one tenant id, ``c}{``, breaks naive
  key hashing);
* ``initialize`` (published and unpublished graphs, with events, sent twice like an
  ambiguous reply); ``commit_claimed`` and ``commit_unclaimed`` with every schedule
  (``RetainClaim``, ``ReleaseClaim`` of ``Immediate``/``At``/``External``/``Terminal``),
  stale fences, right, old and bogus tokens, re-sent, gapped and conflicting events, and
  replays of the same transition id;
* ``claim_due`` with every policy shape (limit, orphan TTL, attempts, class preference,
  ``now``); ``refresh_claim``, ``release_claim``, ``abandon_claim`` (stale, with and
  without backoff, non-poisoning, chained until the run is poisoned) and
  ``retry_poisoned_run``;
* reads: ``inspect_run``, ``list_runs`` under every scope and filter (graph id, graph
  hash, statuses), following its cursor, ``list_events``, ``fetch_event``,
  ``fetch_latest_event``;
* the clock moving on; and at the end every run's ``inspect_run`` and whole event list.

Each answer is compared with ``==`` (records are attrs values). A ``TypeError`` or
``ValueError`` counts as the answer ``("raised", name)``; any other exception ends the
stream, with a note naming the seed, the step and the calls so far. Claim tokens are
random by design, so a ``ClaimBatch``'s tokens are replaced by labels in the order each
side minted them (``T0``, ``T1``, …) and calls name tokens by label, each side getting
its own token back. The stream depends only on the seed and the reference's answers (the
generator reads state from the reference), so a seed replays exactly, and a set of seeds
reaches the same kinds of answer on every backend that agrees; the kit's own tests check
that :data:`SEEDS` reach every kind in :data:`REQUIRED_KINDS`.

Every call goes through the bundle's store properties (``backend.runs.claim_due(...)``),
as the runtime makes them.

**Using it.** A backend supplies a factory: ``factory(clock) -> Backend``, an unopened
backend with a fresh, empty store that takes its time from ``clock``; the driver opens
it before the stream and closes it after::

    @pytest.mark.parametrize("seed", SEEDS)
    def test_same_answers_as_the_reference(seed: int) -> None:
        run_seed(lambda clock: MyBackend(fresh_url(), clock=clock), seed)

or, without writing a test, from the shell (the factory is called with the keywords it
accepts among ``clock=`` and ``namespace=``, as with the kit's plugin)::

    python -m docket_contract_tests.differential --backend 'mystore://host/{namespace}'
    python -m docket_contract_tests.differential --backend-factory my_pkg.testing:make

**Failures.** The first answer that differs raises :class:`Divergence` (an
``AssertionError``): the seed and step, the call, the first differing field (a path into
the answer such as ``answer.leases[0].claim_attempt``) with both values, both whole
answers, and the numbered list of every call the stream made up to it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import random
import secrets
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from docket.clock import ManualClock
from docket.contract import (
    AbandonPolicy,
    At,
    Backend,
    Backoff,
    ClaimBatch,
    ClaimClass,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    External,
    GraphListQuery,
    Immediate,
    InitProposal,
    ReleaseClaim,
    RetainClaim,
    RunListQuery,
    Schedule,
    Terminal,
    UnclaimedProposal,
    Wake,
)
from docket.contract.memory import MemoryBackend
from docket.records import (
    SYSTEM,
    TENANTLESS,
    Event,
    GraphRef,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Scope,
    Tenant,
)
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import CLOCK_START

#: Builds the backend under test: unopened, an empty store, its time taken from the clock.
SubjectFactory = Callable[[ManualClock], Backend]

#: The seeds each bundled backend runs, and the operations per stream.
SEEDS = range(40)
STEPS = 150

#: The kinds of reference answer :data:`SEEDS` must reach, so no comparison is vacuous
#: (``ClaimBatch+lease``: a batch with leases; ``raised``: a TypeError/ValueError).
REQUIRED_KINDS = frozenset(
    {
        "Run",
        "NotFound",
        "Conflict",
        "StaleCheckpoint",
        "EventConflict",
        "InvalidTransition",
        "ClaimBatch+lease",
        "ClaimBatch+poisoned",
        "ClaimRefreshed",
        "ClaimLost",
        "Rescheduled",
        "Poisoned",
        "StaleAbandon",
        "InactiveRun",
        "RunInfo",
        "EventPage",
        "RunPage",
        "GraphVersion",
        "GraphRef",
        "GraphVersionPage",
        "raised",
    }
)

OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b"), Tenant("c}{")]
RUN_IDS = ["r1", "r2", "r3", "r4", "r5"]
UNPUBLISHED = 9  # a graph variant no stream ever saves
STATUS_OF: dict[type, list[RunStatus]] = {
    Immediate: [RunStatus.RUNNING],
    At: [RunStatus.RUNNING],
    External: [RunStatus.WAITING],
    Terminal: [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED],
}
_MISSING = object()


class Divergence(AssertionError):
    """The backend under test answered one call differently from the reference."""

    def __init__(
        self,
        *,
        seed: int,
        step: int,
        call: str,
        path: str,
        reference: object,
        subject: object,
        answers: tuple[object, object],
        calls: Sequence[str],
    ) -> None:
        self.seed, self.step, self.call, self.path = seed, step, call, path
        self.reference, self.subject = reference, subject
        self.answers = answers
        self.calls = tuple(calls)
        listing = "\n".join(f"  {n:>4}. {text}" for n, text in enumerate(self.calls, 1))
        super().__init__(
            f"seed {seed}, step {step}: {call}\n"
            f"first difference at {path}:\n"
            f"  reference {_cut(reference)}\n"
            f"  subject   {_cut(subject)}\n"
            f"whole answers:\n"
            f"  reference {_cut(answers[0])}\n"
            f"  subject   {_cut(answers[1])}\n"
            f"the {len(self.calls)} operations of seed {seed} so far "
            f"(the last differed):\n{listing}"
        )


def first_difference(
    reference: object, subject: object, path: str = "answer"
) -> tuple[str, object, object] | None:
    """The first place two answers differ: ``(path, reference part, subject part)``.

    Walks attrs records field by field, sequences item by item and dicts key by key;
    ``None`` when the answers are equal.
    """
    if reference == subject:
        return None
    kind = type(reference)
    if kind is type(subject):
        found: tuple[str, object, object] | None = None
        if attrs.has(kind):
            for field in attrs.fields(kind):
                here = f"{path}.{field.name}"
                found = found or first_difference(
                    getattr(reference, field.name), getattr(subject, field.name), here
                )
        elif isinstance(reference, list | tuple) and isinstance(subject, list | tuple):
            for index, (left, right) in enumerate(zip(reference, subject, strict=False)):
                found = found or first_difference(left, right, f"{path}[{index}]")
            if found is None and len(reference) != len(subject):
                found = (f"len({path})", len(reference), len(subject))
        elif isinstance(reference, dict) and isinstance(subject, dict):
            for key in sorted(reference.keys() | subject.keys(), key=repr):
                left, right = reference.get(key, _MISSING), subject.get(key, _MISSING)
                found = found or first_difference(left, right, f"{path}[{key!r}]")
        if found is not None:
            return found
    return (path, reference, subject)


def kind_of(answer: object) -> str:
    """The kind of an answer, as :data:`REQUIRED_KINDS` names it."""
    if isinstance(answer, ClaimBatch):
        return "ClaimBatch+" + ("poisoned" if answer.poisoned else "lease" if answer.leases else "")
    if isinstance(answer, RunInfo):
        return "RunInfo"
    if isinstance(answer, tuple) and answer[:1] == ("raised",):
        return "raised"
    return type(answer).__name__


def missing_kinds(seen: set[str] | frozenset[str]) -> list[str]:
    """The required kinds of answer a set of streams never produced (sorted)."""
    return sorted(REQUIRED_KINDS - seen)


async def compare(factory: SubjectFactory, seed: int, steps: int = STEPS) -> frozenset[str]:
    """Drive one seeded stream through the reference and ``factory``'s backend.

    Raises :class:`Divergence` at the first answer that differs; returns the kinds of
    answer the stream produced (see :func:`missing_kinds`).
    """
    clock = ManualClock(CLOCK_START)
    subject = factory(clock)
    await subject.open()
    try:
        stream = _Stream(seed, subject, clock)
        await stream.run(steps)
        return frozenset(stream.kinds)
    finally:
        await subject.close()


def run_seed(factory: SubjectFactory, seed: int, steps: int = STEPS) -> frozenset[str]:
    """:func:`compare` in a fresh event loop (for a plain, synchronous test)."""
    return asyncio.run(compare(factory, seed, steps))


# -- the stream ---------------------------------------------------------------------------------


@attrs.frozen
class _Token:
    """A claim token named by label in a call; each side gets its own token for it."""

    label: str

    def __repr__(self) -> str:
        return self.label


class _Labels:
    """Claim tokens by the order each side minted them; the last lease of each run."""

    def __init__(self) -> None:
        self.label_of: list[dict[str, str]] = [{}, {}]
        self.token_of: list[dict[str, str]] = [{}, {}]
        self.last: dict[tuple[OwnerScope, str], str] = {}

    def relabel(self, side: int, answer: object) -> object:
        if not isinstance(answer, ClaimBatch):
            return answer
        leases = []
        for lease in answer.leases:
            label = f"T{len(self.label_of[side])}"
            self.label_of[side][lease.claim_token] = label
            self.token_of[side][label] = lease.claim_token
            if side == 0:
                self.last[(lease.owner, lease.run_id)] = label
            leases.append(attrs.evolve(lease, claim_token=label))
        return attrs.evolve(answer, leases=tuple(leases))

    def issued(self) -> int:
        return len(self.label_of[0])

    def resolve(self, side: int, arg: object) -> object:
        """The argument as ``side`` receives it: its own token for each label."""
        if isinstance(arg, _Token):
            return self.token_of[side].get(arg.label, arg.label)  # unknown: a bogus token
        if isinstance(arg, ClaimedProposal):
            return attrs.evolve(
                arg, claim_token=self.token_of[side].get(arg.claim_token, arg.claim_token)
            )
        return arg


class _Stream:
    """The reference, the subject and the generator of one seeded stream."""

    def __init__(self, seed: int, subject: Backend, clock: ManualClock) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = clock
        self.sides: tuple[Backend, Backend] = (MemoryBackend(clock=clock), subject)
        self.labels = _Labels()
        self.kinds: set[str] = set()
        self.calls: list[str] = []
        self.step = 0

    async def call(self, store: str, method: str, *args: object) -> object:
        """Send one store call to both sides; return the reference's (relabelled) answer."""
        text = f"{store}.{method}({', '.join(_brief(arg) for arg in args)})"
        self.calls.append(f"[step {self.step}] {text}")
        answers: list[object] = []
        for side, backend in enumerate(self.sides):
            resolved = [self.labels.resolve(side, arg) for arg in args]
            try:
                answer: object = await getattr(getattr(backend, store), method)(*resolved)
            except (TypeError, ValueError) as exc:
                answer = ("raised", type(exc).__name__)
            except Exception as exc:
                exc.add_note(
                    f"differential seed {self.seed}, step {self.step}, "
                    f"{'reference' if side == 0 else 'subject'} raised on {text}; calls so far:\n"
                    + "\n".join(self.calls[-40:])
                )
                raise
            answers.append(self.labels.relabel(side, answer))
        self.kinds.add(kind_of(answers[0]))
        if answers[0] != answers[1]:
            found = first_difference(answers[0], answers[1])
            path, reference, subject = found or ("answer", answers[0], answers[1])
            raise Divergence(
                seed=self.seed,
                step=self.step,
                call=text,
                path=path,
                reference=reference,
                subject=subject,
                answers=(answers[0], answers[1]),
                calls=self.calls,
            )
        return answers[0]

    # -- choices -----------------------------------------------------------------------------

    def pick(self, options: Sequence[Any]) -> Any:
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def tid(self) -> str:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4).hex  # seeded: replays exactly

    def moment(self) -> datetime:
        return self.clock() + timedelta(seconds=self.pick([-30, -20, -1, 0, 0, 1, 2, 5, 30, 45]))

    def now_arg(self) -> datetime | None:
        chosen: datetime | None = self.pick([None, None, self.clock(), self.moment()])
        return chosen

    def token(self, owner: OwnerScope, run_id: str) -> _Token:
        """Mostly the run's last lease, else an older token or a bogus one."""
        last = self.labels.last.get((owner, run_id))
        if last is not None and self.chance(0.65):
            return _Token(last)
        issued = self.labels.issued()
        if issued and self.chance(0.8):
            return _Token(f"T{self.rng.randrange(issued)}")
        return _Token("bogus-token")

    def target(self, leased: float) -> tuple[OwnerScope, str]:
        """A run, with probability ``leased`` one that was leased at some point."""
        if self.labels.last and self.chance(leased):
            picked: tuple[OwnerScope, str] = self.pick(sorted(self.labels.last, key=repr))
            return picked
        return self.pick(OWNERS), self.pick(RUN_IDS)

    def schedule(self, with_claim: bool) -> tuple[Schedule, RunStatus]:
        if with_claim and self.chance(0.3):
            return RetainClaim(), RunStatus.RUNNING
        wakes: list[Wake] = [Immediate(), At(self.moment()), External(), Terminal()]
        wake = self.pick(wakes)
        return ReleaseClaim(wake), self.pick(STATUS_OF[type(wake)])

    async def stored(self, owner: OwnerScope, run_id: str) -> Run | None:
        found = await self.sides[0].runs.fetch_run(owner, run_id)
        return found if isinstance(found, Run) else None

    # -- operations --------------------------------------------------------------------------

    async def initialize(self) -> None:
        owner, run_id = self.pick(OWNERS), self.pick(RUN_IDS)
        ref = graph_ref(graph_document("g", self.pick([0, 0, 0, 1, UNPUBLISHED])))
        count = self.pick([0, 0, 1, 2, 3])
        started = self.clock() - timedelta(seconds=self.pick([0, 0, 1, 2]))
        run = attrs.evolve(new_run(run_id, ref, started), event_seq=count)
        proposal = init_proposal(run, self.moment(), transition_id=self.tid())
        events = events_for(run, self.pick([started, self.clock()]), range(1, count + 1))
        for _ in range(2 if self.chance(0.25) else 1):  # an ambiguous reply, sent again
            await self.call("transitions", "initialize", owner, proposal, events)

    async def commit(self) -> None:
        owner, run_id = self.pick(OWNERS), self.pick(RUN_IDS)
        run = await self.stored(owner, run_id) or new_run(
            run_id, graph_ref(graph_document("g")), CLOCK_START
        )
        with_claim = self.chance(0.6)
        schedule, status = self.schedule(with_claim)
        nxt = successor(run, self.clock(), new_events=self.pick([0, 1, 2]), status=status)
        seqs = list(range(run.event_seq + 1, nxt.event_seq + 1))
        if run.event_seq and self.chance(0.25):
            seqs.insert(0, run.event_seq)  # re-send the latest stored event
        if seqs and self.chance(0.1):
            seqs = seqs[1:]  # leave a gap
        events = events_for(nxt, self.clock(), seqs)
        if events and self.chance(0.1):
            events[0] = attrs.evolve(events[0], payload={"changed": True})
        expected = run.checkpoint_seq - self.pick([0, 0, 0, 1])
        times = 2 if self.chance(0.2) else 1  # a replay of the same transition id
        if with_claim:
            token = self.token(owner, run_id)
            proposal: ClaimedProposal | UnclaimedProposal = claimed(
                nxt, token.label, schedule=schedule, expected=expected, transition_id=self.tid()
            )
            for _ in range(times):
                await self.call("transitions", "commit_claimed", owner, proposal, events)
        else:
            assert isinstance(schedule, ReleaseClaim)
            proposal = unclaimed(nxt, wake=schedule.wake, transition_id=self.tid())
            for _ in range(times):
                await self.call(
                    "transitions", "commit_unclaimed", owner, expected, proposal, events
                )

    async def claim(self) -> None:
        policy = ClaimPolicy(
            limit=self.pick([1, 1, 2, 3, 5, 6]),
            orphan_ttl=timedelta(seconds=self.pick([0, 5, 10, 60, 90])),
            max_claim_attempts=self.pick([1, 2, 3, 4]),
            preference=self.pick([None, ClaimClass.READY, ClaimClass.EXPIRED]),
            now=self.now_arg(),
        )
        await self.call("runs", "claim_due", policy)

    async def hold(self) -> None:
        """refresh / release / abandon / retry, mostly aimed at runs that were leased."""
        owner, run_id = self.target(leased=0.6)
        token = self.token(owner, run_id)
        now = self.now_arg()
        kind = self.pick(["refresh", "release", "abandon", "abandon", "retry"])
        if kind == "refresh":
            await self.call("runs", "refresh_claim", owner, run_id, token, now)
        elif kind == "release":
            await self.call("runs", "release_claim", owner, run_id, token, now)
        elif kind == "retry":
            await self.call("runs", "retry_poisoned_run", owner, run_id, now)
        else:
            run = await self.stored(owner, run_id)
            base = self.clock() if now is None else now
            policy = AbandonPolicy(
                expected_checkpoint_seq=(run.checkpoint_seq if run else 1)
                - self.pick([0, 0, 0, 1]),
                retry_at=base + timedelta(seconds=self.pick([-1, 0, 5, 7, 9])),
                max_claim_abandons=self.pick([1, 2]),
                non_poisoning=self.chance(0.3),
                backoff=self.pick(
                    [
                        None,
                        Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=4)),
                        Backoff(base=timedelta(seconds=2), cap=timedelta(seconds=5)),
                    ]
                ),
                now=now,
            )
            await self.call("runs", "abandon_claim", owner, run_id, token, policy)

    async def exhaust(self) -> None:
        """Abandon a leased run, claim again, abandon again: until it is poisoned."""
        if not self.labels.last:
            return
        owner, run_id = self.target(leased=1.0)
        limit = self.pick([1, 2])
        again = self.pick(
            [
                ClaimPolicy(limit=4, orphan_ttl=timedelta(minutes=5), max_claim_attempts=5),
                ClaimPolicy(limit=5, orphan_ttl=timedelta(seconds=60), max_claim_attempts=3),
                ClaimPolicy(limit=8, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3),
            ]
        )
        for _ in range(limit + 1):
            run = await self.stored(owner, run_id)
            token = _Token(self.labels.last.get((owner, run_id), "bogus-token"))
            policy = AbandonPolicy(
                expected_checkpoint_seq=run.checkpoint_seq if run else 1,
                retry_at=self.clock(),
                max_claim_abandons=limit,
                now=self.clock(),
            )
            await self.call("runs", "abandon_claim", owner, run_id, token, policy)
            await self.call("runs", "claim_due", again)

    async def read(self) -> None:
        owner, run_id = self.pick(OWNERS), self.pick(RUN_IDS)
        kind = self.pick(["inspect", "list", "events", "event", "latest", "graphs"])
        if kind == "inspect":
            await self.call("runs", "inspect_run", owner, run_id)
        elif kind == "list":
            await self.list_runs()
        elif kind == "events":
            query = EventListQuery(
                after_seq=self.pick([0, 1, 2, 3]), limit=self.pick([1, 2, 3, 50, 100])
            )
            await self.call("events", "list_events", owner, run_id, query)
        elif kind == "event":
            seq = self.pick([1, 2, 3, 4, 7, 9])
            await self.call("events", "fetch_event", owner, run_id, seq)
        elif kind == "latest":
            await self.call("events", "fetch_latest_event", owner, run_id)
        else:
            await self.call("graphs", "fetch_latest_graph_ref", owner, "g")
            await self.call("graphs", "list_graph_versions", owner, "g", GraphListQuery(limit=1))

    async def list_runs(self) -> None:
        """One listing, under any scope and filter, following its cursor a few pages."""
        scope: Scope = self.pick([SYSTEM, SYSTEM, *OWNERS])
        query = RunListQuery(
            limit=self.pick([1, 2, 3, 5, 10, 20]),
            graph_id=self.pick([None, None, "g", "other"]),
            graph_hash=self.pick([None, graph_ref(graph_document("g", 1)).graph_hash]),
            statuses=self.pick(
                [
                    None,
                    frozenset({RunStatus.RUNNING}),
                    frozenset({RunStatus.DONE}),
                    frozenset({RunStatus.DONE, RunStatus.WAITING}),
                    frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED}),
                ]
            ),
        )
        for _ in range(5):
            page = await self.call("runs", "list_runs", scope, query)
            if not getattr(page, "has_more", False):
                break
            query = attrs.evolve(query, before=getattr(page, "next_before", None))

    async def publish(self) -> None:
        owner = self.pick(OWNERS)
        document = graph_document("g", self.pick([0, 1, 2]))
        ref = graph_ref(document)
        await self.call("graphs", "save_graph", owner, ref, document)
        await self.call("graphs", "fetch_graph", owner, ref)

    async def tick(self) -> None:
        by = timedelta(seconds=self.pick([1, 3, 4, 15, 20, 61, 70, 95]))
        self.clock.advance(by)
        self.calls.append(
            f"[step {self.step}] clock + {by.total_seconds():g}s -> {_at(self.clock())}"
        )

    async def run(self, steps: int) -> None:
        for owner in OWNERS:
            for variant in (0, 1):
                document = graph_document("g", variant)
                await self.call("graphs", "save_graph", owner, graph_ref(document), document)
            self.clock.advance(timedelta(microseconds=1))
        weighted: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.initialize, 4),
            (self.commit, 6),
            (self.claim, 5),
            (self.hold, 5),
            (self.exhaust, 1),
            (self.read, 5),
            (self.publish, 1),
            (self.tick, 3),
        ]
        menu = [operation for operation, weight in weighted for _ in range(weight)]
        for self.step in range(1, steps + 1):
            await self.rng.choice(menu)()
        self.step = steps + 1  # the final comparison, run by run
        everything = EventListQuery(limit=1000)
        for owner in OWNERS:
            for run_id in RUN_IDS:
                await self.call("runs", "inspect_run", owner, run_id)
                await self.call("events", "list_events", owner, run_id, everything)


# -- how calls are written in a report -------------------------------------------------------------


def _at(moment: datetime) -> str:
    seconds = f"{(moment - CLOCK_START).total_seconds():+.6f}".rstrip("0").rstrip(".")
    return f"t0{seconds}s"


def _brief(arg: object) -> str:
    """One call argument, short enough for a numbered list of calls."""
    if isinstance(arg, datetime):
        return _at(arg)
    if isinstance(arg, GraphRef):
        return f"{arg.graph_id}@{arg.graph_hash[:8]}"
    if isinstance(arg, Run):
        return (
            f"Run({arg.id} {arg.status.value} checkpoint {arg.checkpoint_seq} "
            f"events {arg.event_seq})"
        )
    if isinstance(arg, InitProposal):
        return f"Init({_brief(arg.run)}, wake {_at(arg.wake_at)}, tid {arg.transition_id[:6]})"
    if isinstance(arg, ClaimedProposal):
        return (
            f"Claimed({_brief(arg.run)}, expected {arg.expected_checkpoint_seq}, "
            f"token {arg.claim_token}, {_brief(arg.schedule)}, tid {arg.transition_id[:6]})"
        )
    if isinstance(arg, UnclaimedProposal):
        return f"Unclaimed({_brief(arg.run)}, {_brief(arg.schedule)}, tid {arg.transition_id[:6]})"
    if isinstance(arg, ReleaseClaim):
        wake = arg.wake
        return (
            f"release {_at(wake.wake_at)}"
            if isinstance(wake, At)
            else f"release {type(wake).__name__}"
        )
    if isinstance(arg, RetainClaim):
        return "retain"
    if isinstance(arg, list) and all(isinstance(e, Event) for e in arg):
        changed = any(e.payload != {"seq": e.seq} for e in arg)
        return f"events{[e.seq for e in arg]}{' (one changed)' if changed else ''}"
    if isinstance(arg, dict) and arg.get("kind") == "graph":
        return f"graph(variant {arg['graph']['variant']})"
    if isinstance(arg, AbandonPolicy | ClaimPolicy):
        fields = attrs.asdict(arg, recurse=False)
        shown = {k: (_brief(v) if isinstance(v, datetime) else v) for k, v in fields.items()}
        return f"{type(arg).__name__}({', '.join(f'{k}={v!s}' for k, v in shown.items())})"
    return _cut(arg, 160)


def _cut(value: object, most: int = 1200) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + "…"


# -- the command line ------------------------------------------------------------------------------


def _factory_from(url: str | None, spec: str | None) -> SubjectFactory:
    """A :data:`SubjectFactory` from ``--backend URL`` or ``--backend-factory MODULE:CALLABLE``.

    Raises ``ValueError`` for a factory that cannot be loaded or takes no ``clock=``.
    """
    from docket_contract_tests.plugin import _accepted

    names = itertools.count(1)

    def namespace() -> str:
        return f"d{next(names)}{secrets.token_hex(3)}"

    if spec is not None:
        module_name, _, attr = spec.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load {spec}: {exc}") from exc
        build: Callable[..., Backend] = target
        if not callable(build) or "clock" not in _accepted(build, {"clock": None}):
            raise ValueError(
                f"{spec} is not a callable taking clock= (the driver shares its clock)"
            )

        def from_factory(clock: ManualClock) -> Backend:
            return build(**_accepted(build, {"clock": clock, "namespace": namespace()}))

        return from_factory

    from docket.contract.registry import from_url

    assert url is not None

    def from_url_(clock: ManualClock) -> Backend:
        return from_url(url.replace("{namespace}", namespace()), clock=clock)

    return from_url_


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m docket_contract_tests.differential",
        description="Compare a backend's answers with the reference backend's, seed by seed.",
    )
    subject = parser.add_mutually_exclusive_group(required=True)
    subject.add_argument("--backend", metavar="URL", help="'{namespace}' becomes a fresh name")
    subject.add_argument("--backend-factory", metavar="MODULE:CALLABLE")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 0..N-1")
    parser.add_argument("--seed", type=int, action="append", default=[], help="only this seed")
    parser.add_argument("--steps", type=int, default=STEPS)
    options = parser.parse_args(argv)
    if options.backend_factory is not None and ":" not in options.backend_factory:
        parser.error("--backend-factory wants MODULE:CALLABLE")
    try:
        factory = _factory_from(options.backend, options.backend_factory)
    except ValueError as exc:
        parser.error(str(exc))
    seeds = options.seed or list(range(options.seeds))
    seen: set[str] = set()
    agreed = 0
    for seed in seeds:
        try:
            seen |= run_seed(factory, seed, options.steps)
        except Divergence as divergence:
            print(f"seed {seed}: DIFFERS\n{divergence}\n", flush=True)
        else:
            agreed += 1
            print(f"seed {seed}: same answers", flush=True)
    if agreed == len(seeds) and (missing := missing_kinds(seen)):
        print(f"note: these seeds never produced {', '.join(missing)}")
    print(f"differential: {agreed}/{len(seeds)} seeds agree")
    return 0 if agreed == len(seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
