"""Retention (``Feature.PRUNE``) on Redis: one bounded ``prune`` pass, and the layout-4
backfill of the indexes it walks.

**What is indexed** (by the transition scripts, in each scope's own hash tag; see
:mod:`docket_redis.keys`): ``T:ew:<run_id>`` has one member per commit that wrote events,
``<first seq>:<last seq>`` scored by the time it wrote them; ``T:ew`` has each run with
retained events, scored by its oldest such commit; ``T:fin`` has each terminal run,
scored by when it (last) became terminal. Times are the script's clock (the server's
``TIME``, or the test clock), the same one that stamps everything else.

**A pass** takes the namespace's pruning lock (another pruner holding it: the pass does
nothing and says ``ran=False``), then walks the scope registry — found from any node of
a Cluster — and, scope after scope until ``batch_size`` is spent, deletes old events
(``lua/prune_events.lua``) and then finished runs (``lua/prune_peek.lua`` names their
keys, ``lua/prune_runs.lua`` re-checks and deletes them). Each script runs on its scope's
slot; scopes are visited in registry order, so one pass is bounded but not oldest-first
across scopes. Sequence arithmetic is untouched: an event's body, digest and index entry
go, the run's ``event_seq`` stays, and ``commit.lua`` drops a re-sent pruned event (it
only compares a digest still stored and writes only sequences above ``event_seq``).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from docket.contract.retention import PruneResult, require_prune_args
from docket.records import RunStatus
from docket.values import to_micros, utc
from docket_redis._codec import text
from docket_redis._engine import RedisEngine
from docket_redis.keys import ScopeKeys, index_member, member_ident

#: How long a pruner may hold the namespace's lock before another may take it (a pruner
#: that died holding it must not stop retention for good).
LOCK_MS = 300_000
_TERMINAL = frozenset(status.value for status in RunStatus if status.terminal)
#: Runs per backfill script.
BACKFILL_CHUNK = 200


async def prune(
    engine: RedisEngine,
    *,
    event_age: timedelta | None,
    run_age: timedelta | None,
    batch_size: int,
    now: datetime | None,
) -> PruneResult:
    """One bounded pass (see the module docs); bad arguments raise ``ValueError``."""
    event_age, run_age, batch_size = require_prune_args(event_age, run_age, batch_size)
    moment = utc(now) if now is not None else await engine.now()
    lock, token = engine.ns.prune_lock, secrets.token_hex(8)
    taken = await engine.transport.command(lock, "SET", lock, token, "NX", "PX", str(LOCK_MS))
    if taken is None:
        return PruneResult(ran=False, events=0, runs=0)
    try:
        scopes = await engine.scopes()
        events = runs = 0
        if event_age is not None:
            cut = to_micros(moment - event_age)
            for scope in scopes:
                if events >= batch_size:
                    break
                events += await _prune_events(engine, scope, cut, batch_size - events)
        if run_age is not None:
            cut = to_micros(moment - run_age)
            for scope in scopes:
                if runs >= batch_size:
                    break
                runs += await _prune_runs(engine, scope, cut, batch_size - runs)
    finally:
        await engine.eval("unlock", [lock], [token])
    return PruneResult(ran=True, events=events, runs=runs)


async def _older(engine: RedisEngine, key: str, cut: int, limit: int) -> list[str]:
    """Members of zset ``key`` scored strictly below ``cut``, lowest first, at most ``limit``."""
    found = await engine.transport.command(
        key, "ZRANGEBYSCORE", key, "-inf", f"({cut}", "LIMIT", "0", str(limit)
    )
    return [text(member) for member in found]


async def _prune_events(engine: RedisEngine, scope: ScopeKeys, cut: int, budget: int) -> int:
    run_ids = await _older(engine, scope.written, cut, budget)
    if not run_ids:
        return 0
    keys = [scope.written]
    for run_id in run_ids:
        keys += [scope.commits_written(run_id), scope.events(run_id), scope.event_index(run_id)]
    deleted = await engine.eval("prune_events", keys, [str(cut), str(budget), *run_ids])
    return int(deleted)


async def _prune_runs(engine: RedisEngine, scope: ScopeKeys, cut: int, budget: int) -> int:
    run_ids = await _older(engine, scope.finished, cut, budget)
    if not run_ids:
        return 0
    peek = await engine.eval("prune_peek", [scope.run(run_id) for run_id in run_ids], [])
    keys = [
        scope.finished,
        scope.written,
        scope.ready,
        scope.claimed,
        scope.summaries,
        scope.index,
    ]
    args: list[str | bytes] = [str(cut)]
    for index, run_id in enumerate(run_ids):
        status, graph_id, graph_hash, started = (
            text(part) for part in peek[4 * index : 4 * index + 4]
        )
        if status not in _TERMINAL or not started:
            continue  # gone or reopened meanwhile
        keys += [
            scope.run(run_id),
            scope.transitions(run_id),
            scope.events(run_id),
            scope.event_index(run_id),
            scope.commits_written(run_id),
            scope.by_status(RunStatus(status)),
            scope.by_graph(graph_id),
            scope.by_hash(graph_hash),
        ]
        member = index_member(int(started), run_id)
        args += [run_id, status, graph_id, graph_hash, started, member]
    if len(args) == 1:
        return 0
    return int(await engine.eval("prune_runs", keys, args))


async def backfill(engine: RedisEngine) -> None:
    """Index every run of the namespace for retention as written and ended now (layout 4).

    Idempotent; rewrites nothing a layout-3 release reads."""
    now = str(to_micros(await engine.now()))
    for scope in await engine.scopes():
        start = 0
        while True:
            members = await engine.transport.command(
                scope.index, "ZRANGE", scope.index, str(start), str(start + BACKFILL_CHUNK - 1)
            )
            if not members:
                break
            run_ids = [member_ident(member) for member in members]
            keys = [scope.written, scope.finished]
            for run_id in run_ids:
                keys += [
                    scope.run(run_id),
                    scope.event_index(run_id),
                    scope.commits_written(run_id),
                ]
            await engine.eval("backfill", keys, [now, *run_ids])
            start += BACKFILL_CHUNK


__all__ = ["BACKFILL_CHUNK", "LOCK_MS", "backfill", "prune"]
