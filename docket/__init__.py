"""docket: a durable, graph-based workflow engine.

The everyday names are importable from here::

    from docket import Docket, GraphBuilder, NodeRegistry, S, R, START, FINISH

    nodes = NodeRegistry()

    @nodes.node("greet")
    def greet(state, ctx):
        return {"greeting": f"hello {state['name']}"}

    async with Docket("sqlite:///app.db", nodes=nodes) as docket:
        ...

Errors live in :mod:`docket.errors`; settings in :mod:`docket.settings`; the inline test
runner in :mod:`docket.testing`.
"""

from docket import errors
from docket._sync import SyncDocket
from docket.errors import DocketError
from docket.facade import Docket, DrainSummary
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import (
    Failure,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    Receive,
    RetryPolicy,
    Sleep,
    Update,
    node,
)
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import (
    Event,
    GraphRef,
    QueueConfig,
    QueueStatus,
    RateLimit,
    Run,
    RunInfo,
    RunStatus,
)
from docket.runtime.lifecycle import CommitContext
from docket.runtime.worker import Worker, WorkerStats
from docket.settings import Settings
from docket.telemetry import Telemetry, TelemetryEvent

__version__ = "0.1.0"

__all__ = [
    "FINISH",
    "START",
    "CommitContext",
    "Docket",
    "DocketError",
    "DrainSummary",
    "Event",
    "Failure",
    "Graph",
    "GraphBuilder",
    "GraphRef",
    "Interrupt",
    "NodeContext",
    "NodeRegistry",
    "NodeState",
    "QueueConfig",
    "QueueStatus",
    "R",
    "RateLimit",
    "Receive",
    "RetryPolicy",
    "Run",
    "RunInfo",
    "RunStatus",
    "S",
    "Settings",
    "Sleep",
    "SyncDocket",
    "Telemetry",
    "TelemetryEvent",
    "Update",
    "Worker",
    "WorkerStats",
    "__version__",
    "errors",
    "node",
]
