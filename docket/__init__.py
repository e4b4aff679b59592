"""docket: a durable, graph-based workflow engine."""

__version__ = "0.1.0"
