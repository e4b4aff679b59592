"""The docket contract kit: shared conformance cases for docket backends.

Run it with ``pytest --pyargs docket_contract_tests --docket-backend URL`` (or
``--docket-backend-factory MODULE:CALLABLE``); see :mod:`docket_contract_tests.plugin`.
:mod:`docket_contract_tests.mutants` holds deliberately broken backends and
``python -m docket_contract_tests.negative`` proves the kit catches each of them.
:mod:`docket_contract_tests.differential` compares a backend with the reference over
seeded random streams of operations; a backend supplies only a factory.
"""

from docket_contract_tests.kit import Kit, KitFailure, Subject, audit, audit_problems, invariant

__all__ = ["Kit", "KitFailure", "Subject", "audit", "audit_problems", "invariant"]
