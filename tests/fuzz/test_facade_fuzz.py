"""Run inputs, metadata, ids and interrupt answers sent through the facade to every backend.

The property: a :class:`~docket.Docket` call returns, or raises a
:class:`~docket.errors.DocketError` subclass — never anything else — and a refused call
leaves everything stored as it was.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from docket import Docket
from docket.errors import DocketError
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.records import GraphRef, Run, RunStatus
from docket.values import JSONDict
from tests.fuzz.backends import OpenStore
from tests.fuzz.support import FUZZ, any_maps, any_values, durable_values, ids, text

NODES = NodeRegistry()
ANSWER = S.object({"approved": S.boolean(required=True), "score": S.integer()})


@NODES.node("fuzz_ask")
def _ask(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    if state.get("decision") is None:
        return Interrupt("decision", schema=ANSWER, id="question")
    return {"applied": True}


def fuzz_graph() -> Graph:
    return (
        GraphBuilder("fuzz_graph")
        .input("name", S.string(), required=True)
        .input("count", S.integer())
        .input("tags", S.list(S.string()))
        .input("extra", S.map())
        .field("decision", ANSWER)
        .field("applied", S.boolean())
        .node("ask", "fuzz_ask")
        .edge("start", START, "ask")
        .edge("done", "ask", FINISH)
        .output("applied")
        .build()
    )


valid_inputs = st.fixed_dictionaries(
    {"name": st.text(max_size=8)},
    optional={
        "count": st.integers(-(2**53), 2**53),
        "tags": st.lists(st.text(max_size=5), max_size=3),
        "extra": st.dictionaries(st.text(max_size=5), durable_values, max_size=3),
    },
)
inputs = st.one_of(
    valid_inputs,
    valid_inputs.flatmap(
        lambda base: st.builds(
            lambda key, value: {**base, key: value},
            st.one_of(st.sampled_from(["name", "count", "tags", "extra"]), text),
            any_values,
        )
    ),
    any_maps,
    st.none(),
)
answers = st.one_of(
    st.fixed_dictionaries(
        {"approved": st.booleans()}, optional={"score": st.integers(-(2**53), 2**53)}
    ),
    st.fixed_dictionaries({"approved": any_values}, optional={"score": any_values}),
    any_maps,
)


async def everything(docket: Docket) -> list[tuple[str, int, RunStatus]]:
    page = await docket.list_runs(limit=1000)
    return sorted((r.id, r.checkpoint_seq, r.status) for r in page.runs)


def test_start_run_inputs(store: OpenStore) -> None:
    docket = Docket(store.backend, nodes=NODES)
    runner = store.runner
    runner.run(docket.open())
    ref: GraphRef = runner.run(docket.save_graph(fuzz_graph()))
    counter = iter(range(10**9))

    @FUZZ
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        given_input: Any = data.draw(inputs, label="input")
        metadata: Any = data.draw(st.one_of(st.none(), any_maps), label="metadata")
        run_id: Any = data.draw(
            st.one_of(st.just(f"run-{next(counter)}"), ids, any_values), label="run_id"
        )

        async def scenario() -> None:
            nonlocal run_id
            before = await everything(docket)
            try:
                run = await docket.start_run(ref, given_input, run_id=run_id, metadata=metadata)
            except DocketError:
                assert await everything(docket) == before, "a refused start changed the store"
                return
            assert isinstance(run, Run) and run.id == (run_id or run.id)
            run_id = run.id
            assert await docket.fetch_run(run_id) == run

        runner.run(scenario())

    try:
        example()
    finally:
        runner.run(docket.close())


def test_interrupt_answers(store: OpenStore) -> None:
    docket = Docket(store.backend, nodes=NODES)
    runner = store.runner
    runner.run(docket.open())
    ref: GraphRef = runner.run(docket.save_graph(fuzz_graph()))
    waiting: list[str] = []

    async def park_one() -> None:
        run = await docket.start_run(ref, {"name": "n"})
        await docket.drain_due()
        parked = await docket.fetch_run(run.id)
        assert parked.status is RunStatus.WAITING, parked.status
        waiting.append(run.id)

    runner.run(park_one())

    @FUZZ
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        answer: Any = data.draw(answers, label="answer")
        interrupt_id: Any = data.draw(
            st.one_of(st.just("question"), ids, any_values), label="interrupt_id"
        )
        run_id: Any = data.draw(st.one_of(st.just(waiting[-1]), ids, any_values), label="run_id")

        async def scenario() -> None:
            target = waiting[-1]
            before = (await docket.inspect_run(target), await docket.history(target))
            try:
                resolved = await docket.resolve_interrupt(run_id, interrupt_id, answer)
            except DocketError:
                after = (await docket.inspect_run(target), await docket.history(target))
                assert after == before, "a refused answer changed the run"
                return
            assert resolved.id == target and resolved.status is RunStatus.RUNNING
            assert resolved.checkpoint_seq == before[0].run.checkpoint_seq + 1
            await park_one()  # the answer was accepted: fuzz the next one on a fresh run

        runner.run(scenario())

    try:
        example()
    finally:
        runner.run(docket.close())
