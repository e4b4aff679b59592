"""Does stored history slow docket down? And does a growing state make each step dearer?

**Growth.** Two stores per backend: one empty, one holding ``runs`` finished runs and
about ``events`` retained events. The large store is filled in bulk from real runs: two
template runs are executed by docket's worker (``single_node``, 9 events, and
``fanout_8``, 30 events), then their rows (SQLite, PostgreSQL) or keys and index entries
(Redis) are copied under new run ids, in the mix of the two that gives the wanted event
count. Copies are written with the backend's own schema and key layout (discovered from
the database, not hard-coded), so every constraint the schema declares still holds; the
copies' JSON documents keep the template's run id inside, which no hot path reads. Then
the same durable trial runs on both stores — ``chain_10`` at ``inflight`` in flight — and
the benchmark reports transitions/s and the median latency of ``claim_due`` (timed around
the backend call the worker makes), and ``large/empty`` for throughput.

**Long chat.** One node looping on itself for ``turns`` supersteps, each appending a 1 KB
message to a list field, executed by the worker one run at a time. The commit observer
stamps every checkpoint; the cost of step *k* is the time between checkpoints *k-1* and
*k*. Reported: the median cost over steps 6..15 ("step 10") and over the last ten steps
("step 200"), and their ratio.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import attrs

from bench.durable import docket_trial
from bench.shapes import NODES, docket_graph, long_chat_graph
from bench.stores import Env, Place
from docket import Docket
from docket.runtime.lifecycle import CommitContext

TEMPLATES = {"tmpl-s": "single_node", "tmpl-f": "fanout_8"}


@attrs.frozen
class Growth:
    backend: str
    store: str  # "empty" or "large"
    runs_stored: int = 0
    events_stored: int = 0
    fill_seconds: float = 0.0
    transitions_per_s: float = 0.0
    runs_per_s: float = 0.0
    claim_due_ms: float = 0.0
    unavailable: str | None = None

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class LongChat:
    backend: str
    turns: int
    step_ms: tuple[float, ...] = ()  # median cost of each step over the runs, ms
    unavailable: str | None = None

    def window(self, last: int) -> float:
        """Median cost of the ten steps ending at step ``last`` (1-based)."""
        lo = max(0, last - 10)
        part = self.step_ms[lo:last]
        return statistics.median(part) if part else 0.0

    @property
    def step10_ms(self) -> float:
        return self.window(15) if len(self.step_ms) >= 15 else self.window(len(self.step_ms))

    @property
    def last_ms(self) -> float:
        return self.window(len(self.step_ms))

    def as_json(self) -> dict[str, Any]:
        return {
            **attrs.asdict(self),
            "step10_ms": self.step10_ms,
            "last_ms": self.last_ms,
        }


# -- filling a store ------------------------------------------------------------------------


async def _templates(place: Place) -> dict[str, int]:
    """Run the template runs to completion; their event counts."""
    async with Docket(place.docket_url(), nodes=NODES, poll_interval=0.05) as docket:
        counts: dict[str, int] = {}
        async with docket.worker(concurrency=2, name="fill"):
            for run_id, shape in TEMPLATES.items():
                ref = await docket.save_graph(docket_graph(shape))
                await docket.start_run(ref, {"value": 1}, run_id=run_id)
            for run_id in TEMPLATES:
                run = await docket.await_run(run_id, timeout=60, poll_interval=0.02)
                counts[run_id] = run.event_seq
    return counts


def _mix(runs: int, events: int, counts: dict[str, int]) -> dict[str, int]:
    """How many copies of each template give ``runs`` runs and about ``events`` events."""
    small, big = counts["tmpl-s"], counts["tmpl-f"]
    many_big = round((events - small * runs) / (big - small)) if big > small else 0
    many_big = min(runs, max(0, many_big))
    return {"tmpl-s": runs - many_big, "tmpl-f": many_big}


def _sqlite_copy(path: str, mix: dict[str, int]) -> None:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    try:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        columns = {
            t: [str(c[1]) for c in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables
        }
        # Parent rows first (the runs table is the one the others reference).
        ordered = sorted(
            (t for t in tables if "run_id" in columns[t]), key=lambda t: "runs" not in t
        )
        conn.execute("BEGIN IMMEDIATE")
        for template, copies in mix.items():
            if not copies:
                continue
            for table in ordered:
                cols = columns[table]
                picks = ", ".join(
                    f"'old-{template}-' || g.i" if c == "run_id" else f'"{c}"' for c in cols
                )
                names = ", ".join(f'"{c}"' for c in cols)
                conn.execute(
                    f'INSERT INTO "{table}" ({names}) '
                    "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?) "
                    f'SELECT {picks} FROM "{table}", g WHERE run_id = ?',
                    (copies, template),
                )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def _postgres_copy(conninfo: str, schema: str, mix: dict[str, int]) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT table_name, column_name FROM information_schema.columns
            WHERE table_schema = %s AND is_identity = 'NO' AND is_generated = 'NEVER'
            ORDER BY table_name, ordinal_position""",
            (schema,),
        )
        columns: dict[str, list[str]] = {}
        for table, column in await cur.fetchall():
            columns.setdefault(str(table), []).append(str(column))
        ordered = sorted((t for t in columns if "run_id" in columns[t]), key=lambda t: t != "runs")
        async with conn.transaction():
            for template, copies in mix.items():
                if not copies:
                    continue
                for table in ordered:
                    cols = columns[table]
                    picks = ", ".join(
                        f"'old-{template}-' || g.i" if c == "run_id" else f't."{c}"' for c in cols
                    )
                    names = ", ".join(f'"{c}"' for c in cols)
                    await conn.execute(
                        f'INSERT INTO "{schema}"."{table}" ({names}) SELECT {picks} '
                        f'FROM "{schema}"."{table}" t, generate_series(1, %s) AS g(i) '
                        "WHERE t.run_id = %s".encode(),
                        (copies, template),
                    )
        for table in ordered:
            await conn.execute(f'VACUUM ANALYZE "{schema}"."{table}"'.encode())


