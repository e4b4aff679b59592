"""SyncDocket mirrors Docket: the same public methods, parameters, defaults, annotations,
and every public method and property of both documented.

The twin is written by hand (docket/_sync.py); this keeps it from drifting. A method
added to Docket without its blocking twin, a default or annotation changed on one side
only, or a public method without a docstring, fails here by name.
"""

from __future__ import annotations

import inspect

from docket import Docket, SyncDocket
from docket.facade import SyncDocket as OldPath

# async-only: a worker is an asyncio object; sync-only: the twin starts its own on its loop
ONLY_ASYNC = frozenset({"worker", "run_worker"})
ONLY_SYNC = frozenset({"start_worker", "stop_worker"})


def _public(cls: type) -> dict[str, object]:
    """Public methods and properties, the mixins' included (Docket's signal and schedule
    methods live in mixin classes)."""
    found: dict[str, object] = {}
    for klass in reversed(cls.__mro__[:-1]):  # object's own members aside
        found.update(
            (name, member)
            for name, member in vars(klass).items()
            if not name.startswith("_")
            and (inspect.isfunction(member) or isinstance(member, property))
        )
    return found


def twin_differences(
    original: type,
    twin: type,
    *,
    only_original: frozenset[str] = ONLY_ASYNC,
    only_twin: frozenset[str] = ONLY_SYNC,
) -> list[str]:
    """Every way ``twin`` departs from ``original``: a public method missing on one side,
    another parameter list (names, kinds, defaults, annotations) or return annotation
    (the class's own name aside: ``open`` returns itself), or a public method or property
    of either without a docstring."""
    problems: list[str] = []
    for cls in (original, twin):
        for name, member in _public(cls).items():
            if not (member.__doc__ or "").strip():
                problems.append(f"{cls.__name__}.{name} has no docstring")
    a = {n: m for n, m in _public(original).items() if inspect.isfunction(m)}
    s = {n: m for n, m in _public(twin).items() if inspect.isfunction(m)}
    for name in sorted((set(a) - only_original) ^ (set(s) - only_twin)):
        side = original if name in a else twin
        problems.append(f"{name} is only on {side.__name__}")
    for name in sorted((set(a) - only_original) & set(s)):
        got, want = inspect.signature(s[name]), inspect.signature(a[name])
        if list(got.parameters.values()) != list(want.parameters.values()):
            problems.append(f"{name}: {twin.__name__}{got} != {original.__name__}{want}")
        returns = str(got.return_annotation).replace(twin.__name__, original.__name__)
        if returns != str(want.return_annotation):
            problems.append(f"{name} returns {got.return_annotation}, not {want.return_annotation}")
    return problems


def test_sync_docket_mirrors_docket_and_both_are_documented() -> None:
    assert twin_differences(Docket, SyncDocket) == []


class _Original:
    async def fetch(self, run_id: str, *, limit: int = 100) -> int:
        """Fetch."""
        return limit

    async def later(self, when: float) -> None:
        """Later."""

    async def undocumented(self) -> None:
        pass

    @property
    def size(self) -> int:
        return 1


class _Twin:
    def fetch(self, run_id: str, *, limit: int = 250) -> int:
        """Fetch."""
        return limit

    def later(self, when: int) -> None:
        """Later."""

    def undocumented(self) -> str:
        return ""

    def extra(self) -> None:
        """Only here."""


def test_the_twin_check_names_every_kind_of_drift() -> None:
    found = twin_differences(_Original, _Twin, only_original=frozenset(), only_twin=frozenset())
    assert found == [
        "_Original.undocumented has no docstring",
        "_Original.size has no docstring",
        "_Twin.undocumented has no docstring",
        "extra is only on _Twin",
        "fetch: _Twin(self, run_id: 'str', *, limit: 'int' = 250) -> 'int'"
        " != _Original(self, run_id: 'str', *, limit: 'int' = 100) -> 'int'",
        "later: _Twin(self, when: 'int') -> 'None' != _Original(self, when: 'float') -> 'None'",
        "undocumented returns str, not None",
    ]


def test_the_old_import_path_still_names_the_twin() -> None:
    assert OldPath is SyncDocket
