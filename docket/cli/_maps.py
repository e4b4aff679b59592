"""``runs show``'s map section: per map node its latest superstep's items, compactly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, assert_never

from docket.cli._output import _when, one_line
from docket.mapitems import ItemState, MapItem, MapProgress
from docket.values import JSONValue

#: Unfinished items ``runs show`` lists per map node (``--json`` has every item).
SHOW_MAP_ITEMS: Final = 10


def _maps_json(maps: Sequence[MapProgress]) -> JSONValue:
    return [m.to_json() for m in maps]


def _item_line(item: MapItem) -> str:
    reason = "" if item.reason is None else one_line(item.reason)
    match item.state:
        case ItemState.RETRYING:
            after = f"; attempt {item.attempt - 1} failed: {reason}" if item.attempt else ""
            text = f"retrying: attempt {item.attempt} due {_when(item.retry_at)}{after}"
        case ItemState.FAILED:
            text = f"failed (attempt {item.attempt or '?'}): {reason or '-'}"
        case ItemState.INTERRUPT:
            asked = f"interrupt {item.interrupt_id}" if item.interrupt_id else "an interrupt"
            text = f"waits for an answer to {asked}"
        case ItemState.DONE:
            text = f"done (attempt {item.attempt or '?'})"
        case ItemState.PENDING:
            last = f"; attempt {item.attempt} failed: {reason}" if reason else ""
            text = f"not finished{last}"
        case _:
            assert_never(item.state)
    return f"  [{item.index}] {text}"


def _print_maps(maps: Sequence[MapProgress]) -> None:
    """One line per map node (its step, item count and counts per state), then its first
    :data:`SHOW_MAP_ITEMS` items that are not done."""
    for progress in maps:
        head = f"map {progress.node_id}" + (f" over {progress.over}" if progress.over else "")
        if progress.step is None:
            print(f"{head}: not run yet")
            continue
        total = "? items" if progress.total is None else f"{progress.total} items"
        counts = ", ".join(f"{n} {state}" for state, n in progress.counts().items())
        print(f"{head} (step {progress.step}): {total}" + (f": {counts}" if counts else ""))
        unfinished = progress.unfinished()
        for item in unfinished[:SHOW_MAP_ITEMS]:
            print(_item_line(item))
        if len(unfinished) > SHOW_MAP_ITEMS:
            more = len(unfinished) - SHOW_MAP_ITEMS
            print(f"  ... {more} more not done (--json lists every item)")
