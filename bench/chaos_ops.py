"""The chaos campaign's operator transitions (``bench/chaos.py``): state edits and forks,
committed while workers are killed and the server restarts.

* **Edits** (:func:`edited`, about one run in six: the ``late`` message runs with
  ``n % 12`` in 3 or 5): once such a run waits for its message, the harness first replaces
  its ``approval`` with ``approval_for(n) + EDIT_DELTA`` (``Docket.update_state``) and only
  then lets the messenger send the message, so ``total`` (which adds ``approval`` into
  ``result``) must reflect the edit. An edit refused because the run moved on under a
  stale read, or while the store is away, is tried again on the next look; one whose
  answer was lost and is tried again writes the same value. Checked: the run ends with
  ``result`` raised by exactly ``EDIT_DELTA`` and holds a ``state_edited`` event
  (``edits_lost`` otherwise; ``edits`` counts the runs edited).
* **Forks** (:func:`forked`, about one run in fifteen: runs that end ``done`` without the
  harness's help): once the run is done, the harness forks it (``Docket.fork_run``) at the
  checkpoint before the one ``total`` committed (``t`` is over), as
  ``fork-<run id>``, patching ``approval`` up by ``FORK_DELTA``. The fork runs ``total``
  again under the same kills and restarts, and must end ``done`` with the source's
  expected output, ``result`` raised by ``FORK_DELTA``, naming its source checkpoint in
  ``docket.forked_from`` (``forks_wrong`` otherwise; ``forks`` counts the forks made).

Sabotage (``DOCKET_CHAOS_SABOTAGE``): ``edit_lost`` (the edit of ``chaos-00003`` writes
the value the run already had, as if the edit had been lost) and ``fork_wrong`` (the
fork of ``chaos-00002`` is patched one too high).
"""

from __future__ import annotations

import contextlib

import attrs

from bench import chaos_app
from bench.chaos_checks import Record, Verdict, n_of
from docket import SyncDocket
from docket.errors import Conflict, InactiveRun, InvalidRun, NotFound, StaleCheckpoint
from docket.records import FORKED_FROM_KEY, TASK_WAITING_MESSAGE, EventType, Run, RunStatus
from docket.values import JSONValue

__all__ = ["EDIT_DELTA", "FORK_DELTA", "Operator", "edited", "fork_id", "forked"]

EDIT_DELTA = 100_000
FORK_DELTA = 1_000_000
FORK_PREFIX = "fork-"


def edited(n: int) -> bool:
    """Whether run ``n`` gets its ``approval`` edited while it waits for its message."""
    return chaos_app.time_kind(n).startswith("late") and n % 12 in (3, 5)


def forked(n: int) -> bool:
    """Whether run ``n`` is forked once done (a run that ends ``done`` on its own)."""
    return (
        n % 5 == 2
        and not edited(n)
        and not chaos_app.needs_fix(n)
        and not chaos_app.deadline_fires(n)
    )


def fork_id(run_id: str) -> str:
    return f"{FORK_PREFIX}{run_id}"


def is_fork(run_id: str) -> bool:
    return run_id.startswith(FORK_PREFIX)


@attrs.define
class Fork:
    source: str
    at: int
    approval: int


