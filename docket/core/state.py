"""What nodes, guards and outputs see of a run's committed channels.

One rule for every reader: a written input or state channel shows its committed value; a
never-written one shows its effective default (the declared default, or a reducer's zero
such as ``[]`` for ``append``) when that is not ``None``; otherwise the key is absent
(nodes and guards see *missing*, not ``None``). Edge channels are never visible.
"""

from __future__ import annotations

from collections.abc import Mapping

from docket.graph.compiler import ChannelKind, RuntimeGraph
from docket.graph.guards import StateView
from docket.records import ChannelState
from docket.values import JSONDict, JSONValue

__all__ = [
    "committed_fields",
    "copy_dict",
    "copy_json",
    "guard_view",
    "project_outputs",
    "snapshot",
    "source_versions",
]


def snapshot(rtg: RuntimeGraph, channels: Mapping[str, ChannelState]) -> JSONDict:
    """Public input/field id -> visible value (see the module docstring)."""
    out: JSONDict = {}
    for channel_id, channel in rtg.visible_channels:
        state = channels.get(channel_id)
        if state is not None and state.version > 0:
            out[channel.public_id] = state.value
        elif channel.default is not None:
            out[channel.public_id] = channel.default
    return out


def source_versions(rtg: RuntimeGraph, channels: Mapping[str, ChannelState]) -> dict[str, int]:
    """Every declared input and field -> its committed version (0 when never written)."""
    out: dict[str, int] = {}
    for channel_id, channel in rtg.visible_channels:
        state = channels.get(channel_id)
        out[channel.public_id] = 0 if state is None else state.version
    return out


def guard_view(
    rtg: RuntimeGraph, channels: Mapping[str, ChannelState], changed: frozenset[str]
) -> StateView:
    """The state a guard reads; ``changed`` holds public ids."""
    return StateView(snapshot(rtg, channels), source_versions(rtg, channels), changed)


def committed_fields(rtg: RuntimeGraph, channels: Mapping[str, ChannelState]) -> JSONDict:
    """Field id -> committed value, for the state fields written so far (the reducer base)."""
    out: JSONDict = {}
    for channel_id, channel in rtg.visible_channels:
        if channel.kind is not ChannelKind.STATE:
            continue
        state = channels.get(channel_id)
        if state is not None and state.version > 0:
            out[channel.public_id] = state.value
    return out


def project_outputs(rtg: RuntimeGraph, channels: Mapping[str, ChannelState]) -> JSONDict:
    """The run output: each declared output's effective source value (``None`` when the
    source was never written and has no default)."""
    visible = snapshot(rtg, channels)
    out: JSONDict = {}
    for output_id, output in rtg.outputs.items():
        public = rtg.channels[output.source_channel].public_id
        out[output_id] = copy_json(visible.get(public))
    return out


_CONTAINERS = (dict, list)  # a tuple: faster to test than the union type


def copy_json(value: JSONValue) -> JSONValue:
    """A deep copy of a durable value (lists and dicts are rebuilt, scalars shared)."""
    # Scalars are tested in place rather than by a call each: a long list of strings (a
    # chat history) is copied at list-comprehension speed.
    if isinstance(value, dict):
        return copy_dict(value)
    if isinstance(value, list):
        return [copy_json(item) if isinstance(item, _CONTAINERS) else item for item in value]
    return value


def copy_dict(value: JSONDict) -> JSONDict:
    """A deep copy of a durable dict."""
    return {
        key: copy_json(item) if isinstance(item, _CONTAINERS) else item
        for key, item in value.items()
    }
