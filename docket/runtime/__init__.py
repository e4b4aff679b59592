"""The runtime (layer 6): asyncio node execution, workers and lifecycle discipline."""
