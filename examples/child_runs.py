"""Child runs: a newsletter graph calls a saved "summarise" graph once per article.

What it shows, on a SQLite file with an in-process worker:

* **a graph calling a graph** — the ``summaries`` node has no implementation: its
  ``child`` option runs the ``summarise`` graph as a run of its own, mapping the article
  into the child's input and the child's ``summary`` output back into the parent;
* **pinning** — saving the newsletter pins the child to the summarise version saved
  before it (the pinned hash is printed, and is part of the newsletter's own hash);
* **a map over a child node** — one child run per article, their summaries landing in
  article order whatever order the children finish in;
* **a failing child is a failing attempt** — the first summary of the second article
  fails; the node's retry policy asks for a new child (attempt 2), which succeeds;
* **links both ways** — each child carries its parent in its metadata, and the parent
  records a ``child_started`` event per child.

    python examples/child_runs.py
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
    S,
    SyncDocket,
)
from docket.graph.children import ChildSpec
from docket.graph.maps import MapSpec
from docket.graph.nodes import Failure, RetryPolicy
from docket.records import PARENT_KEY, EventType
from docket.values import JSONValue

nodes = NodeRegistry()


@nodes.node("news.summarise")
async def summarise(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Failure:
    article = str(state["article"])
    failures = ctx.application["fail_once"]
    assert isinstance(failures, set)
    if article in failures:  # the first try at this article fails
        failures.discard(article)
        return Failure(f"the summariser timed out on {article!r}")
    await asyncio.sleep(0.01 * len(article) % 0.05)  # children finish in a mixed order
    return {"summary": article.split(":")[0].upper()}


@nodes.node("news.assemble")
def assemble(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    summaries = state["summaries"]
    assert isinstance(summaries, list)
    return {"newsletter": " | ".join(str(s) for s in summaries)}


summary_graph = (
    GraphBuilder("summarise")
    .input("article", S.string(min_length=1), required=True)
    .field("summary", S.string())
    .node("write", "news.summarise")
    .edge("begin", START, "write")
    .edge("done", "write", FINISH)
    .output("summary")
    .build()
)

newsletter_graph = (
    GraphBuilder("newsletter")
    .input("articles", S.list(S.string()), required=True)
    .field("summaries", S.list(S.string()), reducer=R.append())
    .field("newsletter", S.string())
    .node(
        "summaries",
        child=ChildSpec(
            graph="summarise", input={"article": "article"}, output={"summaries": "summary"}
        ),
        map=MapSpec(over="articles", item="article"),
        retry=RetryPolicy(max_attempts=2),
    )
    .node("assemble", "news.assemble")
    .edge("begin", START, "summaries")
    .edge("gather", "summaries", "assemble")
    .edge("done", "assemble", FINISH)
    .output("newsletter")
    .build()
)


def main() -> None:
    articles = ["otters: they hold hands", "tides: the moon again", "bread: sourdough wins"]
    context = {"fail_once": {articles[1]}}
    with tempfile.TemporaryDirectory(prefix="docket-children-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'news.db'}"
        with SyncDocket(url, nodes=nodes, context=context, poll_interval=0.1) as docket:
            child_ref = docket.save_graph(summary_graph)  # the child first: it gets pinned
            ref = docket.save_graph(newsletter_graph)
            pinned = docket.fetch_graph(ref).nodes["summaries"].child["hash"]
            print(f"summarise pinned at {str(pinned)[:12]} (saved {child_ref.graph_hash[:12]})")
            docket.start_worker()
            run = docket.start_run(ref, {"articles": list(articles)}, run_id="news-1")
            run = docket.await_run(run.id, timeout=60)
            print(f"run {run.id} is {run.status}")
            print(f"  newsletter: {run.output and run.output['newsletter']}")
            for event in docket.history(run.id):
                if event.type is EventType.CHILD_STARTED:
                    child = docket.fetch_run(str(event.payload["child_run_id"]))
                    link = child.metadata[PARENT_KEY]
                    assert isinstance(link, dict)
                    print(f"  child {child.id} is {child.status} (parent {link['run_id']})")
            docket.stop_worker()


if __name__ == "__main__":
    main()
