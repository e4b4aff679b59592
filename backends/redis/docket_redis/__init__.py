"""docket-redis: the Redis backend (Lua scripts). Not implemented yet.

Registers no backend until its issue lands, so ``redis://`` is reported as not
installed rather than half-working.
"""
