"""Does history slow the hot path on PostgreSQL? ``python bench/postgres_growth.py``.

Times ``claim_due`` and commits on an empty schema and on one holding 100,000 finished
runs and 1,000,000 retained events, and prints the ratio per operation (target ≥ 0.8).
The benchmark itself ships with the backend (``python -m docket_postgres.bench``) so
operators can run it against their own server (``--url``); this is the repo entry point.
"""

from docket_postgres.bench import main

if __name__ == "__main__":
    main()
