"""The chaos campaign's durable time, messages and schedule (``bench/chaos.py``).

* **Messages** (:class:`Messenger`): the harness sends each message run (``t`` waits with
  ``Receive``, :func:`bench.chaos_app.time_kind`) one message with an idempotency key —
  ``early`` runs right after their start (the message is kept in the mailbox until ``t``
  takes it), ``late`` runs once ``t`` waits (delivered in the send) — and re-sends half of
  them with the same key, which must come back a duplicate. Sends run in a thread of their
  own (a send first waits for a worker holding the run), through a ``SyncDocket`` of their
  own; a send refused while the store is away is retried, and a retry whose first try
  landed unseen is a duplicate too. Checked from the store: each accepted message is
  consumed by exactly one ``message_consumed`` event (its key); ``messages_lost`` counts
  those consumed by none, ``messages_doubled`` those consumed twice, received twice, or
  accepted twice (a re-send that was not a duplicate).
* **The schedule** (:class:`Ticks`): created at the start of the kill phase (cron
  ``* * * * * *``, overlap ``allow``, a catch-up of 5 minutes), paused then deleted at its
  end; the ticks from its first ``next_tick_at`` to its last ``last_tick_at`` must each
  have started exactly one run (by the runs' ``docket.schedule`` metadata):
  ``ticks_missed`` / ``ticks_doubled``. A ticker that read the schedule before the pause
  may still start the next tick (its advance then loses the fence): at most one tick after
  the window may have a run.

Sabotage modes (``DOCKET_CHAOS_SABOTAGE``, the campaign's negative controls):
``message_lost`` (a second message, with its own key, to ``chaos-00000``, which takes
none), ``message_twice`` (the re-send to ``chaos-00002`` goes without its key, so it is
accepted again), ``tick_missed`` (the harness takes the run id of the schedule's fourth
tick with a run of its own, without the schedule metadata, so the ticker finds it taken)
and ``tick_doubled`` (the harness starts a second run naming the first tick in its
metadata).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta

import attrs

from bench import chaos_app
from bench.chaos_checks import Record, Verdict, n_of
from docket import SyncDocket
from docket.errors import InactiveRun
from docket.records import (
    SCHEDULE_KEY,
    TASK_WAITING_MESSAGE,
    CronSchedule,
    EventType,
    Run,
    RunStatus,
)
from docket.values import JSONValue

__all__ = ["MIN_TICKING", "SCHEDULE_ID", "Messenger", "Ticks", "check_deadline", "tick_run_id"]

SCHEDULE_ID = "chaos-ticks"
#: the message runs among ``n % 12 < 6`` get their message a second time, same key
RESEND_BLOCK = 12
#: seconds the schedule ticks at least, however short the kill phase (and after the last
#: server restart)
MIN_TICKING = 6.0
RETRY_PAUSE = 0.2  # seconds between tries of a send the store refused
DEADLINE = "deadline_exceeded"


def message_key(run_id: str) -> str:
    return f"{run_id}:msg"


@attrs.define
class Message:
    """One message the harness means to deliver once (re-sends included)."""

    run_id: str
    key: str
    payload: list[JSONValue]
    resend: bool
    accepted: int = 0  # sends answered "accepted" (not a duplicate): must end 1
    delivered: bool = False  # the accepting send delivered it to a waiting attempt
    duplicates: int = 0  # sends answered "duplicate"
    resent: bool = False
    after_end: bool = False  # the re-send found the run ended (nothing to check)


class Messenger:
    """Sends the campaign's messages from a thread of its own (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.messages: dict[str, Message] = {}  # by key
        self.store_errors = 0
        self._queue: queue.Queue[Message | None] = queue.Queue()
        self._late: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="chaos-messenger", daemon=True)
        self._thread.start()

    # -- called by the driver (main thread) --------------------------------------------

    def started(self, run_id: str) -> None:
        """A run was submitted: an ``early`` run gets its message now."""
        n = n_of(run_id)
        kind = chaos_app.time_kind(n)
        if kind.startswith("early"):
            self._queue_new(run_id, message_key(run_id), chaos_app.message_for(n))
        if "message_lost" in chaos_app.sabotage() and n == 0:
            self._queue_new(run_id, f"{run_id}:extra", [0])

    def waiting(self, run: Run) -> None:
        """A waiting run as fetched: a ``late`` run whose ``t`` waits gets its message."""
        n = n_of(run.id)
        if not chaos_app.time_kind(n).startswith("late") or run.id in self._late:
            return
        if any(task.status == TASK_WAITING_MESSAGE for task in run.active_tasks.values()):
            self._late.add(run.id)
            self._queue_new(run.id, message_key(run.id), chaos_app.message_for(n))

    def close(self, timeout: float = 60.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    # -- the sending thread ------------------------------------------------------------

    def _queue_new(self, run_id: str, key: str, payload: list[JSONValue]) -> None:
        resend = n_of(run_id) % RESEND_BLOCK < RESEND_BLOCK // 2 and key == message_key(run_id)
        message = Message(run_id, key, payload, resend)
        self.messages[key] = message
        self._queue.put(message)

    def _run(self) -> None:
        with SyncDocket(self.url, nodes=chaos_app.NODES, claim_ttl=2.0) as docket:
            while True:
                message = self._queue.get()
                if message is None:
                    return
                if not self._send(docket, message):
                    time.sleep(RETRY_PAUSE)
                    self._queue.put(message)

    def _send(self, docket: SyncDocket, message: Message) -> bool:
        """One try; ``False``: the store refused it, try again."""
        again = message.accepted + message.duplicates > 0
        key: str | None = message.key
        if again and "message_twice" in chaos_app.sabotage() and message.run_id == "chaos-00002":
            key = None  # as if the re-send had lost its key
        try:
            result = docket.send(
                message.run_id, chaos_app.TOPIC, message.payload, idempotency_key=key
            )
        except InactiveRun:
            # a re-send after the run ended (it took the message): nothing left to check
            message.after_end = True
            return True
        except Exception:  # the store is away (each backend has its own error types)
            self.store_errors += 1
            return False
        if result.duplicate:
            message.duplicates += 1
        else:
            message.accepted += 1
            message.delivered = message.delivered or result.delivered
        if message.resend and not message.resent:
            message.resent = True
            self._queue.put(message)
        return True

    # -- the checks ----------------------------------------------------------------------

    def check(self, records: dict[str, Record], verdict: Verdict) -> str:
        """Count lost and doubled messages against the runs' events; returns a summary."""
        consumed: dict[str, Counter[str]] = defaultdict(Counter)
        received: dict[str, Counter[str]] = defaultdict(Counter)
        for run_id, record in records.items():
            for event in record.events:
                key = event.payload.get("key")
                if event.type is EventType.MESSAGE_CONSUMED and isinstance(key, str):
                    consumed[run_id][key] += 1
                if event.type is EventType.MESSAGE_RECEIVED and isinstance(key, str):
                    received[run_id][key] += 1
        for message in self.messages.values():
            taken = consumed[message.run_id][message.key]
            landed = message.accepted + message.duplicates > 0
            if landed and taken == 0:
                verdict.messages_lost += 1
                verdict.problem(f"{message.key}: sent and accepted, never consumed")
            elif not landed:
                verdict.messages_lost += 1
                verdict.problem(f"{message.key}: never accepted")
            if taken > 1 or received[message.run_id][message.key] > 1 or message.accepted > 1:
                verdict.messages_doubled += 1
                verdict.problem(
                    f"{message.key}: consumed {taken} times, received "
                    f"{received[message.run_id][message.key]} times, accepted "
                    f"{message.accepted} times"
                )
        for run_id, keys in consumed.items():
            for key in keys:
                if key not in self.messages:
                    verdict.messages_doubled += 1
                    verdict.problem(f"{run_id}: consumed a message the harness never sent ({key})")
        verdict.messages = len(self.messages)
        delivered = sum(m.delivered for m in self.messages.values())
        resent = [m for m in self.messages.values() if m.resent]
        return (
            f"{len(self.messages)} messages sent ({delivered} delivered in the send, the rest "
            f"kept first), {len(resent)} re-sent with their key "
            f"({sum(m.duplicates > 0 for m in resent)} answered duplicate, "
            f"{sum(m.after_end for m in resent)} after the run ended), "
            f"{self.store_errors} sends refused while the store was away"
        )


def check_deadline(record: Record, verdict: Verdict) -> bool:
    """A run whose deadline must fire: ``failed`` with ``deadline_exceeded`` (``True``)."""
    run = record.run
    failure = run.failure
    if run.status is RunStatus.FAILED and failure is not None and failure.code == DEADLINE:
        verdict.deadlines += 1
        # most fire while ``t`` sleeps; a run held up by kills may meet it earlier
        verdict.deadlines_asleep += any(e.type is EventType.SLEEP_STARTED for e in record.events)
        return True
    verdict.lost += 1
    verdict.problem(f"{run.id}: {run.status} ({failure}), its deadline should have failed it")
    return False


# -- the schedule -------------------------------------------------------------------------


def tick_run_id(tick: datetime) -> str:
    return f"{SCHEDULE_ID}@{tick.strftime('%Y%m%dT%H%M%SZ')}"


@attrs.define
class Ticks:
    """The campaign's per-second schedule: its window, and the runs it started."""

    first: datetime | None = None  # the first tick (next_tick_at when created)
    last: datetime | None = None  # the last tick it processed (last_tick_at at the end)
    next: datetime | None = None  # where its cursor was when paused
    paused: bool = False

    def start(self, docket: SyncDocket) -> None:
        from docket.records import Overlap

        docket.delete_schedule(SCHEDULE_ID)  # a leftover of an interrupted try
        created = docket.create_schedule(
            SCHEDULE_ID,
            chaos_app.TICK_GRAPH.id,
            cron="* * * * * *",
            overlap=Overlap.ALLOW,
            catchup=timedelta(minutes=5),
        )
        self.first = created.next_tick_at
        sabotage = chaos_app.sabotage()
        if "tick_missed" in sabotage and self.first is not None:
            # the fourth tick's run id, taken by a run without the schedule's metadata
            docket.start_run(
                chaos_app.TICK_GRAPH.id, {}, run_id=tick_run_id(self.first + timedelta(seconds=3))
            )
        if "tick_doubled" in sabotage and self.first is not None:
            docket.start_run(
                chaos_app.TICK_GRAPH.id,
                {},
                run_id=f"{SCHEDULE_ID}@extra",
                metadata={SCHEDULE_KEY: {"id": SCHEDULE_ID, "tick": self.first.isoformat()}},
            )

    def stop(self, docket: SyncDocket) -> bool:
        """Pause, read and delete the schedule (``False``: the store refused, try again)."""
        try:
            if not self.paused:  # a retry after the pause landed must not read it again
                paused: CronSchedule = docket.pause_schedule(SCHEDULE_ID)
                self.last, self.next = paused.last_tick_at, paused.next_tick_at
                self.paused = True
            docket.delete_schedule(SCHEDULE_ID)
        except Exception:  # the store is away (each backend has its own error types)
            return False
        return True

    def check(self, records: dict[str, Record], verdict: Verdict) -> str:
        """The schedule's runs against its ticks; returns a summary."""
        runs_of: dict[datetime, list[str]] = defaultdict(list)
        for run_id, record in records.items():
            link = record.run.metadata.get(SCHEDULE_KEY)
            stamp = link.get("tick") if isinstance(link, dict) else None
            if isinstance(stamp, str):
                runs_of[datetime.fromisoformat(stamp)].append(run_id)
            if record.run.status is not RunStatus.DONE:
                verdict.lost += 1
                verdict.problem(f"{run_id}: a schedule's run ended {record.run.status}")
        if self.first is None or self.last is None:
            verdict.problem("the schedule never ticked (or was never read back)")
            return "no ticks"
        ticks: list[datetime] = []
        at = self.first
        while at <= self.last:
            ticks.append(at)
            at += timedelta(seconds=1)
        verdict.ticks = len(ticks)
        for tick in ticks:
            count = len(runs_of.get(tick, []))
            if count == 0:
                verdict.ticks_missed += 1
                verdict.problem(f"tick {tick.isoformat()}: no run")
            elif count > 1:
                verdict.ticks_doubled += 1
                verdict.problem(f"tick {tick.isoformat()}: runs {runs_of[tick]}")
        outside = sorted(t for t in runs_of if t < self.first or t > self.last)
        late = [t for t in outside if t != self.next]
        if late:
            verdict.problem(f"runs of ticks outside the window: {[t.isoformat() for t in late]}")
        span = (self.last - self.first).total_seconds()
        return (
            f"schedule: {len(ticks)} ticks over {span:.0f}s, "
            f"{sum(len(v) for v in runs_of.values())} runs started by it"
            f"{' (one for the tick in flight at the pause)' if outside and not late else ''}"
        )
