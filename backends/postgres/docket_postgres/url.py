"""``postgresql://`` URLs: where the database is, and the docket options a URL may carry.

The URL is an ordinary libpq connection URI (``postgresql://user:pass@host:5432/db``,
``postgres://`` works too). A few query parameters belong to docket and are taken out
before the rest is handed to libpq:

* ``schema`` — the PostgreSQL schema that holds docket's tables (default ``docket``), so
  several applications can share one database;
* ``claim_policy`` — ``blind`` (default) or ``fair``;
* ``statement_timeout`` — seconds (a float; ``0`` disables it);
* ``pool_min_size`` / ``pool_max_size`` — connection pool bounds;
* ``notify`` — ``true`` (default) or ``false`` (no LISTEN connection: poll only);
* ``clock_resync`` — seconds between reads of the database clock by ``sampled_now()``,
  the worker's clock (default ``1``; ``0`` reads it every time); see
  :class:`docket.contract.clock.SampledClock`;
* ``commit_lanes`` — commit statements in flight at once before further commits are
  grouped into one statement (default ``2``; ``0`` sends every commit alone).

Every other parameter (``sslmode``, ``application_name``, ``connect_timeout``, …) is
libpq's.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SCHEMES = ("postgresql", "postgres")
DOCKET_PARAMS = (
    "schema",
    "claim_policy",
    "statement_timeout",
    "pool_min_size",
    "pool_max_size",
    "notify",
    "clock_resync",
    "commit_lanes",
)
DEFAULT_SCHEMA = "docket"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def check_schema_name(name: object) -> str:
    """A schema name docket accepts: lowercase ``[a-z_][a-z0-9_]*``, 1..63 bytes.

    The name is spliced into DDL and statements (always double-quoted), so it is kept
    to characters that need no escaping anywhere, and it cannot start with ``pg_``
    (reserved by PostgreSQL).
    """
    if not isinstance(name, str):
        raise TypeError(f"schema must be a string, got {type(name).__name__}")
    if not _SCHEMA_NAME.fullmatch(name) or len(name) > 63:
        raise ValueError(
            f"schema name {name!r} must match [a-z_][a-z0-9_]* and be at most 63 characters"
        )
    if name.startswith("pg_"):
        raise ValueError(f"schema name {name!r} may not start with pg_ (reserved)")
    return name


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """Split a URL into the libpq conninfo URI and docket's own options (as strings)."""
    if not isinstance(url, str):
        raise TypeError(f"URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(
            f"not a PostgreSQL URL: expected postgresql:// or postgres://, got {url!r}"
        )
    if parts.fragment:
        raise ValueError("PostgreSQL URLs take no #fragment")
    options: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in DOCKET_PARAMS:
            if key in options:
                raise ValueError(f"URL option {key!r} is given twice")
            options[key] = value
        else:
            kept.append((key, value))
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
    return conninfo, options


def describe(conninfo: str, schema: str) -> str:
    """A printable name for the store: host, port, database and schema, never a password."""
    parts = urlsplit(conninfo)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    database = parts.path.lstrip("/") or "(default database)"
    return f"postgresql://{host}{port}/{database} schema {schema!r}"


__all__ = [
    "DEFAULT_SCHEMA",
    "DOCKET_PARAMS",
    "SCHEMES",
    "check_schema_name",
    "describe",
    "parse_url",
]
