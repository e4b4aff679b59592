"""Authority: CONTENT-NOT-AUTHORITY.

A fenced commit is answered with the stored run only when it is a replay of the same
``transition_id``. A commit whose run document and events are byte-identical to what is
stored, sent under a *new* transition id by a writer the fences refuse — a consumed
checkpoint, a stolen claim's token, a holder revoked by a signal — is ``StaleCheckpoint``
and changes nothing: equal content proves nothing about who may write.
"""

from __future__ import annotations

from datetime import timedelta

from docket.contract import Immediate, StaleCheckpoint
from docket.records import TENANTLESS, Run
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    events_for,
    seed_claimed,
    successor,
    tid,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant


@invariant("CONTENT-NOT-AUTHORITY")
async def test_identical_content_under_a_new_transition_id_is_stale(docket_kit: Kit) -> None:
    k = docket_kit
    owner = TENANTLESS
    run, lease = await seed_claimed(k, owner, ttl=timedelta(0))
    first = successor(run, k.at(1), new_events=2)
    sent = events_for(first, k.at(1), [1, 2])
    done = claimed(first, lease.claim_token)
    await commit_claimed_ok(k, owner, done, sent)
    # only a replay of the same transition id is answered with the stored run
    replay = await k.b.transitions.commit_claimed(owner, done, sent)
    k.eq(replay, first, "a replay of the committed transition answers the stored run")
    before = await k.snapshot(owner, run.id)

    async def refused(what: str, got: object) -> None:
        k.check(
            not isinstance(got, Run),
            f"{what}: byte-identical content under a new transition id was answered with "
            f"the stored run; only a replay of the same transition id may be",
        )
        k.isa(got, StaleCheckpoint, what)
        await k.unchanged(owner, run.id, before, what)

    commit = k.b.transitions.commit_claimed
    # the holder itself, at the checkpoint its commit consumed
    await refused(
        "the holder re-sends its committed content at a consumed checkpoint",
        await commit(owner, claimed(first, lease.claim_token, transition_id=tid()), sent),
    )
    # the claim is stolen: the old holder's token is stale, the content still identical
    steal = await k.claim_one(k.at(2), run.id, ttl=timedelta(0))
    before = await k.snapshot(owner, run.id)
    await refused(
        "a stolen claim's holder re-sends identical content",
        await commit(owner, claimed(first, lease.claim_token, transition_id=tid()), sent),
    )
    await refused(
        "the new holder sends identical content at a consumed checkpoint",
        await commit(owner, claimed(first, steal.claim_token, transition_id=tid()), sent),
    )
    # a signal revokes the new holder; its content is then sent again under new ids
    signal = successor(first, k.at(3))
    await commit_unclaimed_ok(k, owner, unclaimed(signal, wake=Immediate()), sent)
    before = await k.snapshot(owner, run.id)
    await refused(
        "a holder revoked by a signal sends the signal's content",
        await commit(owner, claimed(signal, steal.claim_token, transition_id=tid()), sent),
    )
    again = unclaimed(signal, wake=Immediate(), transition_id=tid())
    await refused(
        "the signal's content again under a new transition id",
        await k.b.transitions.commit_unclaimed(owner, first.checkpoint_seq, again, sent),
    )
