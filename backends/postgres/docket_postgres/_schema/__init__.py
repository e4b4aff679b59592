"""The statements of each schema version, by version and concern.

:mod:`docket_postgres.schema` puts them in order (``MIGRATIONS``) and applies them.
Version 1 is split by concern (tables, write functions, claim functions); each later
version is one module. A later version that changes a function rewrites the text of
its earlier body, so no module holds the current body whole: ``schema.sql`` beside
:mod:`docket_postgres.schema` is what ``schema_sql()`` renders, every statement as it is
applied, checked against the code by the tests (regenerate it with
``python -m docket_postgres._schema > backends/postgres/docket_postgres/schema.sql``).
"""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v1_claims import CLAIMS
from docket_postgres._schema.v1_tables import TABLES
from docket_postgres._schema.v1_writes import WRITES
from docket_postgres._schema.v2 import V2
from docket_postgres._schema.v3 import V3
from docket_postgres._schema.v4 import V4
from docket_postgres._schema.v5 import V5
from docket_postgres._schema.v6 import V6
from docket_postgres._schema.v7 import V7
from docket_postgres._schema.v8 import V8
from docket_postgres._schema.v9 import V9
from docket_postgres._schema.v10 import V10
from docket_postgres._schema.v11 import V11

V1: Final[tuple[str, ...]] = (*TABLES, *WRITES, *CLAIMS)

__all__ = ["V1", "V2", "V3", "V4", "V5", "V6", "V7", "V8", "V9", "V10", "V11"]
