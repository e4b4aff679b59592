"""A shortened chaos campaign (``bench/chaos.py``) on each backend, in the default suite:
real worker processes, SIGKILLs and (PostgreSQL, Redis) a server restart, then the
campaign's own checks. ``make chaos`` runs the long one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bench import chaos_admission, chaos_app, chaos_ops, chaos_queues
from docket import SyncDocket
from docket.backends import from_url
from docket.contract.capabilities import Feature

ROOT = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(
    r"chaos: backend=(?P<backend>\w+) runs=(?P<runs>\d+) completed=(?P<completed>\d+) "
    r"lost=(?P<lost>\d+) duplicate_commits=(?P<duplicate_commits>\d+) gaps=(?P<gaps>\d+) "
    r"wrong_outputs=(?P<wrong_outputs>\d+) children=(?P<children>\d+) orphans=(?P<orphans>\d+) "
    r"missing_children=(?P<missing_children>\d+) child_outputs_wrong=(?P<child_outputs_wrong>\d+) "
    r"kills=(?P<kills>\d+) db_restarts=(?P<db_restarts>\d+) deadlines=(?P<deadlines>\d+) "
    r"ticks=(?P<ticks>\d+) ticks_missed=(?P<ticks_missed>\d+) "
    r"ticks_doubled=(?P<ticks_doubled>\d+) messages=(?P<messages>\d+) "
    r"messages_lost=(?P<messages_lost>\d+) messages_doubled=(?P<messages_doubled>\d+) "
    r"edits=(?P<edits>\d+) edits_lost=(?P<edits_lost>\d+) forks=(?P<forks>\d+) "
    r"forks_wrong=(?P<forks_wrong>\d+) streamed=(?P<streamed>\d+) "
    r"stream_gaps=(?P<stream_gaps>\d+) stream_duplicates=(?P<stream_duplicates>\d+) "
    r"queued=(?P<queued>\d+) queue_overlaps=(?P<queue_overlaps>\d+) "
    r"admitted=(?P<admitted>\d+) admission_overlaps=(?P<admission_overlaps>\d+) "
    r"admission_unfinished=(?P<admission_unfinished>\d+)"
)


def children_of(runs: int) -> int:
    """Every run starts one child for ``k`` and one per map item of ``mk`` (``n % 4`` of
    them), item 1 twice (its first child fails on purpose)."""
    return sum(1 + n % 4 + (n % 4 > 1) for n in range(runs))


def deadline_children_of(runs: int) -> int:
    """The children of the runs whose deadline fires: on a loaded machine the deadline may
    stop such a run before its children start (the campaign accepts that)."""
    return sum(1 + n % 4 + (n % 4 > 1) for n in range(runs) if chaos_app.deadline_fires(n))


def deadlines_of(runs: int) -> int:
    """One run in 50 (``n % 50 == 21``) sleeps past a deadline that must fail it."""
    return sum(chaos_app.deadline_fires(n) for n in range(runs))


def messages_of(runs: int) -> int:
    """Every run whose node ``t`` waits for a message is sent one (its re-sends are the
    same message)."""
    return sum(chaos_app.waits_for_message(n) for n in range(runs))


def edits_of(runs: int) -> int:
    """The ``late`` message runs with ``n % 12`` in 3 or 5 get their approval edited."""
    return sum(chaos_ops.edited(n) for n in range(runs))


def forks_of(runs: int) -> int:
    """The runs ending done on their own with ``n % 5 == 2`` are forked."""
    return sum(chaos_ops.forked(n) for n in range(runs))


def _campaign(*options: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), *options],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_short_chaos_campaigns_on_every_backend_lose_nothing() -> None:
    """The three campaigns run side by side: most of their time is waiting (claim expiry,
    polls, a retry timer, worker start-up), not CPU. 40 runs: with their 120 child runs
    they cost about what 60 runs without children did."""
    runs, kills = 40, 4
    restarts = {"sqlite": 0, "postgres": 1, "redis": 1}
    campaigns = {
        backend: _campaign(
            "--backend",
            backend,
            "--workers",
            "2",
            "--runs",
            str(runs),
            "--min-kills",
            str(kills),
            "--kill-interval",
            "0.8",
            "--restart-db",
            str(count),
            "--timeout",
            "150",
        )
        for backend, count in restarts.items()
    }
    for backend, proc in campaigns.items():
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{backend}:\n{output[-6000:]}"
        last = output.strip().splitlines()[-1]
        match = LAST_LINE.fullmatch(last)
        assert match is not None, f"{backend}:\n{output[-3000:]}"
        assert match.groupdict() == {
            "backend": backend,
            "runs": str(runs),
            "completed": str(runs),
            "lost": "0",
            "duplicate_commits": "0",
            "gaps": "0",
            "wrong_outputs": "0",
            "children": match["children"],
            "orphans": "0",
            "missing_children": "0",
            "child_outputs_wrong": "0",
            "kills": match["kills"],
            "db_restarts": str(restarts[backend]),
            "deadlines": str(deadlines_of(runs)),
            "ticks": match["ticks"],
            "ticks_missed": "0",
            "ticks_doubled": "0",
            "messages": str(messages_of(runs)),
            "messages_lost": "0",
            "messages_doubled": "0",
            "edits": str(edits_of(runs)),
            "edits_lost": "0",
            "forks": str(forks_of(runs)),
            "forks_wrong": "0",
            "streamed": str(runs),
            "stream_gaps": "0",
            "stream_duplicates": "0",
            "queued": str(chaos_queues.queued_runs(runs)),
            "queue_overlaps": "0",
            "admitted": match["admitted"],
            "admission_overlaps": "0",
            "admission_unfinished": "0",
        }, f"{backend}:\n{output[-3000:]}"
        # a backend declaring admission runs the admitted load (bench/chaos_admission.py)
        assert match["admitted"] in ("0", str(chaos_admission.admitted_runs(runs)))
        children = int(match["children"])
        assert children_of(runs) - deadline_children_of(runs) <= children <= children_of(runs)
        assert int(match["kills"]) >= kills
        assert int(match["ticks"]) >= 1
        print("\n" + last)


def test_the_campaign_reports_a_wrong_output_and_an_unexplained_re_execution() -> None:
    """The negative control: workers that get one output wrong and log one execution twice
    with no kill to explain it; the campaign must fail and say why."""
    env = dict(os.environ, DOCKET_CHAOS_SABOTAGE="wrong_output,double_exec")
    proc = _campaign(
        "--backend",
        "sqlite",
        "--workers",
        "2",
        "--runs",
        "10",
        "--min-kills",
        "0",
        "--kill-interval",
        "600",
        "--timeout",
        "120",
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert (match["completed"], match["wrong_outputs"], match["kills"]) == ("10", "1", "0")
    assert "VIOLATION chaos-00003: output" in stdout
    assert "chaos-00005:0:a attempt 1: executed by" in stdout
    assert "with no kill or restart to explain it" in stdout


def test_the_campaign_reports_a_map_item_whose_result_landed_twice() -> None:
    """The negative control of the map check: one item's result lands twice."""
    env = dict(os.environ, DOCKET_CHAOS_SABOTAGE="map_twice")
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "8", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert (match["completed"], match["wrong_outputs"]) == ("8", "1")
    assert "VIOLATION chaos-00006: output" in stdout


