"""docket-postgres: the PostgreSQL backend (psycopg 3). Not implemented yet.

Registers no backend until its issue lands, so ``postgresql://`` is reported as not
installed rather than half-working.
"""
