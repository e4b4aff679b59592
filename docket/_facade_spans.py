"""Lifecycle spans of the facade's run operations (private; :mod:`docket.facade`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from docket.records import Run
from docket.telemetry import Metadata, Telemetry, log_context


class _Traced(Protocol):
    telemetry: Telemetry


_P = ParamSpec("_P")
_S = TypeVar("_S", bound=_Traced)


def lifecycle(
    name: str, *, run_id_first: bool = False
) -> Callable[
    [Callable[Concatenate[_S, _P], Coroutine[Any, Any, Run]]],
    Callable[Concatenate[_S, _P], Coroutine[Any, Any, Run]],
]:
    """Run a lifecycle method inside a ``name`` span (and, when its first argument is the
    run id, inside that run's logging context). The span's end reports the run as
    committed: id, graph, status, checkpoint."""

    def wrap(
        method: Callable[Concatenate[_S, _P], Coroutine[Any, Any, Run]],
    ) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, Run]]:
        @functools.wraps(method)
        async def traced(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> Run:
            tenant_id = kwargs.get("tenant_id")
            run_id = (args[0] if args else kwargs.get("run_id")) if run_id_first else None
            with log_context(
                run_id=run_id if isinstance(run_id, str) else None,
                tenant_id=tenant_id if isinstance(tenant_id, str) else None,
            ):
                if not self.telemetry:
                    return await method(self, *args, **kwargs)
                metadata: Metadata = {
                    "tenant_id": tenant_id if isinstance(tenant_id, str) else None
                }
                if isinstance(run_id, str):
                    metadata["run_id"] = run_id
                with self.telemetry.span(name, metadata) as span:
                    run = await method(self, *args, **kwargs)
                    span.set(
                        {
                            "run_id": run.id,
                            "graph_id": run.graph_id,
                            "graph_hash": run.graph_hash,
                            "status": str(run.status),
                            "checkpoint_seq": run.checkpoint_seq,
                        }
                    )
                return run

        return traced

    return wrap
