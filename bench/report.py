"""Markdown tables, the machine-readable lines, JSON and PNG charts of one benchmark run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from bench.ceiling import Ceiling
from bench.durable import Result
from bench.growth import Growth, LongChat
from bench.history_bytes import HistoryBytes, history_lines, history_table
from bench.inline import CONTENDERS
from bench.queue_claims import QueueClaims, queue_lines, queue_table
from bench.stores import UNSAFE_PG
from bench.streams import StreamLatency, stream_lines, stream_table

# Every durable engine, in table order; the peers docket's ratio lines are taken against.
ENGINES = ("docket", "langgraph", "dbos", "dbos-wal")
PEERS = ENGINES[1:]
UNSAFE_NOTE = (
    "**Not durable:** PostgreSQL with `fsync`, `synchronous_commit` and `full_page_writes` "
    "off (`--unsafe-fast-pg`); for comparison with earlier runs only."
)


@attrs.define
class Report:
    meta: dict[str, Any] = attrs.Factory(dict)
    inline: dict[str, dict[str, float]] = attrs.Factory(dict)
    durable: list[Result] = attrs.Factory(list)
    ceilings: list[Ceiling] = attrs.Factory(list)
    growth: list[Growth] = attrs.Factory(list)
    long_chat: list[LongChat] = attrs.Factory(list)
    streams: list[StreamLatency] = attrs.Factory(list)
    history: list[HistoryBytes] = attrs.Factory(list)
    queues: list[QueueClaims] = attrs.Factory(list)

    # -- tables ---------------------------------------------------------------------------

    def inline_table(self) -> str:
        head = "| shape | " + " | ".join(f"{n} µs" for n in CONTENDERS) + " | docket/lg+saver |"
        rows = [head, "|" + "---|" * (len(CONTENDERS) + 2)]
        for shape, row in self.inline.items():
            saver = row.get("langgraph_inmemorysaver")
            ratio = f"{row['docket'] / saver:.3f}" if saver else "n/a"
            cells = " | ".join(f"{row[n] * 1e6:.0f}" if n in row else "n/a" for n in CONTENDERS)
            rows.append(f"| {shape} | {cells} | {ratio} |")
        return "\n".join(rows)

    def durable_table(self, unsafe: bool = False) -> str:
        """The durable cells; ``unsafe``: only the ``postgres-unsafe`` ones (a table of
        their own), else all the others."""
        rows = [
            "| backend | engine | shape | in flight | runs/s | steps/s | p50 ms | p95 ms "
            "| p99 ms | bytes/run | rows/run |",
            "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in self.durable:
            if (r.backend == UNSAFE_PG) != unsafe:
                continue
            head = f"| {r.backend} | {r.engine} | {r.shape} | {r.inflight} |"
            if r.unavailable is not None:
                rows.append(f"{head} unavailable: {r.unavailable} |||||||")
            elif r.gated is not None:
                rows.append(f"{head} GATED: {r.gated} |||||||")
            else:
                rows.append(
                    f"{head} {r.runs_per_s:.1f} | {r.steps_per_s:.1f} | "
                    f"{r.percentile(50) * 1000:.1f} | {r.percentile(95) * 1000:.1f} | "
                    f"{r.percentile(99) * 1000:.1f} | {r.bytes_per_run:.0f} | "
                    f"{r.rows_per_run:.1f} |"
                )
        return "\n".join(rows)

    def ceiling_table(self) -> str:
        rows = [
            "| backend | in flight | ceiling units/s | set by | one_per_txn units/s | "
            "docket, 1 in-process worker | docket, worker processes | docket/best_raw | "
            "docket/one_per_txn |",
            "|---|--:|--:|---|--:|--:|--:|--:|--:|",
        ]
        for c in self.ceilings:
            if c.unavailable is not None:
                rows.append(f"| {c.backend} | {c.clients} | unavailable: {c.unavailable} |||||||")
                continue
            best, old = c.best, c.one_per_txn
            single = f"{c.docket_per_s:.0f}" if c.docket_per_s else "n/a"
            procs = (
                f"{c.docket_processes_per_s:.0f} ({c.workers} proc.)"
                if c.workers and c.docket_processes_per_s
                else "n/a"
            )
            rows.append(
                f"| {c.backend} | {c.clients} | {c.per_s:.0f} | "
                f"{best.variant if best else 'n/a'} | "
                f"{old.per_s if old else 0:.0f} | {single} | {procs} | {c.ratio:.3f} | "
                f"{c.one_per_txn_ratio:.3f} |"
            )
        return "\n".join(rows)

    def raw_table(self) -> str:
        """Every raw variant's best trial: what the ceiling was the maximum of."""
        rows = [
            "| backend | in flight | variant | connections | units per commit | units/s |",
            "|---|--:|---|--:|--:|--:|",
        ]
        for c in self.ceilings:
            for r in sorted(c.raw, key=lambda r: -r.per_s):
                rows.append(
                    f"| {c.backend} | {c.clients} | {r.variant} | {r.connections} | "
                    f"{r.batch} | {r.per_s:.0f} |"
                )
        return "\n".join(rows)

    def growth_table(self) -> str:
        rows = [
            "| backend | store | runs stored | events stored | fill s | transitions/s "
            "| claim_due p50 ms |",
            "|---|---|--:|--:|--:|--:|--:|",
        ]
        for g in self.growth:
            if g.unavailable is not None:
                rows.append(f"| {g.backend} | {g.store} | unavailable: {g.unavailable} |||||")
                continue
            rows.append(
                f"| {g.backend} | {g.store} | {g.runs_stored} | {g.events_stored} | "
                f"{g.fill_seconds:.1f} | {g.transitions_per_s:.0f} | {g.claim_due_ms:.2f} |"
            )
        return "\n".join(rows)

    def long_chat_table(self) -> str:
        rows = [
            "| backend | turns | step 10 ms | last step ms | ratio |",
            "|---|--:|--:|--:|--:|",
        ]
        for c in self.long_chat:
            if c.unavailable is not None:
                rows.append(f"| {c.backend} | {c.turns} | unavailable: {c.unavailable} |||")
                continue
            ratio = c.last_ms / c.step10_ms if c.step10_ms else 0.0
            rows.append(
                f"| {c.backend} | {c.turns} | {c.step10_ms:.2f} | {c.last_ms:.2f} | {ratio:.2f} |"
            )
        return "\n".join(rows)

    def markdown(self) -> str:
        parts = []
        if self.inline:
            parts += ["### In memory (median time per run)", self.inline_table()]
        if self.durable:
            parts += ["### Durable", self.durable_table()]
            if any(r.backend == UNSAFE_PG for r in self.durable):
                parts += ["### Durable, unsafe PostgreSQL", UNSAFE_NOTE, self.durable_table(True)]
        if self.ceilings:
            parts += ["### Write ceiling", self.ceiling_table()]
            parts += ["### Raw variants (best trial of each)", self.raw_table()]
        if self.growth:
            parts += ["### Growth", self.growth_table()]
        if self.long_chat:
            parts += ["### Long chat (cost per step)", self.long_chat_table()]
        if self.streams:
            parts += ["### Stream latency (commit to follower)", stream_table(self.streams)]
        if self.history:
            parts += ["### History storage (long chat)", history_table(self.history)]
        if self.queues:
            parts += ["### Queue claims (limited vs plain)", queue_table(self.queues)]
        return "\n\n".join(parts)

    # -- machine-readable lines -------------------------------------------------------------

    def lines(self) -> Iterator[str]:
        for shape, row in self.inline.items():
            saver = row.get("langgraph_inmemorysaver")
            if saver:
                yield f"ratio {shape} inline 1 docket/langgraph={row['docket'] / saver:.3f}"
        for mine in self.durable:
            if mine.engine != "docket" or not mine.ok:
                continue
            for peer in PEERS:
                for other in self.durable:
                    key = (other.backend, other.shape, other.inflight)
                    if other.engine != peer or key != (mine.backend, mine.shape, mine.inflight):
                        continue
                    head = f"ratio {mine.shape} {mine.backend} {mine.inflight} docket/{peer}="
                    if other.ok:
                        yield f"{head}{mine.runs_per_s / other.runs_per_s:.3f}"
                    else:  # say why there is no number (DBOS on Redis, a GATED peer)
                        why = other.unavailable or f"GATED: {other.gated}"
                        yield f"{head}n/a ({why})"
        tops: dict[str, tuple[float, str]] = {}
        for c in self.ceilings:
            best = c.best
            if c.unavailable is not None or best is None or not c.best_docket_per_s:
                continue
            yield (
                f"ceiling {c.backend} {c.clients} docket/best_raw={c.ratio:.3f} "
                f"(best raw {c.per_s:.0f}/s: {best.variant})"
            )
            yield f"ceiling {c.backend} {c.clients} docket/one_per_txn={c.one_per_txn_ratio:.3f}"
            top = tops.get(c.backend)
            if top is None or best.per_s > top[0]:
                tops[c.backend] = (best.per_s, f"{c.clients} in flight, {best.variant}")
        for backend, (rate, what) in tops.items():
            yield f"ceiling {backend} max raw={rate:.0f}/s ({what})"
        stores = {(g.backend, g.store): g for g in self.growth if g.unavailable is None}
        for (backend, store), large in stores.items():
            empty = stores.get((backend, "empty"))
            if store == "large" and empty is not None and empty.transitions_per_s:
                ratio = large.transitions_per_s / empty.transitions_per_s
                yield f"growth {backend} large/empty={ratio:.3f}"
        for chat in self.long_chat:
            if chat.unavailable is None and chat.step10_ms:
                ratio = chat.last_ms / chat.step10_ms
                yield f"longchat {chat.backend} step{chat.turns}/step10={ratio:.3f}"
        yield from stream_lines(self.streams)
        yield from history_lines(self.history)
        yield from queue_lines(self.queues)

    # -- files ----------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "inline_seconds_per_run": self.inline,
            "durable": [r.as_json() for r in self.durable],
            "ceiling": [c.as_json() for c in self.ceilings],
            "growth": [g.as_json() for g in self.growth],
            "long_chat": [c.as_json() for c in self.long_chat],
            "streams": [s.as_json() for s in self.streams],
            "history": [h.as_json() for h in self.history],
            "queues": [q.as_json() for q in self.queues],
            "lines": list(self.lines()),
        }

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "results.json", out / "results.md"]
        written[0].write_text(json.dumps(self.as_json(), indent=2, default=str) + "\n")
        written[1].write_text(self.markdown() + "\n\n```\n" + "\n".join(self.lines()) + "\n```\n")
        try:
            written += self.charts(out)
        except ImportError:
            print("matplotlib is not installed: no charts (pip install matplotlib)")
        return written

    def charts(self, out: Path) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        paths: list[Path] = []

        def save(fig: Any, name: str) -> None:
            fig.tight_layout()
            path = out / f"bench-{name}.png"
            fig.savefig(path, dpi=80)
            plt.close(fig)
            paths.append(path)

        if self.inline:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            shapes = list(self.inline)
            width = 0.8 / len(CONTENDERS)
            for k, name in enumerate(CONTENDERS):
                values = [self.inline[s].get(name, 0.0) * 1e6 for s in shapes]
                ax.bar([i + k * width for i in range(len(shapes))], values, width, label=name)
            ax.set_xticks([i + width for i in range(len(shapes))], shapes)
            ax.set_ylabel("µs per run (lower is better)")
            ax.set_title("In memory")
            ax.legend(fontsize=8)
            save(fig, "inmemory")

        backends = sorted({r.backend for r in self.durable})
        if backends:
            fig, axes = plt.subplots(1, len(backends), figsize=(5 * len(backends), 3.8))
            axes = [axes] if len(backends) == 1 else list(axes)
            for ax, backend in zip(axes, backends, strict=True):
                cells = sorted(
                    {(r.shape, r.inflight) for r in self.durable if r.backend == backend},
                    key=lambda c: (c[0], c[1]),
                )
                labels = [f"{s}\n{n}" for s, n in cells]
                width = 0.8 / len(ENGINES)
                for k, engine in enumerate(ENGINES):
                    found = {
                        (r.shape, r.inflight): r.runs_per_s
                        for r in self.durable
                        if r.backend == backend and r.engine == engine and r.ok
                    }
                    ax.bar(
                        [i + k * width for i in range(len(cells))],
                        [found.get(c, 0.0) for c in cells],
                        width,
                        label=engine,
                    )
                ax.set_xticks([i + 0.3 for i in range(len(cells))], labels, fontsize=6)
                ax.set_title(f"durable, {backend}")
                ax.set_ylabel("runs/s (higher is better)")
                ax.legend(fontsize=8)
            save(fig, "durable")

        if self.ceilings:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            keys = [(c.backend, c.clients) for c in self.ceilings]
            xs = range(len(keys))
            ax.bar([x - 0.27 for x in xs], [c.per_s for c in self.ceilings], 0.27, label="best raw")
            ax.bar(
                list(xs),
                [c.docket_per_s for c in self.ceilings],
                0.27,
                label="docket, 1 in-process worker",
            )
            ax.bar(
                [x + 0.27 for x in xs],
                [c.docket_processes_per_s for c in self.ceilings],
                0.27,
                label="docket, worker processes",
            )
            ax.set_xticks(list(xs), [f"{b}\n{n}" for b, n in keys], fontsize=7)
            ax.set_ylabel("transitions/s")
            ax.set_title("Write ceiling vs docket")
            ax.legend(fontsize=8)
            save(fig, "ceiling")

        if self.long_chat:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            for chat in self.long_chat:
                if chat.unavailable is None:
                    ax.plot(range(1, len(chat.step_ms) + 1), chat.step_ms, label=chat.backend)
            ax.set_xlabel("superstep")
            ax.set_ylabel("ms per step")
            ax.set_title("Long chat: cost per step as the state grows by 1 KB a step")
            ax.legend(fontsize=8)
            save(fig, "longchat")
        return paths
