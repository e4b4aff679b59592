"""``KVStore`` on an LMDB environment: the only module that touches ``lmdb`` (untyped).

LMDB has one writer at a time and snapshot readers, which is exactly what
:class:`~docket.contract.kv.KVStore` asks for. An environment must be opened once per
process (a second ``lmdb.open`` of the same path breaks its locks), so stores on the
same path share one, counted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from docket.contract.errors import PermanentStoreError, RetryableStoreError

_OPEN: dict[str, tuple[Any, int]] = {}  # path -> (environment, users)
_OPEN_LOCK = threading.Lock()


class LMDBTransaction:
    """One LMDB transaction as a :class:`~docket.contract.kv.KVTransaction`."""

    def __init__(self, txn: Any) -> None:
        self._txn = txn

    def get(self, key: bytes) -> bytes | None:
        value = self._txn.get(key)
        return None if value is None else bytes(value)

    def put(self, key: bytes, value: bytes) -> None:
        self._txn.put(key, value)

    def delete(self, key: bytes) -> None:
        self._txn.delete(key)

    def scan(
        self, start: bytes, end: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        left = -1 if limit is None else limit
        with self._txn.cursor() as cursor:
            if reverse:  # the last key before ``end``
                found = cursor.prev() if cursor.set_range(end) else cursor.last()
            else:
                found = cursor.set_range(start)
            while found and left != 0:
                key = bytes(cursor.key())
                if (key < start) if reverse else (key >= end):
                    return
                yield key, bytes(cursor.value())
                left -= 1
                found = cursor.prev() if reverse else cursor.next()


class LMDBStore:
    """An LMDB environment (a directory) as a :class:`~docket.contract.kv.KVStore`."""

    def __init__(self, path: str, map_size: int) -> None:
        self._path = path
        with _OPEN_LOCK:
            env, users = _OPEN.get(path, (None, 0))
            if env is None:
                os.makedirs(path, exist_ok=True)
                # sync and metasync (the defaults): a commit is on disk when it returns
                env = lmdb.open(path, map_size=map_size, max_readers=254)
            _OPEN[path] = (env, users + 1)
        self._env = env
        self.max_key_bytes = int(env.max_key_size())

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[LMDBTransaction]:
        try:
            with self._env.begin(write=write) as txn:  # commits on a clean exit
                yield LMDBTransaction(txn)
        except lmdb.MapFullError as exc:
            raise PermanentStoreError(f"LMDB map is full; raise map_size ({exc})") from exc
        except lmdb.ReadersFullError as exc:
            raise RetryableStoreError(f"LMDB reader slots are all taken ({exc})") from exc
        except lmdb.Error as exc:
            raise PermanentStoreError(f"LMDB: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        with _OPEN_LOCK:
            env, users = _OPEN[self._path]
            if users > 1:
                _OPEN[self._path] = (env, users - 1)
                return
            del _OPEN[self._path]
        env.close()
