"""The invariant catalogue (docs/invariants.md) and the kit name the same invariants.

Every id a kit case is tagged with has exactly one row; no row names an id the kit no
longer uses; the cases a row names exist and carry its id; and a failing case's report
links to its row.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import docket_contract_tests
from docket_contract_tests.kit import CATALOGUE, catalogue_link

ROOT = Path(__file__).resolve().parent.parent
KIT = Path(docket_contract_tests.__file__).resolve().parent
DOC = ROOT / CATALOGUE

#: One row: | <a id="ID"></a>`ID` | rule | `test_module.py`: `test_a`, `test_b` |
ROW = re.compile(
    r'^\| <a id="(?P<anchor>[^"]+)"></a>`(?P<id>[^`]+)` \| (?P<rule>.+) \| (?P<where>.+) \|$'
)
WHERE = re.compile(r"^`(?P<module>test_\w+\.py)`: (?P<cases>`\w+`(?:, `\w+`)*)$")


def _tag(decorator: ast.expr) -> str | None:
    """The id of ``@invariant("ID")`` or ``@pytest.mark.docket_invariant("ID")``."""
    if not isinstance(decorator, ast.Call) or not decorator.args:
        return None
    func = decorator.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    first = decorator.args[0]
    if name in ("invariant", "docket_invariant") and isinstance(first, ast.Constant):
        return str(first.value)
    return None


def _kit_cases() -> dict[str, dict[str, set[str]]]:
    """Module -> case name -> the invariant ids it is tagged with."""
    found: dict[str, dict[str, set[str]]] = {}
    for path in sorted(KIT.glob("test_*.py")):
        cases = found.setdefault(path.name, {})
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                tags = {t for t in map(_tag, node.decorator_list) if t is not None}
                if tags:
                    cases[node.name] = tags
    return found


def _rows() -> list[re.Match[str]]:
    rows: list[re.Match[str]] = []
    fenced = False  # the page shows a row template inside a code fence: not a row
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (row := ROW.match(line)) is not None:
            rows.append(row)
    return rows


def test_every_kit_id_has_one_row_and_every_row_a_kit_id() -> None:
    kit_ids = {t for cases in _kit_cases().values() for tags in cases.values() for t in tags}
    row_ids = [row["id"] for row in _rows()]
    assert len(kit_ids) >= 50, sorted(kit_ids)  # the scan found the kit
    missing = sorted(kit_ids - set(row_ids))
    stale = sorted(set(row_ids) - kit_ids)
    doubled = sorted({i for i in row_ids if row_ids.count(i) > 1})
    assert not missing, f"kit ids without a row in {CATALOGUE}: {missing}"
    assert not stale, f"rows in {CATALOGUE} for ids the kit no longer uses: {stale}"
    assert not doubled, f"ids with more than one row in {CATALOGUE}: {doubled}"


def test_each_row_names_cases_that_carry_its_id() -> None:
    kit = _kit_cases()
    for row in _rows():
        ident = row["id"]
        assert row["anchor"] == ident, f"row {ident}: the anchor says {row['anchor']!r}"
        where = WHERE.match(row["where"])
        assert where is not None, f"row {ident}: 'tested in' is not `module.py`: `case`, …"
        module = where["module"]
        assert module in kit, f"row {ident}: no kit module {module}"
        for case in re.findall(r"`(\w+)`", where["cases"]):
            tags = kit[module].get(case)
            assert tags is not None, f"row {ident}: {module} has no case {case}"
            assert ident in tags, f"row {ident}: {module}::{case} is tagged {sorted(tags)}"


def test_the_kit_cites_the_catalogue_not_unpublished_specs() -> None:
    cited = [
        f"{path.name}:{number}"
        for path in sorted(KIT.glob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "backend-spec" in line or "§" in line
    ]
    assert not cited, f"kit text cites spec sections that are not published: {cited}"


def test_the_contract_page_links_the_catalogue() -> None:
    assert "(invariants.md)" in (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")


def test_a_failing_case_links_its_row() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "docket_contract_tests",
            "--docket-backend-factory",
            "docket_contract_tests.mutants:ttl_off_by_one",
            "--docket-invariant",
            "CLAIM-TTL-BOUNDARY",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, f"exit {done.returncode}\n{output[-4000:]}"
    link = catalogue_link("CLAIM-TTL-BOUNDARY")
    assert link == "docs/invariants.md#CLAIM-TTL-BOUNDARY"
    assert f"CLAIM-TTL-BOUNDARY: see {link}" in done.stdout, output[-4000:]