class Operator:
    """Edits and forks the campaign's runs (see the module docstring), from the driver's
    loop: every call tolerates a store that is away and is simply tried again later."""

    def __init__(self, docket: SyncDocket) -> None:
        self.docket = docket
        self.edits: set[str] = set()  # runs whose edit was answered (committed)
        self.forks: dict[str, Fork] = {}  # by fork run id: forks answered (committed)
        self.store_errors = 0

    # -- edits ------------------------------------------------------------------------

    def before_message(self, run: Run) -> bool:
        """Called with a waiting run before the messenger sees it: ``False`` while the
        edit this run needs has not committed (its message must wait)."""
        n = n_of(run.id)
        if not edited(n) or run.id in self.edits:
            return True
        if not any(task.status == TASK_WAITING_MESSAGE for task in run.active_tasks.values()):
            return False  # not at ``t`` yet: edit it there, not before the interrupt
        value = chaos_app.approval_for(n)
        if "edit_lost" not in chaos_app.sabotage() or run.id != "chaos-00003":
            value += EDIT_DELTA
        try:
            self.docket.update_state(run.id, {"approval": value}, reason="chaos: operator edit")
        except (InvalidRun, StaleCheckpoint, InactiveRun, NotFound):
            return False  # it moved under a stale read: look again next time
        except Exception:  # the store is away (each backend has its own error types)
            self.store_errors += 1
            return False
        self.edits.add(run.id)
        return True

    # -- forks ------------------------------------------------------------------------

    def fork_done(self, statuses: dict[str, RunStatus]) -> None:
        for run_id, status in statuses.items():
            if is_fork(run_id) or status is not RunStatus.DONE:
                continue
            if not forked(n_of(run_id)) or fork_id(run_id) in self.forks:
                continue
            try:
                self._fork(run_id)
            except Exception:  # the store is away (each backend has its own error types)
                self.store_errors += 1
                return

    def _fork(self, run_id: str) -> None:
        # the checkpoint before the one ``total`` wrote ``result`` in (``t`` is over)
        at = None
        after = 0
        while at is None:
            page = self.docket.state_history(run_id, after=after, limit=100)
            at = next(
                (c.checkpoint_seq - 1 for c in page.checkpoints if "result" in c.changed), None
            )
            if not page.has_more:
                break
            after = page.next_after
        if at is None:
            raise RuntimeError(f"{run_id}: no checkpoint wrote result")
        n = n_of(run_id)
        approval = chaos_app.approval_for(n) + FORK_DELTA
        patch: dict[str, JSONValue] = {"approval": approval}
        if "fork_wrong" in chaos_app.sabotage() and run_id == "chaos-00002":
            patch["approval"] = approval + 1
        new_id = fork_id(run_id)
        with contextlib.suppress(Conflict):  # an earlier try landed though its answer was lost
            self.docket.fork_run(run_id, at=at, new_run_id=new_id, patch=patch)
        self.forks[new_id] = Fork(run_id, at, approval)

    def pending(self, statuses: dict[str, RunStatus]) -> int:
        """Forks made whose run has not ended (the campaign waits for them)."""
        return sum(
            1
            for ident in self.forks
            if (status := statuses.get(ident)) is None or not status.terminal
        )

    def wanted(self, runs: int) -> int:
        return sum(forked(n) for n in range(runs))

    # -- the checks -----------------------------------------------------------------------

    def check(self, parents: dict[str, Record], forks: dict[str, Record], verdict: Verdict) -> str:
        for run_id in sorted(self.edits):
            record = parents.get(run_id)
            if record is None or record.run.status is not RunStatus.DONE:
                continue  # counted as lost
            n = n_of(run_id)
            result = (record.run.output or {}).get("result")
            base = chaos_app.expected_output(n)["result"]
            assert isinstance(base, int)
            edited_events = [e for e in record.events if e.type is EventType.STATE_EDITED]
            if result != base + EDIT_DELTA or not edited_events:
                verdict.edits_lost += 1
                verdict.problem(
                    f"{run_id}: edit of approval not reflected (result {result}, expected "
                    f"{base + EDIT_DELTA}; {len(edited_events)} state_edited events)"
                )
        verdict.edits = len(self.edits)
        missing = sorted(
            run_id
            for run_id, record in parents.items()
            if edited(n_of(run_id)) and run_id not in self.edits
        )
        for run_id in missing:
            verdict.edits_lost += 1
            verdict.problem(f"{run_id}: was to be edited, and never was")
        for ident, fork in sorted(self.forks.items()):
            record = forks.get(ident)
            want = dict(chaos_app.expected_output(n_of(fork.source)))
            result = want["result"]
            assert isinstance(result, int)
            want["result"] = result + FORK_DELTA
            link = {"run_id": fork.source, "checkpoint_seq": fork.at}
            if record is None:
                verdict.forks_wrong += 1
                verdict.problem(f"{ident}: forked, not in the store")
            elif record.run.status is not RunStatus.DONE or record.run.output != want:
                verdict.forks_wrong += 1
                verdict.problem(f"{ident}: ended {record.run.status} with {record.run.output}")
            elif record.run.metadata.get(FORKED_FROM_KEY) != link:
                verdict.forks_wrong += 1
                verdict.problem(f"{ident}: forked_from {record.run.metadata.get(FORKED_FROM_KEY)}")
        for run_id, record in sorted(parents.items()):
            never = fork_id(run_id) not in self.forks and record.run.status is RunStatus.DONE
            if forked(n_of(run_id)) and never:
                verdict.forks_wrong += 1
                verdict.problem(f"{run_id}: was to be forked once done, and never was")
        unasked = sorted(set(forks) - set(self.forks))
        for ident in unasked:
            verdict.forks_wrong += 1
            verdict.problem(f"{ident}: a fork the harness never made")
        verdict.forks = len(self.forks)
        return (
            f"{len(self.edits)} runs edited while they waited, {len(self.forks)} done runs "
            f"forked; {self.store_errors} operator calls refused while the store was away"
        )
