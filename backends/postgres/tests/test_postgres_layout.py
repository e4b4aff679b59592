"""The package's shape: modules small enough to read in one sitting, and the schema's DDL
checked in as plain SQL.

``schema.sql`` is what ``schema_sql()`` renders (generate-and-check, as psycopg does for
its generated code): later migrations rewrite parts of earlier function bodies in
Python, so this file is where a reviewer reads the SQL, and its diff is the change.
"""

from __future__ import annotations

from pathlib import Path

import docket_postgres
from docket_postgres.schema import schema_sql

PACKAGE = Path(docket_postgres.__file__).parent
MAX_MODULE_LINES = 800  # see docs/backends/postgres.md, "Code layout"


def test_every_module_is_small_enough_to_read_in_one_sitting() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    assert "backend.py" in sizes and "schema.py" in sizes
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not too_long, f"split these by concern: {too_long}"


def test_the_checked_in_schema_sql_is_what_the_migrations_render() -> None:
    checked_in = (PACKAGE / "schema.sql").read_text()
    rendered = schema_sql()
    assert checked_in == rendered, (
        "schema.sql is stale; regenerate it with "
        "python -m docket_postgres._schema > backends/postgres/docket_postgres/schema.sql"
    )
    # the current body of a function rewritten by later versions is there as plain text
    assert 'CREATE OR REPLACE FUNCTION "docket".commit_run(' in checked_in
