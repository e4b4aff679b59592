"""The blocking twins of :class:`docket._facade_history.HistoryMethods`, mixed into
:class:`~docket.SyncDocket` (each delegates to the ``Docket`` method of the same name;
tests/facade/test_sync_twin.py holds the two to the same signatures)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from docket.contract.retention import PruneResult
from docket.records import HistoryPage, Run, RunSnapshot

if TYPE_CHECKING:
    from docket.facade import Docket

__all__ = ["SyncHistoryMethods"]

_T = TypeVar("_T")


class SyncHistoryMethods:
    if TYPE_CHECKING:
        docket: Docket

        def _call(self, make: Callable[[], Awaitable[_T]]) -> _T: ...

    def state_history(
        self,
        run_id: str,
        *,
        after: int = 0,
        limit: int = 100,
        tenant_id: str | None = None,
    ) -> HistoryPage:
        return self._call(
            lambda: self.docket.state_history(run_id, after=after, limit=limit, tenant_id=tenant_id)
        )

    def fetch_run_at(
        self, run_id: str, checkpoint_seq: int, *, tenant_id: str | None = None
    ) -> RunSnapshot:
        return self._call(
            lambda: self.docket.fetch_run_at(run_id, checkpoint_seq, tenant_id=tenant_id)
        )

    def fork_run(
        self,
        run_id: str,
        *,
        at: int | None = None,
        new_run_id: str | None = None,
        patch: object = None,
        tenant_id: str | None = None,
    ) -> Run:
        return self._call(
            lambda: self.docket.fork_run(
                run_id, at=at, new_run_id=new_run_id, patch=patch, tenant_id=tenant_id
            )
        )

    def update_state(
        self,
        run_id: str,
        patch: object,
        *,
        reason: str | None = None,
        tenant_id: str | None = None,
    ) -> Run:
        return self._call(
            lambda: self.docket.update_state(run_id, patch, reason=reason, tenant_id=tenant_id)
        )

    def prune(
        self,
        *,
        events_older_than: timedelta | None = None,
        runs_older_than: timedelta | None = None,
        batch_size: int = 1000,
        until_done: bool = False,
    ) -> PruneResult:
        return self._call(
            lambda: self.docket.prune(
                events_older_than=events_older_than,
                runs_older_than=runs_older_than,
                batch_size=batch_size,
                until_done=until_done,
            )
        )


def _copy_docstrings() -> None:
    from docket._facade_history import HistoryMethods

    for name, method in vars(SyncHistoryMethods).items():
        original = getattr(HistoryMethods, name, None)
        if callable(method) and not method.__doc__ and original is not None:
            method.__doc__ = original.__doc__


_copy_docstrings()
