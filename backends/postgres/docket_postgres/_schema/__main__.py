"""``python -m docket_postgres._schema [schema]``: the DDL ``schema_sql()`` renders.

With no argument it prints what ``schema.sql`` beside :mod:`docket_postgres.schema`
must hold (the tests compare them): regenerate that file with it after changing a
migration.
"""

from __future__ import annotations

import sys

from docket_postgres.schema import schema_sql

sys.stdout.write(schema_sql(*sys.argv[1:2]))
