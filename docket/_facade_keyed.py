"""Deduplicated starts: ``start_run(..., idempotency_key=...)``.

A keyed start names its run after the key (the run id *is* the key, so
``fetch_run(key)`` finds it) and records the key in the run's metadata
(:data:`IDEMPOTENCY_METADATA`). Starting again with a key already used in that owner
scope returns the run it started — running, waiting or finished — instead of
``Conflict``; the second call's input, metadata and times are not used. Two callers
racing with one key both get the one run: the store's ``initialize`` lets exactly one
create it and refuses the other with ``Conflict``, which is answered here by reading the
winner.

A key lives as long as its run: once retention removes the finished run
(``prune --runs-older-than``, the worker's ``prune_runs_after``), the key may start a new
run. ``Conflict`` remains for a run id taken by a run started *without* the key, and for
a key used with another graph.
"""

from __future__ import annotations

from typing import Final

from docket._facade_args import require_id
from docket.contract import errors as contract
from docket.contract.protocols import Backend
from docket.errors import Conflict, InvalidOptions, from_contract
from docket.records import OwnerScope, Run
from docket.values import JSONDict

__all__ = ["IDEMPOTENCY_METADATA", "keyed_run_id", "started_before"]

#: The run metadata entry holding the idempotency key a run was started with.
IDEMPOTENCY_METADATA: Final = "docket.idempotency_key"


def keyed_run_id(key: object, run_id: str | None, metadata: JSONDict) -> tuple[str, JSONDict]:
    """The run id and metadata of a start with idempotency key ``key``."""
    require_id("idempotency_key", key)
    assert isinstance(key, str)
    if run_id is not None:
        raise InvalidOptions(
            "give run_id or idempotency_key, not both: a keyed start's run id is its key"
        )
    return key, {**metadata, IDEMPOTENCY_METADATA: key}


async def started_before(
    store: Backend, owner: OwnerScope, key: str, graph_id: str, refused: contract.Conflict
) -> Run:
    """The run an earlier start with ``key`` created (the store refused this one with
    ``refused``); ``Conflict`` when the run there was not started with this key or is a
    run of another graph."""
    found = await store.runs.fetch_run(owner, key)
    if isinstance(found, contract.NotFound):  # removed between the refusal and the read
        raise from_contract(refused, subject=f"run {key!r}")
    if found.metadata.get(IDEMPOTENCY_METADATA) != key:
        raise Conflict(
            f"run {key!r} exists and was not started with idempotency key {key!r}",
            details={"run_id": key},
        )
    if found.graph_id != graph_id:
        raise Conflict(
            f"idempotency key {key!r} started a run of graph {found.graph_id!r}, not {graph_id!r}",
            details={"run_id": key, "graph_id": found.graph_id},
        )
    return found
