"""``redis://`` URLs: which server (or cluster) a backend talks to, and its key prefix.

* ``redis://[user:password@]host:port[/db]`` — one Redis server (or Valkey);
* ``rediss://…`` — the same over TLS;
* ``redis+cluster://host:port`` (``rediss+cluster://`` over TLS) — a Redis Cluster,
  discovered from that node (database 0 only).

The query string may carry ``prefix=`` (the namespace every key of this backend lives
under; default ``docket``) and any connection option the redis-py driver understands
(``socket_timeout``, ``socket_connect_timeout``, ``health_check_interval``, …), which are
handed to it unchanged.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from docket_redis.keys import check_prefix

DEFAULT_PREFIX = "docket"
SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")


@attrs.frozen
class Target:
    """Where to connect: a driver URL (``redis://`` or ``rediss://``), cluster or not."""

    url: str
    cluster: bool
    prefix: str

    def describe(self) -> str:
        """The URL without its password, for messages and logs."""
        parts = urlsplit(self.url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        if parts.username:
            netloc = f"{parts.username}@{netloc}"
        scheme = parts.scheme + ("+cluster" if self.cluster else "")
        return urlunsplit((scheme, netloc, parts.path, "", ""))


def parse_url(url: str) -> Target:
    if not isinstance(url, str):
        raise TypeError(f"URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"not a redis URL: {url!r} (expected one of {', '.join(SCHEMES)})")
    if not parts.hostname:
        raise ValueError(f"redis URL {url!r} names no host")
    if parts.fragment:
        raise ValueError(f"redis URLs take no #fragment: {url!r}")
    cluster = scheme.endswith("+cluster")
    prefix: str | None = None
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "prefix":
            if prefix is not None:
                raise ValueError(f"prefix is given twice in {url!r}")
            prefix = value
        else:
            rest.append((key, value))
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0: {url!r}")
    driver_scheme = scheme.split("+")[0]
    driver_url = urlunsplit(
        (driver_scheme, parts.netloc, "" if cluster else parts.path, urlencode(rest), "")
    )
    return Target(
        url=driver_url,
        cluster=cluster,
        prefix=check_prefix(DEFAULT_PREFIX if prefix is None else prefix),
    )


__all__ = ["DEFAULT_PREFIX", "SCHEMES", "Target", "parse_url"]
