"""An agent loop: a (fake) LLM plans, a tool acts, until the LLM answers. No network.

What it shows, on a SQLite file with an in-process worker:

* **retries** — the LLM's first call is rate limited (the node raises); the attempt
  fails retryably and the worker re-runs it after the node's backoff;
* **timeouts** — the LLM's second call hangs; the node's 300 ms attempt timeout cancels
  it, and that attempt is retried too;
* **idempotency** — the tool sends an e-mail and then loses its connection before it can
  return. The retry must not send a second e-mail: the outbox deduplicates on the
  activation's ``ctx.task_id``, which every attempt of one activation shares (the
  per-attempt ``ctx.idempotency_key`` changes from ``…:1`` to ``…:2`` on a retry; it is
  the key to use when a *crash replay* of the same attempt must not repeat an effect,
  while a deliberate retry may).

    python examples/agent_loop.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from docket import (
    FINISH,
    START,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    RetryPolicy,
    S,
    SyncDocket,
)
from docket.graph.guards import equals
from docket.records import EventType
from docket.values import JSONValue


class RateLimited(Exception):
    """What an LLM API says when called too often."""


class FakeLLM:
    """A scripted stand-in for a chat-completion API: each call takes the next behaviour."""

    def __init__(self) -> None:
        self.script = ["rate_limited", "hang", "call_tool", "answer"]

    async def complete(self, messages: list[str]) -> dict[str, str]:
        behaviour = self.script.pop(0)
        if behaviour == "rate_limited":
            raise RateLimited("429: slow down")
        if behaviour == "hang":
            await asyncio.sleep(30)  # cancelled by the node's timeout long before this
        if behaviour == "call_tool":
            return {"type": "tool", "tool": "send_email", "to": "ada@example.com"}
        return {"type": "answer", "text": f"Done: I e-mailed Ada ({len(messages)} messages)."}


class Outbox:
    """An external system that accepts an idempotency key with each request."""

    def __init__(self) -> None:
        self.sent: dict[str, str] = {}

    def send(self, key: str, to: str, text: str) -> bool:
        if key in self.sent:
            return False
        self.sent[key] = f"to {to}: {text}"
        return True


nodes = NodeRegistry()


def say(ctx: NodeContext, line: str) -> None:
    log = ctx.application["log"]
    assert isinstance(log, list)
    log.append(f"  {ctx.node_id} attempt {ctx.attempt}: {line}")


@nodes.node("agent.plan")
async def plan(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    llm = ctx.application["llm"]
    assert isinstance(llm, FakeLLM)
    history = state.get("messages")
    messages = [str(m) for m in history] if isinstance(history, list) else []
    say(ctx, "asking the LLM")
    reply = await llm.complete(messages)
    if reply["type"] == "tool":
        say(ctx, f"the LLM wants {reply['tool']}")
        return {"next": "act", "tool_call": dict(reply), "messages": ["assistant: tool call"]}
    say(ctx, "the LLM answered")
    return {"next": "done", "answer": reply["text"], "messages": ["assistant: answer"]}


@nodes.node("agent.act")
async def act(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    outbox = ctx.application["outbox"]
    assert isinstance(outbox, Outbox)
    call = state["tool_call"]
    assert isinstance(call, dict)
    fresh = outbox.send(ctx.task_id, str(call["to"]), "your report is ready")
    say(
        ctx,
        f"{'sent' if fresh else 'already sent, not sending again'} "
        f"(task {ctx.task_id}, attempt key {ctx.idempotency_key})",
    )
    if ctx.attempt == 1:
        raise ConnectionError("the connection dropped before the tool could reply")
    return {"messages": ["tool: e-mail sent"]}


graph = (
    GraphBuilder("agent-loop")
    .field("messages", S.list(S.string()), reducer=R.append())
    .field("next", S.enum(["act", "done"]))
    .field("tool_call", S.map())
    .field("answer", S.string())
    .node("plan", "agent.plan", retry=RetryPolicy(max_attempts=3, backoff_ms=200), timeout_ms=300)
    .node("act", "agent.act", retry=RetryPolicy(max_attempts=2, backoff_ms=100))
    .edge("begin", START, "plan")
    .edge("use_tool", "plan", "act", guard=equals("next", "act"))
    .edge("observe", "act", "plan")
    .edge("finish", "plan", FINISH, guard=equals("next", "done"))
    .max_supersteps(20)
    .output("answer")
    .build()
)


def main() -> None:
    log: list[str] = []
    outbox = Outbox()
    context = {"llm": FakeLLM(), "outbox": outbox, "log": log}
    with tempfile.TemporaryDirectory(prefix="docket-agent-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'agent.db'}"
        with SyncDocket(url, nodes=nodes, context=context, poll_interval=0.1) as docket:
            ref = docket.save_graph(graph)
            docket.start_worker()
            run = docket.start_run(ref, run_id="agent-1")
            run = docket.await_run(run.id, timeout=30)
            docket.stop_worker()
            print("attempts, as the nodes saw them:")
            print("\n".join(log))
            print(f"run {run.id} is {run.status}; answer: {run.output and run.output['answer']}")
            print(f"outbox: {len(outbox.sent)} e-mail(s) {list(outbox.sent.values())}")
            print("failed attempts, as stored:")
            for event in docket.history(run.id):
                if event.type is EventType.NODE_FAILED:
                    reason = str(event.payload.get("reason", ""))
                    print(
                        f"  step {event.step} {event.node_id} attempt "
                        f"{event.payload.get('attempt')}: {reason[:90]}"
                    )


if __name__ == "__main__":
    main()