async def _redis_copy(url: str, pattern: str, mix: dict[str, int]) -> None:
    """Copy every key named for a template run, and every index entry naming it."""
    import redis.asyncio as aioredis

    client: Any = aioredis.from_url(url)
    try:
        keys = [k.decode() async for k in client.scan_iter(match=pattern, count=1000)]
        for template, copies in mix.items():
            if not copies:
                continue
            own = [k for k in keys if k.endswith(f":{template}")]
            dumps = [(k, await client.dump(k)) for k in own]
            entries: list[tuple[str, str, bytes | float]] = []  # (key, kind, member/field)
            for key in keys:
                if key in own:
                    continue
                kind = (await client.type(key)).decode()
                if kind == "zset":
                    for member, score in await client.zrange(key, 0, -1, withscores=True):
                        text = member.decode()
                        if text == template or text.endswith(f":{template}"):
                            entries.append((key, text, score))
                elif kind == "hash":
                    value = await client.hget(key, template)
                    if value is not None:
                        entries.append((key, f"hash:{template}", value))
            for start in range(1, copies + 1, 500):
                pipe = client.pipeline(transaction=False)
                for i in range(start, min(copies, start + 499) + 1):
                    new = f"old-{template}-{i}"
                    for key, data in dumps:
                        pipe.restore(key[: -len(template)] + new, 0, data, replace=True)
                    for key, what, value in entries:
                        if what.startswith("hash:"):
                            pipe.hset(key, new, value)
                        else:
                            member = what[: -len(template)] + new
                            pipe.zadd(key, {member: value})
                await pipe.execute()
    finally:
        await client.aclose()


async def fill(place: Place, runs: int, events: int) -> tuple[int, int]:
    """Fill ``place`` with about ``runs`` finished runs holding ``events`` events."""
    counts = await _templates(place)
    mix = _mix(runs - len(TEMPLATES), events - sum(counts.values()), counts)
    if place.backend == "sqlite":
        await asyncio.to_thread(_sqlite_copy, str(place.sqlite_path), mix)
    elif place.backend == "postgres":
        await _postgres_copy(place.env.postgres_conninfo(), place.name, mix)
    else:
        await _redis_copy(place.env.redis_url(), place.redis_pattern(), mix)
    stored_runs = len(TEMPLATES) + sum(mix.values())
    stored_events = sum(counts.values()) + sum(counts[t] * n for t, n in mix.items())
    return stored_runs, stored_events


