"""docket-sqlite: the embedded default backend (one file, WAL). Not implemented yet.

The package exists so the repository layout, type checks and installs are in place;
it registers no backend until its issue lands, so ``sqlite://`` is reported as not
installed rather than half-working.
"""
