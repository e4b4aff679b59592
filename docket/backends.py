"""Installed backends, found by URL scheme (entry-point group ``docket.backends``).

``available()`` lists what is installed (``memory`` always); ``from_url(url)`` creates the
backend that serves a URL. See :mod:`docket.contract.registry` and docs/contract.md.
"""

from docket.contract.registry import (
    GROUP,
    BackendFactory,
    UnknownBackend,
    available,
    from_url,
    scheme_of,
)

__all__ = ["GROUP", "BackendFactory", "UnknownBackend", "available", "from_url", "scheme_of"]
