"""The class tree drawn at the top of ``docket.errors`` is the real one, codes included."""

from __future__ import annotations

import re

from docket import errors
from docket.coded import CodedError
from docket.core import errors as core

_DRAWN = re.compile(r"^ {4}[│ ]*(?:[├└]── )?([A-Z]\w+) {2,}([a-z_]+)\b", re.M)


def _exported() -> dict[str, str]:
    found = {}
    for name in errors.__all__:
        kind = getattr(errors, name)
        if isinstance(kind, type) and issubclass(kind, errors.DocketError):
            found[name] = kind.code
    return found


def test_the_drawn_tree_names_every_exported_error_with_its_code() -> None:
    drawn = dict(_DRAWN.findall(errors.__doc__ or ""))
    assert drawn == _exported()


def test_core_and_facade_errors_share_one_base_and_serialise_alike() -> None:
    facade = errors.InvalidInput("bad", phase="input", node_id="n", details={"reasons": ["x"]})
    value = core.InvalidInput("bad", phase="input", node_id="n", details={"reasons": ["x"]})
    assert isinstance(facade, CodedError) and isinstance(value, CodedError)
    assert facade.to_dict() == value.to_dict()
    assert str(facade) == str(value) == "invalid_input: bad"
    assert facade.reasons == value.reasons == ["x"]
    assert "to_dict" not in vars(errors.DocketError) and "to_dict" not in vars(core.CoreError)
