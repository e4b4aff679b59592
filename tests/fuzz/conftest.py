"""The opened store every fuzzer runs against, once per backend kind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fuzz.backends import KINDS, OpenStore


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[OpenStore]:
    opened = OpenStore(str(request.param))
    try:
        yield opened
    finally:
        opened.close()
