"""SyncDocket mirrors Docket: the same public methods, parameters and defaults.

The twin is written by hand (docket/_sync.py); this keeps it from drifting. A method
added to Docket without its blocking twin, or a default changed on one side only, fails
here by name.
"""

from __future__ import annotations

import inspect

from docket import Docket, SyncDocket
from docket.facade import SyncDocket as OldPath

# async-only: a worker is an asyncio object; sync-only: the twin starts its own on its loop
ONLY_ASYNC = {"worker", "run_worker"}
ONLY_SYNC = {"start_worker", "stop_worker"}


def _params(cls: type) -> dict[str, list[inspect.Parameter]]:
    return {
        name: list(inspect.signature(func).parameters.values())
        for name, func in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_sync_docket_has_every_docket_method_with_the_same_parameters() -> None:
    a, s = _params(Docket), _params(SyncDocket)
    assert set(a) - ONLY_ASYNC == set(s) - ONLY_SYNC
    for name in set(a) - ONLY_ASYNC:
        assert a[name] == s[name], name


def test_every_twin_method_has_the_docket_docstring() -> None:
    for name in set(_params(Docket)) - ONLY_ASYNC:
        original = getattr(Docket, name).__doc__
        if original:
            assert getattr(SyncDocket, name).__doc__, name


def test_the_old_import_path_still_names_the_twin() -> None:
    assert OldPath is SyncDocket
