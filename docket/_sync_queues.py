"""The blocking twins of :class:`docket._facade_queues.QueueMethods`, mixed into
:class:`~docket.SyncDocket` (each delegates to the ``Docket`` method of the same name;
tests/facade/test_sync_twin.py holds the two to the same signatures)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from docket._facade_queues import UNCHANGED, _Unchanged
from docket.records import AdmissionView, QueueConfig, QueueStatus, RateLimit

if TYPE_CHECKING:
    from docket.facade import Docket

__all__ = ["SyncQueueMethods"]

_T = TypeVar("_T")


class SyncQueueMethods:
    if TYPE_CHECKING:
        docket: Docket

        def _call(self, make: Callable[[], Awaitable[_T]]) -> _T: ...

    def queues(self) -> Sequence[QueueStatus]:
        return self._call(self.docket.queues)

    def queue(self, name: str) -> QueueConfig:
        return self._call(lambda: self.docket.queue(name))

    def configure_queue(
        self,
        name: str,
        *,
        execution_limit: int | _Unchanged | None = UNCHANGED,
        rate: RateLimit | _Unchanged | None = UNCHANGED,
        paused: bool | _Unchanged = UNCHANGED,
        admission_limit: int | _Unchanged | None = UNCHANGED,
        tenant_admission_limit: int | _Unchanged | None = UNCHANGED,
    ) -> QueueConfig:
        return self._call(
            lambda: self.docket.configure_queue(
                name,
                execution_limit=execution_limit,
                rate=rate,
                paused=paused,
                admission_limit=admission_limit,
                tenant_admission_limit=tenant_admission_limit,
            )
        )

    def admissions(self, queue: str, *, limit: int = 1000) -> AdmissionView:
        return self._call(lambda: self.docket.admissions(queue, limit=limit))

    def pause_queue(self, name: str) -> QueueConfig:
        return self._call(lambda: self.docket.pause_queue(name))

    def resume_queue(self, name: str) -> QueueConfig:
        return self._call(lambda: self.docket.resume_queue(name))


def _copy_docstrings() -> None:
    from docket._facade_admission import AdmissionMethods
    from docket._facade_queues import QueueMethods

    for name, method in vars(SyncQueueMethods).items():
        original = getattr(QueueMethods, name, None) or getattr(AdmissionMethods, name, None)
        if callable(method) and not method.__doc__ and original is not None:
            method.__doc__ = original.__doc__


_copy_docstrings()
