"""The shared keeper of run documents read by claims (docket.contract.claimed)."""

from __future__ import annotations

from docket.contract.claimed import ClaimedRunDocuments


def test_a_document_is_handed_out_once_to_its_own_lease() -> None:
    kept = ClaimedRunDocuments()
    kept.keep("t1", "tenant:a", "r1", b"doc")
    assert kept.take("t1", "tenant:a", "other-run") is None  # wrong run: dropped, not given
    assert kept.take("t1", "tenant:a", "r1") is None  # ... and gone
    kept.keep("t2", "tenant:a", "r2", b"doc2")
    assert kept.take("t2", "tenant:b", "r2") is None  # another scope never sees it
    kept.keep("t3", "tenant:a", "r3", b"doc3")
    assert kept.take("t3", "tenant:a", "r3") == b"doc3"
    assert kept.take("t3", "tenant:a", "r3") is None
    assert kept.take(None, "tenant:a", "r3") is None
    assert len(kept) == 0 and kept.size == 0


def test_the_oldest_documents_go_first_past_the_count_or_byte_bound() -> None:
    kept = ClaimedRunDocuments(max_count=2, max_bytes=10)
    kept.keep("a", "s", "ra", b"1234")
    kept.keep("b", "s", "rb", b"1234")
    kept.keep("c", "s", "rc", b"1234")  # three > two: "a" goes
    assert kept.take("a", "s", "ra") is None
    assert len(kept) == 2 and kept.size == 8
    kept.keep("d", "s", "rd", b"12345678")  # 4 + 8 > 10 bytes: "b" then "c" go
    assert kept.take("b", "s", "rb") is None and kept.take("c", "s", "rc") is None
    assert kept.take("d", "s", "rd") == b"12345678"
    kept.keep("e", "s", "re", b"12")
    kept.keep("e", "s", "re", b"123")  # a token kept again replaces its document
    assert len(kept) == 1 and kept.size == 3