# -- measuring ------------------------------------------------------------------------------


def _time_claims(samples: list[float]) -> Any:
    def instrument(docket: Docket) -> None:
        target: Any = docket.backend.runs
        original = target.claim_due

        async def timed(policy: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(policy)
            finally:
                samples.append(time.perf_counter() - started)

        target.claim_due = timed

    return instrument


async def _trial(place: Place, trial_runs: int, inflight: int) -> tuple[float, float, list[float]]:
    samples: list[float] = []
    result = await docket_trial(
        place,
        "chain_10",
        trial_runs,
        inflight,
        warmup=max(4, trial_runs // 5),
        instrument=_time_claims(samples),
        footprint=False,
        tag=f"g{time.perf_counter_ns()}-",
    )
    if not result.ok:
        raise RuntimeError(f"GATED: {result.gated}")
    return result.transitions_per_s, result.runs_per_s, samples


async def growth_pair(
    env: Env, backend: str, runs: int, events: int, trial_runs: int, inflight: int, repeats: int
) -> list[Growth]:
    """The empty and the large store of one backend; trials alternate between them
    ``repeats`` times and the best throughput of each is kept (noise only slows)."""
    missing = env.missing(backend)
    if missing is not None:
        return [Growth(backend, store, unavailable=missing) for store in ("empty", "large")]
    places = {
        "empty": Place(backend, env, "growth_empty"),
        "large": Place(backend, env, "growth_large"),
    }
    stored = {"empty": (0, 0), "large": (0, 0)}
    filled = 0.0
    best: dict[str, tuple[float, float]] = {"empty": (0.0, 0.0), "large": (0.0, 0.0)}
    claims: dict[str, list[float]] = {"empty": [], "large": []}
    try:
        began = time.perf_counter()
        stored["large"] = await fill(places["large"], runs, events)
        filled = time.perf_counter() - began
        for _ in range(repeats):
            for store, place in places.items():
                per_s, runs_per_s, samples = await _trial(place, trial_runs, inflight)
                best[store] = max(best[store], (per_s, runs_per_s))
                claims[store].extend(samples)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"[:160]
        return [Growth(backend, store, unavailable=reason) for store in ("empty", "large")]
    return [
        Growth(
            backend,
            store,
            runs_stored=stored[store][0],
            events_stored=stored[store][1],
            fill_seconds=filled if store == "large" else 0.0,
            transitions_per_s=best[store][0],
            runs_per_s=best[store][1],
            claim_due_ms=statistics.median(claims[store]) * 1000 if claims[store] else 0.0,
        )
        for store in ("empty", "large")
    ]


async def long_chat(place: Place, turns: int, runs: int) -> LongChat:
    missing = place.env.missing(place.backend)
    if missing is not None:
        return LongChat(place.backend, turns, unavailable=missing)
    stamps: dict[str, dict[int, float]] = {}

    async def observe(checkpoint: Any, context: CommitContext) -> None:
        # Checkpoint seq k + 1 is the commit of superstep k (seq 1 is the run's start).
        stamps.setdefault(checkpoint.run.id, {})[checkpoint.seq] = time.perf_counter()

    try:
        async with Docket(
            place.docket_url(), nodes=NODES, observers=[observe], poll_interval=0.05
        ) as docket:
            ref = await docket.save_graph(long_chat_graph(turns))
            async with docket.worker(concurrency=1, name="chat"):
                for i in range(runs):
                    run_id = f"chat{i}"
                    await docket.start_run(ref, {"turns": turns}, run_id=run_id)
                    run = await docket.await_run(run_id, timeout=600, poll_interval=0.05)
                    if run.status.value != "done" or run.step != turns:
                        raise RuntimeError(f"{run_id} ended {run.status} at step {run.step}")
    except Exception as exc:
        return LongChat(place.backend, turns, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    per_step: list[list[float]] = [[] for _ in range(turns)]
    for seen in stamps.values():
        for step in range(1, turns + 1):
            if step + 1 in seen and step in seen:
                per_step[step - 1].append((seen[step + 1] - seen[step]) * 1000)
    medians = tuple(statistics.median(s) if s else 0.0 for s in per_step)
    return LongChat(place.backend, turns, medians)