def test_the_campaign_reports_an_orphaned_child_and_a_child_output_applied_twice() -> None:
    """The negative control of the child checks: a run naming a parent that never asked
    for it (an orphan), and a child of the child map whose result lands twice."""
    env = dict(os.environ, DOCKET_CHAOS_SABOTAGE="orphan_child,child_twice")
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "8", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    # 8 runs start children_of(8) = 24 children, plus the orphan; the doubled result makes
    # the child's output and its parent's wrong
    assert (
        match["completed"],
        match["children"],
        match["orphans"],
        match["missing_children"],
        match["child_outputs_wrong"],
        match["wrong_outputs"],
    ) == ("8", str(children_of(8) + 1), "1", "0", "1", "2"), stdout[-3000:]
    assert "VIOLATION chaos-00002:2:k:1@99: an orphan" in stdout
    assert "VIOLATION chaos-00006: fields written by children" in stdout


def test_the_campaign_reports_lost_and_doubled_messages_and_ticks() -> None:
    """The negative control of the time checks: the harness sends one message nothing
    takes and re-sends one without its key; it takes a tick's run id with a run of its
    own (no schedule metadata) and starts a second run for the first tick."""
    env = dict(
        os.environ, DOCKET_CHAOS_SABOTAGE="message_lost,message_twice,tick_missed,tick_doubled"
    )
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "8", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert (
        match["completed"],
        match["wrong_outputs"],
        match["messages"],
        match["messages_lost"],
        match["messages_doubled"],
        match["ticks_missed"],
        match["ticks_doubled"],
    ) == ("8", "0", str(messages_of(8) + 1), "1", "1", "1", "1"), stdout[-3000:]
    assert "VIOLATION chaos-00000:extra: sent and accepted, never consumed" in stdout
    assert "VIOLATION chaos-00002:msg: consumed 1 times, received 1 times, accepted 2" in stdout
    assert "VIOLATION tick " in stdout and ": no run" in stdout


