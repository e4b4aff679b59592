"""A complete backend over ordered, transactional key-value operations.

A store that offers ``get``/``put``/``delete`` and ordered range scans inside
serializable transactions (LMDB, RocksDB, FoundationDB, TiKV, etcd, …) becomes a docket
backend by implementing :class:`KVStore` — a few dozen lines of glue — and handing it to
:class:`KVBackend`, which implements the whole contract once: the four stores, claims
with TTL/lease/abandon/poison, wake ordering, listings with cursors and scopes,
idempotent replays, limits, ``initialize_claimed`` (``ClaimedStarts``),
``commit_claimed_chain`` (``ChainedCommits``), ``reopen_failed`` and in-process
``notify``. Every rule comes from the shared validator and helpers
(:mod:`docket.contract.validate`, :mod:`~docket.contract.queries`,
:mod:`~docket.contract.stored`); ``examples/backends/docket_lmdb`` is a plugin built on
it and ``docs/backend-authors.md`` walks through writing one.

How it runs: each operation is one transaction. Writes run on one thread, in the order
they were sent (so chained commits land in order, and a store with a single writer
never contends with itself); reads run on a small pool beside it; the event loop never
blocks on the store. Every decision is taken before the first write, and announcements
(``wait_for_work``) go out after the commit.

Key layout (version ``docket-kv 1``, recorded at ``00 "layout"``; a store with another
layout is refused at ``open``). ``H`` = 16-byte digest of (owner, run id), ``O`` = of
the owner, ``G`` = of (owner, graph id); ``str`` = UTF-8, NUL escaped, ``00``-terminated;
``t8`` = microseconds since the epoch + 2**63, big-endian; ``u8`` = big-endian seq:

=======  =====================================  ==========================================
tag      key                                     value
=======  =====================================  ==========================================
``h``    ``h H``                                 head: summary + operational state (JSON)
``d``    ``d H``                                 run document (canonical JSON)
``e``    ``e H u8(seq)``                         SHA-256 of the event's content + event JSON
``t``    ``t H str(transition_id)``              digest of the committed proposal
``w``    ``w t8(wake_at) str(run_id) H``         due runs, in ``select_claims``' order
``c``    ``c t8(claimed_at) str(run_id) H``      claims, oldest first (expiry)
``l``    ``l t8(started_at) str(run_id) H``      every run (``System`` listings, reversed)
``o``    ``o O t8(started_at) str(run_id)``      ``H``: one owner's runs (owner listings)
``g``    ``g G str(graph_hash)``                 ``t8(published_at)`` + graph document
``v``    ``v G t8(published_at) str(hash)``      graph versions, newest last
=======  =====================================  ==========================================

A run is in ``w`` exactly while it has a wake and in ``c`` exactly while it is claimed
(:func:`~docket.contract.kv._tx.index_keys`), so ``claim_due`` reads only the due and
the expired: a scan of ``w`` up to now and of ``c`` up to ``now - orphan_ttl``. Runs with
the same id in two tenants tie on ``(time, run_id)`` and are ordered there by digest;
``claim_due`` reads every such tie, and ``select_claims`` orders them by tenant. Digests
keep the longest key at ``max_id_bytes + 26`` bytes (281 by default; LMDB takes 511).
"""

from docket.contract.kv._backend import KVBackend, kv_options
from docket.contract.kv._protocol import KVConflict, KVStore, KVTransaction

__all__ = ["KVBackend", "KVConflict", "KVStore", "KVTransaction", "kv_options"]
