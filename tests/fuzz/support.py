"""Shared hypothesis settings and value strategies of the fuzzers.

Budget: ``DOCKET_FUZZ_EXAMPLES`` examples per fuzzer and backend (default 40, which keeps
every fuzzer together well under a minute in ``make test``). Without the variable the
run is derandomized (the same examples every time, so CI is repeatable); with it,
hypothesis draws fresh examples, for exploring by hand::

    DOCKET_FUZZ_EXAMPLES=500 .venv/bin/pytest tests/fuzz -q
"""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal
from typing import Any, Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES: Final = int(os.environ.get("DOCKET_FUZZ_EXAMPLES", "40"))

FUZZ: Final = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="DOCKET_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    # One opened store serves every example of a test (fresh ids per example).
    suppress_health_check=list(HealthCheck),
)

#: Strings that have broken encoders, drivers and key schemes before.
ODD_STRINGS: Final = (
    "",
    " ",
    "\x00",
    "\ud800",
    "a\udfffb",
    "\u2028",
    "é",
    "🦦",
    "$guard",
    "{tenant}",
    "a:b",
    "%s",
    "'; drop table runs; --",
    "x" * 300,
)

#: Integers at and beyond the edges of 53-bit floats and 64-bit columns.
ODD_INTEGERS: Final = (2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**400, -(10**30))

text = st.one_of(st.text(max_size=12), st.sampled_from(ODD_STRINGS))
ids = st.one_of(
    st.text(alphabet="abcdefghij-_0123456789", min_size=1, max_size=12),
    st.sampled_from(ODD_STRINGS),
)

durable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)

#: Values that a durable JSON store should accept.
durable_values = st.recursive(
    durable_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)


class Opaque:
    """An arbitrary Python object: never durable."""

    def __repr__(self) -> str:
        return "Opaque()"


odd_leaves = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0]),
    st.sampled_from(ODD_INTEGERS),
    st.sampled_from(ODD_STRINGS),
    st.binary(max_size=4),
    st.just(Decimal("1.5")),
    st.just(1 + 2j),
    st.just(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)),
    st.builds(Opaque),
    st.just({1, 2}),
)


def _nested(depth: int, kind: str) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


#: Nesting deeper than Python's recursion limit, for recursive walkers.
deep_values = st.builds(
    _nested, st.sampled_from([50, 900, 1500, 5000]), st.sampled_from(["list", "dict"])
)

#: Anything at all: durable, almost durable, or not a JSON value in any sense.
any_values = st.one_of(
    durable_values,
    st.recursive(
        st.one_of(durable_leaves, odd_leaves),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.dictionaries(
                st.one_of(st.text(max_size=6), st.integers(), st.none(), st.booleans()),
                inner,
                max_size=3,
            ),
        ),
        max_leaves=8,
    ),
    deep_values,
)

#: A map-shaped input: mostly maps, sometimes anything.
any_maps = st.one_of(
    st.dictionaries(text, any_values, max_size=4),
    st.dictionaries(st.one_of(st.integers(), st.none(), st.tuples(st.integers())), durable_values),
    any_values,
)
