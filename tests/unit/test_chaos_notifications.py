"""The chaos run's notification checks must catch what they claim to (a checker that
cannot fail would make every report a pass): a real receiver on a local port, signed
requests sent to it as a sender would, and the published intents as the topic holds them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from paystream import standard_webhooks
from paystream.chaos.notifications import Published, check_deliveries, expected_pairs
from paystream.chaos.receiver import Receiver, receiver
from paystream.chaos.traffic import Kind, Request
from paystream.launch import free_port

USER = "chaos-t-u1"
SECRET = standard_webhooks.encode_secret(b"k" * 32)
PATH = f"/shaky/{USER}"


def _path(user: str) -> str:
    return f"/shaky/{user}"


def _body(intent_id: str, kind: str, event_id: str, user: str = USER) -> bytes:
    return json.dumps({"type": kind, "id": intent_id, "created_at": "2026-12-02T10:00:00Z",
                       "data": {"event_id": event_id, "user_id": user}}).encode()


def _send(hooks: Receiver, webhook_id: str, body: bytes, key: bytes = b"k" * 32) -> int:
    headers = standard_webhooks.headers(webhook_id, int(time.time()), body, [key])
    return httpx.post(hooks.url(PATH), content=body, headers=headers).status_code


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with receiver(free_port()) as server:
        server.secrets[PATH] = SECRET
        yield server


def _published(*records: tuple[str, str, str]) -> Published:
    """The run's user's intents in one record of the topic, with another user's."""
    out = Published({USER})
    batch = [json.loads(_body(i, kind, e)) for i, kind, e in records]
    batch.append(json.loads(_body("ntf_other", "deposit.credited", "e-other", "someone")))
    out.add(b"paystream.payments-3", json.dumps({"intents": batch}).encode())
    assert "ntf_other" not in out.user_of  # another user's intent is not the run's
    return out


def test_every_intent_delivered_once_passes_and_a_resend_after_2xx_is_only_counted(hooks):
    published = _published(("ntf_a", "deposit.credited", "e1"))
    assert _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1")) == 200
    assert _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1")) == 200
    found = check_deliveries({("e1", "deposit.credited")}, published, hooks, _path)
    assert (found.lost, found.twice, found.violations) == ([], [], [])
    assert (found.published, found.delivered, found.resent_after_2xx) == (1, 1, 1)


def test_a_published_intent_never_answered_2xx_is_lost(hooks):
    published = _published(("ntf_a", "deposit.credited", "e1"),
                           ("ntf_b", "withdrawal.applied", "e2"))
    _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1"))
    found = check_deliveries({("e1", "deposit.credited"), ("e2", "withdrawal.applied")},
                             published, hooks, _path)
    assert [x for x in found.lost if "ntf_b" in x] and found.delivered == 1


def test_an_expected_change_never_published_is_lost_and_an_unexplained_one_a_violation(hooks):
    published = _published(("ntf_c", "balance.adjusted", "e3"))
    _send(hooks, "ntf_c", _body("ntf_c", "balance.adjusted", "e3"))
    found = check_deliveries({("e1", "deposit.credited")}, published, hooks, _path)
    assert any("deposit.credited of e1: never published" in x for x in found.lost)
    assert any("balance.adjusted of e3 published" in x for x in found.violations)


def test_one_change_under_two_webhook_ids_is_caught(hooks):
    published = _published(("ntf_a", "deposit.credited", "e1"))
    _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1"))
    # The same change again under another id: a receiver would act on it twice.
    _send(hooks, "ntf_z", _body("ntf_z", "deposit.credited", "e1"))
    found = check_deliveries({("e1", "deposit.credited")}, published, hooks, _path)
    assert any("delivered under ['ntf_a', 'ntf_z']" in x for x in found.twice)
    assert any("ntf_z was never published" in x for x in found.violations)


def test_a_badly_signed_request_or_another_body_under_the_same_id_is_a_violation(hooks):
    published = _published(("ntf_a", "deposit.credited", "e1"))
    assert _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1"), b"x" * 32) == 401
    _send(hooks, "ntf_a", _body("ntf_a", "deposit.credited", "e1"))
    other = json.loads(_body("ntf_a", "deposit.credited", "e1"))
    other["data"]["amount"] = "2"  # a retry must send the same content
    _send(hooks, "ntf_a", json.dumps(other).encode())
    found = check_deliveries({("e1", "deposit.credited")}, published, hooks, _path)
    assert found.bad_signatures == 1
    assert any("refused" in x for x in found.violations)
    assert any("different bodies" in x for x in found.violations)


def test_the_shaky_path_answers_500_to_its_share_then_the_same_id_goes_through():
    with receiver(free_port(), shaky_share=0.5, seed=3) as hooks:
        hooks.secrets[PATH] = SECRET
        answers = [_send(hooks, f"ntf_{n}", _body(f"ntf_{n}", "deposit.credited", f"e{n}"))
                   for n in range(40)]
    assert 5 < answers.count(500) < 35 and answers.count(200) == 40 - answers.count(500)


def _req(kind: Kind, event_type: str, event_id: str) -> Request:
    return Request(kind, event_id, event_type, USER, "USD", "1", b"{}", "msg_x", status=200)


def test_expected_pairs_follow_the_outcomes_and_the_chain():
    accepted = [_req(Kind.DEPOSIT, "deposit", "d1"), _req(Kind.WITHDRAWAL, "withdrawal", "w1"),
                _req(Kind.REFUND, "refund", "r1"), _req(Kind.CLOSE, "withdrawal_settled", "c1"),
                _req(Kind.POISON, "deposit", "p1")]
    outcomes = {"d1": "applied", "w1": "insufficient_funds", "r1": "shortfall",
                "c1": "hold_not_open"}
    assert expected_pairs(accepted, outcomes, [], lambda tx: None) == {
        ("d1", "deposit.credited"), ("w1", "withdrawal.rejected"),
        ("r1", "balance.reversed"), ("r1", "shortfall.opened"),
        ("c1", "withdrawal.rejected")}
