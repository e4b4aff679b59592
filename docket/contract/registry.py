"""Backend discovery: URL scheme → installed backend package (entry points).

A backend package registers a :class:`BackendFactory` under the entry-point group
``docket.backends``::

    [project.entry-points."docket.backends"]
    sqlite = "docket_sqlite:factory"

``memory://`` is built in. Loading an entry point imports only the package that
declared it, and only when its scheme is asked for (or :func:`available` is called).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Final

import attrs

from docket.contract.protocols import Backend

GROUP: Final = "docket.backends"


@attrs.frozen(kw_only=True)
class BackendFactory:
    name: str
    schemes: tuple[str, ...]
    create: Callable[[str, Mapping[str, object]], Backend]
    description: str = ""


class UnknownBackend(LookupError):
    """No installed backend serves the URL's scheme."""


def _builtin() -> dict[str, BackendFactory]:
    from docket.contract.memory import factory

    return {factory.name: factory}


def _discover(
    only: Callable[[str], bool] | None = None,
) -> tuple[dict[str, BackendFactory], dict[str, str]]:
    """Every loadable backend by name (or those whose entry-point name ``only`` admits),
    and why each broken entry point failed.

    One broken package must not take the others down: it is reported, not raised.
    """
    found = _builtin()
    broken: dict[str, str] = {}
    for point in entry_points(group=GROUP):
        if point.name in found or (only is not None and not only(point.name)):
            continue
        try:
            loaded = point.load()
        except Exception as exc:  # any import-time failure of a third-party package
            broken[point.name] = f"{point.value}: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(loaded, BackendFactory):
            broken[point.name] = (
                f"{point.value} is a {type(loaded).__name__}, not a "
                "docket.contract.registry.BackendFactory"
            )
            continue
        found[point.name] = loaded
    return found, broken


def available() -> dict[str, BackendFactory]:
    """Every installed, loadable backend by name (``memory`` always among them)."""
    return _discover()[0]


def broken() -> dict[str, str]:
    """Installed backend entry points that failed to load, with the reason."""
    return _discover()[1]


def scheme_of(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise ValueError(f"backend URL {url!r} has no scheme (e.g. sqlite:///app.db)")
    return scheme.lower()


def from_url(url: str, **options: object) -> Backend:
    """Create (not open) the backend that serves ``url``'s scheme."""
    scheme = scheme_of(url)
    # Importing a backend package can be slow (drivers), so first load only the entry
    # points named like the scheme (``postgres`` for ``postgresql://``, ``redis`` for
    # ``rediss://``); every installed backend is tried only if none of those serves it.
    family = scheme.split("+")[0]
    for only in (lambda name: family.startswith(name) or name.startswith(family), None):
        factories, failures = _discover(only)
        for backend_factory in factories.values():
            if scheme in backend_factory.schemes:
                return backend_factory.create(url, options)
    served = sorted(s for f in factories.values() for s in f.schemes)
    hint = scheme.split("+")[0].replace("postgresql", "postgres")
    message = (
        f"no installed docket backend serves {scheme}:// (installed: "
        f"{', '.join(s + '://' for s in served)}); install the package, "
        f"e.g. pip install docket-{hint}"
    )
    if failures:
        message += "; these backends failed to load: " + "; ".join(
            f"{name} ({why})" for name, why in sorted(failures.items())
        )
    raise UnknownBackend(message)


__all__ = [
    "GROUP",
    "BackendFactory",
    "UnknownBackend",
    "available",
    "broken",
    "from_url",
    "scheme_of",
]
