"""The runtime (layer 5): asyncio node execution, workers and lifecycle discipline."""
