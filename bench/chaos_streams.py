"""The chaos campaign's stream follower (``bench/chaos.py``): every run of the campaign
followed with ``Docket.stream`` through the kills and the server restarts.

A thread of its own runs an event loop and a ``Docket`` of its own (the harness's
process, not the workers'); each submitted run gets one task following it with
``Docket.stream(run_id, emissions=False, until_finished=True)``. When a stream raises
(the store is away, the feed broke), the task resumes with ``after_seq`` at the last event
it yielded, as any client would; when it ends (the run is terminal) and the harness then
retries the run (a run failed on purpose, fixed), the task follows it again from there.
At the end, with every run terminal, the streams have ended on their own; the follower
waits for them (``close``), and the check compares, per run, what its stream yielded with
the store's events: every committed event exactly once, in order, and the stream ended.

Counted on the campaign's last line: ``streamed`` (runs whose stream matched exactly),
``stream_gaps`` (an event of the store never yielded, a yielded event the store does not
hold as it was yielded, or a stream that did not end) and ``stream_duplicates`` (an event
yielded twice, or out of order).

Sabotage (``DOCKET_CHAOS_SABOTAGE``): ``stream_gap`` (the follower drops event 3 of
``chaos-00001`` as if its stream had skipped it) and ``stream_duplicate`` (it records
event 2 of ``chaos-00004`` twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict

from bench import chaos_app
from bench.chaos_checks import Record, Verdict
from docket import Docket
from docket.records import Event, EventsPruned

__all__ = ["StreamFollower"]

RESUME_PAUSE = 0.2  # seconds before a stream that raised is resumed
START_TIMEOUT = 60.0


class StreamFollower:
    """Follows the campaign's runs from a thread of its own (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.ended: set[str] = set()
        self.resumed = 0  # streams resumed after they raised
        self.pruned: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._docket: Docket | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._opened = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-streams", daemon=True)

    # -- called by the harness (main thread) ---------------------------------------------

    def start(self) -> None:
        self._thread.start()
        if not self._opened.wait(START_TIMEOUT):
            raise RuntimeError("the stream follower did not open its Docket")
        if self._failure is not None:
            raise RuntimeError(f"the stream follower failed to open: {self._failure!r}")

    def follow(self, run_id: str) -> None:
        """Follow ``run_id`` (again, after a retry: from where its stream ended)."""
        self._loop.call_soon_threadsafe(self._follow, run_id)

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for every stream to end, then stop."""
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._finish(timeout), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout + 30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    # -- the loop's thread -------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            docket = Docket(self.url, nodes=chaos_app.NODES, poll_interval=0.1)
            self._loop.run_until_complete(docket.open())
            self._docket = docket
        except BaseException as exc:
            self._failure = exc
            self._opened.set()
            return
        self._opened.set()
        self._loop.run_forever()
        self._loop.run_until_complete(docket.close())
        self._loop.close()

    def _follow(self, run_id: str) -> None:
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            self._again.add(run_id)  # it may be ending: go on once it has
            return
        self.ended.discard(run_id)
        self._tasks[run_id] = self._loop.create_task(self._stream(run_id))

    async def _stream(self, run_id: str) -> None:
        assert self._docket is not None
        seen = self.seen[run_id]
        while True:
            after = max((seq for seq, _ in seen), default=0)
            try:
                async with self._docket.stream(
                    run_id, after_seq=after, emissions=False, until_finished=True
                ) as stream:
                    async for item in stream:
                        if isinstance(item, Event):
                            self._record(run_id, item)
                        elif isinstance(item, EventsPruned):
                            self.pruned.append(f"{run_id}: {item}")
            except asyncio.CancelledError:
                raise
            except Exception:  # the store is away (each backend has its own error types)
                self.resumed += 1
                await asyncio.sleep(RESUME_PAUSE)
                continue
            if run_id in self._again:
                self._again.discard(run_id)
                continue
            self.ended.add(run_id)
            return

    def _record(self, run_id: str, event: Event) -> None:
        sabotage = chaos_app.sabotage()
        if "stream_gap" in sabotage and run_id == "chaos-00001" and event.seq == 3:
            return
        self.seen[run_id].append((event.seq, event.type.value))
        if "stream_duplicate" in sabotage and run_id == "chaos-00004" and event.seq == 2:
            self.seen[run_id].append((event.seq, event.type.value))

    async def _finish(self, timeout: float) -> None:
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the check ----------------------------------------------------------------------

    def check(self, records: dict[str, Record], verdict: Verdict) -> str:
        """Each run's stream against its events in the store; returns a summary."""
        for run_id, record in sorted(records.items()):
            want = [(event.seq, event.type.value) for event in record.events]
            got = self.seen.get(run_id, [])
            seqs = [seq for seq, _ in got]
            clean = True
            if len(seqs) != len(set(seqs)) or seqs != sorted(seqs):
                clean = False
                verdict.stream_duplicates += 1
                verdict.problem(f"{run_id}: streamed seqs {_brief(seqs)}")
            missing = sorted({seq for seq, _ in want} - set(seqs))
            foreign = sorted(set(got) - set(want))
            if missing or foreign or run_id not in self.ended:
                clean = False
                verdict.stream_gaps += 1
                verdict.problem(
                    f"{run_id}: stream missed {missing[:5]}, yielded {foreign[:3]} the store "
                    f"does not hold, {'ended' if run_id in self.ended else 'did not end'}"
                )
            verdict.streamed += clean
        for text in self.pruned[:3]:
            verdict.problem(f"stream yielded EventsPruned with no retention: {text}")
        return (
            f"{len(self._tasks)} runs streamed live, {sum(len(v) for v in self.seen.values())} "
            f"events yielded, {self.resumed} streams resumed after an error"
        )


def _brief(seqs: list[int]) -> str:
    return str(seqs) if len(seqs) <= 12 else f"{seqs[:6]}…{seqs[-6:]}"
