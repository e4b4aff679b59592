"""``docket runs show``'s family part: a child's parent line, and a parent's children with
the questions they wait on and the command that answers each (issue 19 §4)."""

from __future__ import annotations

import argparse
import json
import shlex
from urllib.parse import urlsplit

from docket.cli._output import one_line
from docket.core.children import ParentLink
from docket.core.family import ChildInfo
from docket.records import InterruptState, Run
from docket.values import JSONDict, JSONValue

__all__ = ["answer_command", "family_json", "parent_line", "print_children"]


def parent_line(run: Run) -> tuple[str, str] | None:
    """The ``parent`` row of a child run (``None`` for a top-level run)."""
    link = ParentLink.of(run)
    if link is None:
        return None
    return (
        "parent",
        f"{link.run_id} (task {link.task_id}, node {link.node_id}, attempt {link.attempt})",
    )


def family_json(run: Run, children: tuple[ChildInfo, ...]) -> JSONDict:
    """``parent`` for a child, ``children`` for a parent; neither key for a run with no
    family, so other runs keep their ``--json`` shape."""
    out: JSONDict = {}
    link = ParentLink.of(run)
    if link is not None:
        out["parent"] = link.to_json()
    if children:
        out["children"] = list[JSONValue]([c.to_json() for c in children])
    return out


def print_children(args: argparse.Namespace, children: tuple[ChildInfo, ...]) -> None:
    if not children:
        return
    print(f"children ({len(children)}):")
    for child in children:
        waits = ", awaited" if child.awaited else ""
        print(
            f"  {child.child_run_id}  node {child.node_id}, task {child.task_id}, "
            f"attempt {child.attempt}: {child.status}{waits}"
        )
        for interrupt in child.open_interrupts:
            _print_child_interrupt(args, child.child_run_id, interrupt)


def _print_child_interrupt(
    args: argparse.Namespace, child_run_id: str, interrupt: InterruptState
) -> None:
    print(
        f"    interrupt {interrupt.id}: node {interrupt.node_id} "
        f"waits for {interrupt.resume_channel!r}"
    )
    question = interrupt.metadata.get("question")
    if isinstance(question, str):
        print(f"      question  {one_line(question)}")
    schema = json.dumps(interrupt.schema, ensure_ascii=False) if interrupt.schema else "-"
    print(f"      schema    {schema}")
    print(f"      answer    {answer_command(args, child_run_id, interrupt.id)}")


def answer_command(args: argparse.Namespace, run_id: str, interrupt_id: str) -> str:
    """The ``docket runs resolve`` line answering it, with the connection options this
    command was given — but never a URL holding a password (it would land in terminal
    logs; the reader adds it), and ``$DOCKET_BACKEND`` stays implied."""
    words = ["docket", "runs", "resolve"]
    if args.backend and urlsplit(args.backend).password is None:
        words += ["--backend", args.backend]
    if args.app:
        words += ["--app", args.app]
    if args.tenant:
        words += ["--tenant", args.tenant]
    words += [run_id, interrupt_id]
    return shlex.join(words) + " ANSWER_JSON"
