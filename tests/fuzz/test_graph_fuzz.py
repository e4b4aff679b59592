"""Corrupted graph documents sent to the wire loader and the compiler (no store needed).

A real graph's wire document and effective document are mutated at a random path
(replaced, deleted, added to) and fed to ``from_json`` / ``from_dict`` /
``graph_from_effective_document`` / ``compile_effective_document``. The loaders may
only succeed or raise ``GraphLoadError``; the compiler only returns a ``CompileResult``
(whose diagnostics say what is wrong), and a document it accepts has the hash it claims.
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from docket.graph.compiler import (
    CompileResult,
    compile_effective_document,
    compile_graph,
    effective_document,
    graph_from_effective_document,
)
from docket.graph.wire import GraphLoadError, from_dict, from_json, to_dict
from docket.values import content_hash
from tests.fuzz.support import FUZZ, any_values, text
from tests.fuzz.test_facade_fuzz import NODES, fuzz_graph

COMPILED = compile_graph(fuzz_graph(), NODES)
assert COMPILED.effective is not None
EFFECTIVE = effective_document(COMPILED.effective)
WIRE = to_dict(fuzz_graph())


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths into ``value``, not deeper than the real document goes (inserted junk may be
    nested thousands of levels deep)."""
    out = [prefix]
    if len(prefix) > 8:
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*prefix, index)))
    return out


@st.composite
def corrupted(draw: st.DrawFn, original: dict[str, Any]) -> Any:
    document: Any = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        if not path:
            document = draw(any_values)
            continue
        parent: Any = document
        for step in path[:-1]:
            parent = parent[step]
        how = draw(st.sampled_from(["replace", "delete", "add"]))
        if how == "replace":
            parent[path[-1]] = draw(any_values)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(text)] = draw(any_values)
        else:
            parent.append(draw(any_values))
        if not isinstance(document, dict | list):
            break
    return document


def _json_text(document: object) -> str | None:
    try:
        return json.dumps(document)
    except (TypeError, ValueError, RecursionError):
        return None


@FUZZ
@given(document=corrupted(WIRE), raw=st.one_of(st.none(), st.text(max_size=40)))
def test_the_wire_loader_raises_only_graph_load_errors(document: Any, raw: str | None) -> None:
    for strict in (True, False):
        with contextlib.suppress(GraphLoadError):
            from_dict(document, strict=strict)
    for source in (_json_text(document), raw):
        if source is None:
            continue
        with contextlib.suppress(GraphLoadError):
            from_json(source)


@FUZZ
@given(document=corrupted(EFFECTIVE))
def test_stored_documents_load_or_raise_graph_load_errors(document: Any) -> None:
    with contextlib.suppress(GraphLoadError):
        graph_from_effective_document(document)
    if not isinstance(document, dict):
        return
    result = compile_effective_document(document, NODES)
    assert isinstance(result, CompileResult)
    if result.ok:
        assert result.graph_hash == content_hash(document)
