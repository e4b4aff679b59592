"""``sqlite://`` URLs: which database a backend opens, and the options a URL may carry.

The forms follow SQLAlchemy's:

* ``sqlite:///relative/path.db`` — a path relative to the working directory at the time
  the backend is created (it is resolved then, so a later ``chdir`` moves nothing);
* ``sqlite:////absolute/path.db`` — an absolute path (four slashes);
* ``sqlite:///:memory:`` (or just ``sqlite://``) — a private in-memory database that
  lives as long as the backend stays open.

A query string may set ``synchronous`` (``FULL``/``NORMAL``), ``busy_timeout``
(seconds) and ``feed_poll`` (seconds between the live feed's checks), e.g.
``sqlite:///app.db?synchronous=NORMAL&busy_timeout=10``, so a CLI that only has a URL
can still choose them. Percent-escapes in the path are decoded.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

MEMORY = ":memory:"
SCHEMES = ("sqlite",)
URL_OPTIONS = ("synchronous", "busy_timeout", "feed_poll")


@attrs.frozen
class Target:
    """Where the database lives: an absolute file path, or ``None`` for in-memory."""

    path: str | None

    @property
    def memory(self) -> bool:
        return self.path is None

    def describe(self) -> str:
        return MEMORY if self.path is None else self.path

    @classmethod
    def of(cls, path: str | os.PathLike[str] | None) -> Target:
        if path is None:
            return cls(None)
        text = os.fspath(path)
        if not isinstance(text, str):
            raise TypeError(f"path must be a str or os.PathLike[str], got {type(path).__name__}")
        if text == MEMORY:
            return cls(None)
        if not text:
            raise ValueError("an empty path names no database; use ':memory:' for in-memory")
        if "\x00" in text:
            raise ValueError("a database path cannot contain NUL")
        return cls(str(Path(text).expanduser().absolute()))


def parse_url(url: str) -> tuple[Target, dict[str, str]]:
    """Split a ``sqlite://`` URL into its target and its query options (as strings)."""
    if not isinstance(url, str):
        raise TypeError(f"URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"not a sqlite URL: {url!r} (expected sqlite:///path.db)")
    if parts.netloc:
        raise ValueError(
            f"sqlite URLs have no host: {url!r}; write sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    if parts.fragment:
        raise ValueError(f"sqlite URLs take no #fragment: {url!r}")
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key not in URL_OPTIONS:
            raise ValueError(
                f"unknown sqlite URL option {key!r} in {url!r}; known: {', '.join(URL_OPTIONS)}"
            )
        if key in options:
            raise ValueError(f"sqlite URL option {key!r} is given twice in {url!r}")
        options[key] = value
    path = unquote(parts.path)
    if path in ("", "/"):
        return Target(None), options
    if not path.startswith("/"):
        raise ValueError(f"malformed sqlite URL {url!r}; write sqlite:///path.db")
    return Target.of(path[1:]), options


__all__ = ["MEMORY", "SCHEMES", "URL_OPTIONS", "Target", "parse_url"]
