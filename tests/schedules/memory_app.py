"""An ``--app`` for the schedule CLI tests: every Docket it makes shares one memory
backend on a manual clock, so in-process ``docket`` commands see each other's writes."""

from __future__ import annotations

from docket.contract.protocols import Backend
from docket.facade import Docket
from tests.schedules.helpers import manual_docket, nodes

DOCKET, BACKEND, CLOCK = manual_docket()


def create() -> Docket:
    return Docket(BACKEND, nodes=nodes)


def reset() -> Backend:
    global DOCKET, BACKEND, CLOCK
    DOCKET, BACKEND, CLOCK = manual_docket()
    return BACKEND
