"""Every example runs, and says what it promises."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(HERE / name)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_pauses_resolves_and_prints_the_output_and_timeline() -> None:
    out = run_example("quickstart.py")
    assert "paused: run expense-1 is waiting" in out
    assert "finished: run expense-1 is done" in out
    assert "'receipt': 'paid 420.0 for ada'" in out
    timeline = out.split("timeline (read back from the database):")[1].splitlines()[1:]
    seqs = [int(line.split()[0]) for line in timeline]
    assert seqs == list(range(1, len(seqs) + 1))
    assert "interrupt_resolved" in out and "checkpoint 6: run_completed" in out


def test_multiprocess_worker_spreads_runs_over_three_processes() -> None:
    out = run_example("multiprocess_worker.py")
    assert "30 of 30 runs done" in out
    assert "workers stopped with SIGTERM: exit code 0" in out
    text = out.split("steps executed per worker process: ")[1].splitlines()[0]
    per_process = ast.literal_eval(text)
    assert isinstance(per_process, dict) and sum(per_process.values()) == 90  # 30 runs x 3


def test_agent_loop_retries_times_out_and_sends_one_email() -> None:
    out = run_example("agent_loop.py")
    assert "run agent-1 is done" in out
    assert "outbox: 1 e-mail(s)" in out
    assert "exception: RateLimited" in out
    assert "timeout: the attempt exceeded its 300 ms" in out
    assert "already sent, not sending again" in out


def test_map_reduce_researches_each_question_and_drafts_in_question_order() -> None:
    out = run_example("map_reduce.py")
    assert "run otters-1 is done" in out
    assert (
        "report: Report on otters: A1 (What is otters?) a short answer; "
        "A2 (Who uses otters?) a short answer; A3 (Why does otters matter?) a short answer"
    ) in out
    tasks = [f"'otters-1:1:research[{i}]'" for i in range(3)]
    assert f"research tasks: [{', '.join(tasks)}]" in out
    # an empty list researches nothing and the draft still follows
    assert "run empty-1 is done" in out and "report: nothing: no research" in out


def test_child_runs_summarise_each_article_in_a_child_and_retry_a_failed_child() -> None:
    out = run_example("child_runs.py")
    assert "run news-1 is done" in out
    assert "newsletter: OTTERS | TIDES | BREAD" in out
    pinned, saved = out.split("summarise pinned at ", 1)[1].split("\n", 1)[0].split(" (saved ")
    assert pinned == saved.rstrip(")")
    # one child per article, a second child for the article whose first child failed
    for index in range(3):
        assert f"child news-1:0:summaries[{index}]:1@1 is " in out
    assert "child news-1:0:summaries[1]:1@1 is failed (parent news-1)" in out
    assert "child news-1:0:summaries[1]:2@" in out and out.count(" is done (parent news-1)") == 3


def test_reminders_sleep_take_a_kept_message_time_out_and_pass_a_deadline() -> None:
    out = run_example("reminders.py")
    assert "ack sent to ada while she sleeps: kept; sent again with the same key: duplicate" in out
    assert "run ada is done: slept; reminded ada; closed (acknowledged: on it)" in out, out
    assert (
        "run grace is done: slept; reminded grace; no answer: escalated to the manager; "
        "closed (escalated)"
    ) in out
    assert "run linus is failed: deadline_exceeded" in out
    assert "ada's acknowledgement was taken 1 time(s)" in out


def test_nightly_report_starts_one_run_a_night_through_dst_and_makes_up_no_pause() -> None:
    out = run_example("nightly_report.py")
    assert "night 2026-03-07 02:00 EST: run nightly@20260307T070000Z is done" in out
    # 02:00 does not exist on 2026-03-08 in New York: the tick fires once, at 03:00 EDT
    assert "night 2026-03-08 03:00 EDT: run nightly@20260308T070000Z is done" in out
    assert "night 2026-03-09 02:00 EDT: run nightly@20260309T060000Z is done" in out
    assert "triggered by hand: run nightly@manual-run_... is done" in out
    assert "resumed after 5 paused days; next tick 2026-03-15 06:00Z" in out
    assert "4 runs in all" in out


def test_llm_tokens_streams_the_answer_and_the_committed_events() -> None:
    out = run_example("llm_tokens.py")
    assert "run llm-1 is done" in out
    answer = out.split("answer (committed): ")[1].splitlines()[0]
    assert answer.startswith("Otters hold hands") and answer.endswith("called a raft.")
    seqs = [int(line[1:].split("]")[0]) for line in out.splitlines() if line.startswith("[")]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 10  # each event once
    assert "[1] run_initialized" in out and "checkpoint_committed run_completed" in out
    if "(live feed)" in out:  # the backend pushes: every token came, in order, inline
        tokens = out.split("answer > ", 1)[1].splitlines()[0]
        assert tokens.strip() == answer
        assert f"answer ~ usage: {{'words': {len(answer.split())}}}" in out