def test_the_campaign_reports_lost_edits_wrong_forks_and_stream_gaps_and_duplicates() -> None:
    """The negative control of the operator and stream checks: an edit that writes the
    value the run had, a fork patched one too high, a follower that drops one event of a
    run and records another twice."""
    env = dict(
        os.environ,
        DOCKET_CHAOS_SABOTAGE="edit_lost,fork_wrong,stream_gap,stream_duplicate",
    )
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "8", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert (
        match["completed"],
        match["wrong_outputs"],
        match["edits"],
        match["edits_lost"],
        match["forks"],
        match["forks_wrong"],
        match["streamed"],
        match["stream_gaps"],
        match["stream_duplicates"],
    ) == ("8", "0", str(edits_of(8)), "1", str(forks_of(8)), "1", "6", "1", "1"), stdout[-3000:]
    assert "VIOLATION chaos-00003: edit of approval not reflected" in stdout
    assert "VIOLATION fork-chaos-00002: ended done with" in stdout
    assert "VIOLATION chaos-00001: stream missed [3]" in stdout
    assert "VIOLATION chaos-00004: streamed seqs [1, 2, 2, 3" in stdout


def test_the_campaign_reports_a_queue_running_more_than_its_limit() -> None:
    """The negative control of the queue check: the queue is configured without its
    limit, so the queued runs' executions overlap beyond it and the count must say so."""
    env = dict(os.environ, DOCKET_CHAOS_SABOTAGE="queue_unlimited")
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "30", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert match["completed"] == "30" and match["queued"] == "6", stdout[-3000:]
    assert int(match["queue_overlaps"]) > 0, stdout[-3000:]
    assert f"VIOLATION queue {chaos_queues.QUEUE} limited to {chaos_queues.LIMIT} ran" in stdout


#: Whether the campaign's SQLite store declares admission (the admitted load runs there).
SQLITE_ADMITS = Feature.ADMISSION in from_url("sqlite:///never-opened.db").capabilities().features


def _sabotaged_admission(sabotage: str) -> tuple[str, re.Match[str]]:
    env = dict(os.environ, DOCKET_CHAOS_SABOTAGE=sabotage)
    proc = _campaign(
        *("--backend", "sqlite", "--workers", "2", "--runs", "30", "--min-kills", "0"),
        *("--kill-interval", "600", "--timeout", "120"),
        env=env,
    )
    stdout, _ = proc.communicate(timeout=200)
    assert proc.returncode == 1, stdout[-6000:]
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match is not None, stdout[-3000:]
    assert match["completed"] == "30" and match["admitted"] == "6", stdout[-3000:]
    return stdout, match


def test_the_campaign_reports_a_queue_with_more_runs_unfinished_than_it_admits(
    tmp_path: Path,
) -> None:
    """The negative control of "admitted never over the cap": the queue is configured
    without its admission limit, so the admitted runs' lives overlap beyond the cap and
    the count must say so; every start still ends as a finished run."""
    if not SQLITE_ADMITS:  # a store without admission: the load is off, nothing to count
        _assert_admission_load_off(tmp_path)
        return
    stdout, match = _sabotaged_admission("admission_unlimited")
    assert int(match["admission_overlaps"]) > 0, stdout[-3000:]
    assert match["admission_unfinished"] == "0", stdout[-3000:]
    assert f"VIOLATION queue {chaos_admission.QUEUE} admitting {chaos_admission.CAP} had" in (
        stdout
    )


def test_the_campaign_reports_a_held_start_that_never_became_a_finished_run(
    tmp_path: Path,
) -> None:
    """The negative control of "every admitted/held start ends as a finished run": the
    harness drops one held start from the ledger; the check must find it missing."""
    if not SQLITE_ADMITS:
        _assert_admission_load_off(tmp_path)
        return
    stdout, match = _sabotaged_admission("admission_lost")
    assert match["admission_overlaps"] == "0", stdout[-3000:]
    assert match["admission_unfinished"] == "1", stdout[-3000:]
    assert re.search(r"VIOLATION chaos-a-\d+: never became a run", stdout), stdout[-3000:]


def _assert_admission_load_off(tmp_path: Path) -> None:
    with SyncDocket(f"sqlite:///{tmp_path / 'off.db'}", nodes=chaos_app.NODES) as docket:
        load = chaos_admission.AdmissionLoad(docket, 30, {"admission_unlimited"})
        assert (load.enabled, load.total, load.finished()) == (False, 0, True)
        assert [s.config.name for s in docket.queues()] == ["default"]
