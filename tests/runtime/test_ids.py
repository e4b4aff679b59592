"""Run and transition ids: the documented shape, no repeats, and none shared with a fork."""

from __future__ import annotations

import os
import re

from docket.runtime.lifecycle import random_ids


def test_ids_have_their_shape_and_do_not_repeat() -> None:
    ids = [random_ids("transition") for _ in range(20_000)]
    assert all(re.fullmatch(r"transition_[0-9a-f]{16}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then out without running pytest's teardown
        os.write(write, " ".join(random_ids("run") for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    parent = {random_ids("run") for _ in range(50)}
    assert len(child) == 50 and not child & parent
