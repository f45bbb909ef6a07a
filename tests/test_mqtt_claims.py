"""The rule that names the one board that answers (agent/mqtt/claims.py),
on plain values: payloads and times in, verdicts out; no broker, no clock."""

from __future__ import annotations

import itertools
import json

import pytest

from agent.mqtt.claims import (HELD, HOLD, MAX_CLAIM_BYTES, MAX_WINDOW, Arbiter, BadClaim,
                               Claim, Lost, Wait, Won, parse)
from agent.voice.config import MAX_ARBITRATION_WINDOW

WINDOW = 0.15


def payload(board: str, probability: float, wake: str = "okay_nabu", claim_id: str = "",
            **more) -> bytes:
    return json.dumps({"board": board, "wake": wake, "probability": probability,
                       "id": claim_id or f"{board}-1", **more}).encode()


def test_alone_it_wins_once_its_window_is_over():
    arbiter = Arbiter("kitchen")
    own = arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0, claim_id="k1")
    assert parse(own.payload()) == own == Claim("kitchen", "okay_nabu", 0.9, "k1")
    assert arbiter.decide(10.0) == Wait(10.0 + WINDOW)
    assert arbiter.decide(10.0 + WINDOW) == Won()


def test_a_better_claim_within_the_window_wins_and_the_loser_knows_at_once():
    arbiter = Arbiter("kitchen")
    arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    assert arbiter.receive(payload("hall", 0.95), 10.05) is not None
    assert arbiter.decide(10.05) == Lost(Claim("hall", "okay_nabu", 0.95, "hall-1"))


def test_a_worse_claim_changes_nothing():
    arbiter = Arbiter("kitchen")
    arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    arbiter.receive(payload("hall", 0.86), 10.05)
    assert arbiter.decide(10.1) == Wait(10.0 + WINDOW)
    assert arbiter.decide(10.2) == Won()


def test_a_claim_that_came_before_its_own_detection_counts():
    """Another board heard the utterance a little sooner."""
    arbiter = Arbiter("kitchen")
    arbiter.receive(payload("hall", 0.95), 9.9)
    arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    assert isinstance(arbiter.decide(10.0), Lost)


def test_a_claim_a_window_before_or_after_is_another_utterance():
    arbiter = Arbiter("kitchen")
    arbiter.receive(payload("hall", 0.99), 9.8)
    arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    assert arbiter.decide(10.0 + WINDOW) == Won()
    # late: the board answers already and is not disturbed
    arbiter.receive(payload("attic", 0.99), 10.2)
    assert arbiter.decide(10.3) == Won()


def test_a_tie_goes_to_the_smallest_board_name():
    kitchen = Arbiter("kitchen")
    kitchen.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    kitchen.receive(payload("hall", 0.9), 10.01)
    assert kitchen.decide(10.01).winner.board == "hall"
    hall = Arbiter("hall")
    hall.claim("okay_nabu", 0.9, WINDOW, now=20.0)
    hall.receive(payload("kitchen", 0.9), 20.01)
    assert hall.decide(20.0 + WINDOW) == Won()


def test_another_wake_word_is_another_utterance():
    arbiter = Arbiter("kitchen")
    arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    arbiter.receive(payload("hall", 0.99, wake="alexa"), 10.01)
    assert arbiter.decide(10.0 + WINDOW) == Won()


def test_its_own_claim_echoed_by_the_broker_and_its_name_in_others_are_ignored():
    arbiter = Arbiter("kitchen")
    own = arbiter.claim("okay_nabu", 0.9, WINDOW, now=10.0)
    assert arbiter.receive(own.payload(), 10.01) is None
    assert arbiter.receive(payload("kitchen", 1.0, claim_id="forged"), 10.02) is None
    assert arbiter.decide(10.0 + WINDOW) == Won()


def test_a_claim_delivered_twice_is_kept_once():
    arbiter = Arbiter("kitchen")
    assert arbiter.receive(payload("hall", 0.9), 10.0) is not None
    assert arbiter.receive(payload("hall", 0.9), 10.01) is None


