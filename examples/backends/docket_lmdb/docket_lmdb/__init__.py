"""docket-lmdb: an example backend on LMDB, written with :mod:`docket.contract.kv`.

``lmdb://PATH`` names an LMDB environment directory (created on open):
``lmdb:///var/lib/app/docket`` is absolute, ``lmdb://docket-data`` relative to the
working directory when the backend is created. ``?map_size=BYTES`` sets the largest the
store may grow (default 4 GiB; the file grows as it is used). Every commit is synced
before it returns, so the backend declares ``durable`` and ``durable.fsync``. Several
processes may share one environment; wake-ups reach only this process's workers, the
others poll. ``docs/backend-authors.md`` walks through how this package was written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from docket.contract.capabilities import Feature
from docket.contract.kv import KVBackend, kv_options
from docket.contract.registry import BackendFactory
from docket_lmdb.store import LMDBStore

DEFAULT_MAP_SIZE = 4 << 30


def parse_url(url: str) -> tuple[str, int]:
    """``lmdb://PATH[?map_size=BYTES]`` -> (absolute path, map size)."""
    parts = urlsplit(url)
    if parts.scheme != "lmdb" or parts.fragment:
        raise ValueError(f"not an lmdb URL: {url!r} (expected lmdb:///path/to/dir)")
    path = unquote(parts.netloc + parts.path)
    if not path or "\x00" in path:
        raise ValueError(f"an lmdb URL names a directory: {url!r}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if set(query) - {"map_size"}:
        raise ValueError(f"unknown lmdb URL option in {url!r}; known: map_size")
    try:
        map_size = int(query.get("map_size", DEFAULT_MAP_SIZE))
    except ValueError:
        raise ValueError(f"map_size must be a number of bytes in {url!r}") from None
    if map_size <= 0:
        raise ValueError(f"map_size must be positive in {url!r}")
    return os.path.abspath(path), map_size


def create(url: str, options: Mapping[str, object]) -> KVBackend:
    """The factory: ``options`` may hold ``clock`` and ``limits`` (the kit passes them)."""
    path, map_size = parse_url(url)
    clock, limits = kv_options("lmdb", options)
    return KVBackend(
        lambda: LMDBStore(path, map_size),
        name="lmdb",
        features=(Feature.DURABLE, Feature.DURABLE_FSYNC),
        clock=clock,
        limits=limits,
        wake_key=("lmdb", path),
    )


#: Entry point ``docket.backends: lmdb``.
factory = BackendFactory(
    name="lmdb",
    schemes=("lmdb",),
    create=create,
    description="example: an embedded LMDB environment, through docket.contract.kv",
)

__all__ = ["DEFAULT_MAP_SIZE", "LMDBStore", "create", "factory", "parse_url"]
