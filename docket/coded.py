"""The base both error families share (layer 1): a stable ``code`` and its payload.

:class:`~docket.core.errors.CoreError` (values the pure core returns) and
:class:`~docket.errors.DocketError` (what the facade raises) carry the same fields and
serialise the same way; this holds that once. It is not itself a family: catch
``DocketError`` in application code, match ``CoreError`` values in the runtime.
"""

from __future__ import annotations

from typing import ClassVar

from docket.values import JSONDict, JSONValue

__all__ = ["CodedError"]


class CodedError(Exception):
    """``code`` (stable, machine-readable), ``message``, and optionally the ``phase`` it
    arose in, the ``node_id`` it concerns and durable ``details``."""

    code: ClassVar[str] = "error"

    def __init__(
        self,
        message: str,
        *,
        phase: str | None = None,
        node_id: str | None = None,
        details: JSONDict | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.phase = phase
        self.node_id = node_id
        self.details: JSONDict = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> JSONDict:
        return {
            "type": self.code,
            "message": self.message,
            "phase": self.phase,
            "node_id": self.node_id,
            "details": self.details,
        }

    @property
    def reasons(self) -> list[str]:
        """``details["reasons"]`` as a list of strings (empty when absent)."""
        raw: JSONValue = self.details.get("reasons", [])
        return [str(r) for r in raw] if isinstance(raw, list) else []