def test_every_board_names_the_same_winner_whatever_the_order_claims_arrive_in():
    claims = {"hall": 0.9, "kitchen": 0.93, "attic": 0.93, "porch": 0.88}
    for order in itertools.permutations(claims):
        winners = set()
        for board, probability in claims.items():
            arbiter = Arbiter(board)
            arbiter.claim("okay_nabu", probability, WINDOW, now=5.0, claim_id=f"{board}-1")
            for step, other in enumerate(order):
                arbiter.receive(payload(other, claims[other]), 5.0 + step * 0.01)
            verdict = arbiter.decide(5.0 + WINDOW)
            winners.add(board if verdict == Won() else verdict.winner.board)
        assert winners == {"attic"}, order


def test_a_probability_is_compared_as_the_other_boards_read_it():
    kitchen = Arbiter("kitchen")
    own = kitchen.claim("okay_nabu", 0.1 + 0.2 + 0.6, WINDOW, now=1.0)
    assert parse(own.payload()).probability == own.probability


def test_a_flood_of_claims_is_bounded_and_forgotten_in_time():
    arbiter = Arbiter("kitchen")
    for index in range(HELD * 4):
        arbiter.receive(payload("hall", 0.5, claim_id=f"c{index}"), 1.0)
    assert [claim.id for claim in arbiter.kept] == [f"c{i}" for i in range(HELD * 3, HELD * 4)]
    arbiter.receive(payload("attic", 0.5), 1.0 + HOLD + 0.1)
    assert [claim.board for claim in arbiter.kept] == ["attic"]


@pytest.mark.parametrize("raw,problem", [
    (b"", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"board": "\xc3\x28"}', "not valid UTF-8"),
    (b"{" * 600, "bytes, more than"),
    (b'{"board": "hall"}', "wake"),
    (payload("Hall", 0.9), "board"),
    (payload("../etc", 0.9), "board"),
    (payload("h" * 65, 0.9), "board"),
    (payload("hall", 0.9, wake=""), "wake"),
    (payload("hall", 0.9, wake="w" * 65), "wake"),
    (payload("hall", 0.9, wake="okay\nnabu"), "wake"),
    (payload("hall", 1.5), "probability"),
    (payload("hall", -0.1), "probability"),
    (payload("hall", "0.9"), "probability"),
    (payload("hall", True), "probability"),
    (payload("hall", None), "probability"),
    (b'{"board": "hall", "wake": "w", "probability": 1e999, "id": "x"}', "not JSON"),
    (payload("hall", 0.9, claim_id="x" * 33), "id"),
    (payload("hall", 0.9, claim_id="a b"), "id"),
    (json.dumps({"board": "hall", "wake": "w", "probability": 0.9, "id": 7}).encode(), "id"),
])
def test_what_is_no_claim_is_refused_by_name(raw, problem):
    with pytest.raises(BadClaim) as caught:
        Arbiter("kitchen").receive(raw, 1.0)
    assert problem in str(caught.value)


def test_unknown_fields_are_ignored_for_a_later_version():
    claim = parse(payload("hall", 0.9, snr=12.5, extra={"nested": [1]}))
    assert claim == Claim("hall", "okay_nabu", 0.9, "hall-1")
    assert len(payload("hall", 0.9, note="x" * MAX_CLAIM_BYTES)) > MAX_CLAIM_BYTES
    with pytest.raises(BadClaim):
        parse(payload("hall", 0.9, note="x" * MAX_CLAIM_BYTES))


def test_the_longest_window_is_the_one_voice_config_allows():
    assert MAX_WINDOW == MAX_ARBITRATION_WINDOW


def test_a_verdict_needs_a_claim_and_a_window():
    arbiter = Arbiter("kitchen")
    with pytest.raises(RuntimeError):
        arbiter.decide(1.0)
    with pytest.raises(ValueError):
        arbiter.claim("okay_nabu", 0.9, 0, now=1.0)
