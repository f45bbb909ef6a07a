"""The providers' health (agent/providers/health.py), sans-IO, on a clock the
tests move: cooldowns, the half-open try, a refused key, Retry-After,
latency percentiles, reloads, and the failover order of fallback lists."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from agent.providers.health import (LATENCY_WINDOW, Health, HealthBoard, Policy, State,
                                    fallback_cycle, failover_order, latency_summary)
from agent.stream.records import Usage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def test_a_failure_cools_for_the_cooldown_then_one_ask_tries_again(clock):
    health = Health(Policy(30, 1800), clock)
    assert health.state is State.HEALTHY and health.admit() and health.admit()
    health.failed("HTTP 500: down")
    assert health.state is State.COOLING and not health.admit()
    clock.now += 29.999
    assert not health.admit()
    clock.now += 0.001
    assert health.state is State.RETRYING
    assert health.admit()          # the half-open try
    assert not health.admit()      # the others wait for its outcome
    health.succeeded(0.25)
    assert health.state is State.HEALTHY and health.admit() and health.failures == 0


def test_the_cooldown_doubles_per_failure_in_a_row_up_to_the_maximum(clock):
    health = Health(Policy(30, 1800), clock)
    waits = []
    for _ in range(10):
        health.failed("no answer")
        start = clock.now
        while not health.admit():
            clock.now += 1
        waits.append(clock.now - start)
    assert waits == [30, 60, 120, 240, 480, 960, 1800, 1800, 1800, 1800]
    health.succeeded(None)
    health.failed("again")
    assert health.snapshot(0)["retry_in"] == 30  # a success ends the run of failures


def test_a_failed_try_cools_for_longer_and_a_released_one_goes_to_the_next_ask(clock):
    health = Health(Policy(10, 100), clock)
    health.failed("x")
    clock.now += 10
    assert health.admit()
    health.release()               # the ask was cancelled: no verdict
    assert health.state is State.RETRYING and health.admit()
    health.failed("y")
    assert health.snapshot(0)["retry_in"] == 20


def test_retry_after_sets_the_cooldown_capped_by_the_maximum(clock):
    health = Health(Policy(30, 600), clock)
    health.failed("HTTP 429", retry_after=5)
    assert health.snapshot(0)["retry_in"] == 5
    health.failed("HTTP 429", retry_after=10_000)
    assert health.snapshot(0)["retry_in"] == 600


def test_a_refused_key_disables_until_a_reload(clock):
    board = HealthBoard(clock, wall=lambda: 0)
    config = object()
    health = board.get("p", "m", Policy(), config)
    health.disable("HTTP 401: invalid key")
    clock.now += 10 ** 9
    assert health.state is State.DISABLED and not health.admit()
    assert board.snapshot("p", "m")["disabled"]
    board.reconfigure({("p", "m"): config})
    assert board.get("p", "m", Policy(), config).state is State.HEALTHY


def test_a_reload_keeps_a_cooldown_unless_the_provider_changed(clock):
    board = HealthBoard(clock)
    old, new = ("url-a",), ("url-b",)
    board.get("p", "m", Policy(), old).failed("down")
    board.get("q", "m", Policy(), old).failed("down")
    board.reconfigure({("p", "m"): old, ("q", "m"): new})
    assert board.get("p", "m", Policy(), old).state is State.COOLING
    assert board.get("q", "m", Policy(), new).state is State.HEALTHY
    assert board.get("p", "m", Policy(5, 5), old).state is State.HEALTHY  # new cooldowns


def test_an_ask_on_the_config_before_a_reload_does_not_touch_the_new_one(clock):
    board = HealthBoard(clock)
    old, new = ("url-a",), ("url-b",)
    board.reconfigure({("p", "m"): new})
    board.get("p", "m", Policy(), old).failed("down")  # still running on the old config
    assert board.get("p", "m", Policy(), new).state is State.HEALTHY


def test_the_snapshot_says_until_when_it_cools_with_counts(clock):
    health = Health(Policy(30, 1800), clock)
    health.succeeded(0.1, Usage(input_tokens=10, output_tokens=4, cache_read_tokens=800,
                                cache_write_tokens=50))
    health.succeeded(None, Usage(input_tokens=3, output_tokens=2, cache_read_tokens=850))
    health.succeeded(None)  # an answer without usage adds nothing
    health.failed("HTTP 503: busy")
    health.failovers += 1
    health.skipped += 2
    assert health.snapshot(wall=1764590400.0) == {
        "state": "cooling", "retry_in": 30.0, "until": "2025-12-01T12:00:30+00:00",
        "last_error": "HTTP 503: busy", "failures_in_a_row": 1,
        "counts": {"answered": 3, "failed": 1, "failovers": 1, "skipped": 2},
        "first_delta": {"samples": 1, "p50": 0.1, "p99": 0.1},
        "tokens": {"input_tokens": 13, "output_tokens": 6, "cache_read_tokens": 1650,
                   "cache_write_tokens": 50}}


def test_latency_is_kept_in_a_bounded_window(clock):
    health = Health(Policy(), clock)
    for i in range(LATENCY_WINDOW * 4):
        health.succeeded(float(i))
    summary = health.snapshot(0)["first_delta"]
    assert summary["samples"] == LATENCY_WINDOW
    assert summary["p50"] == LATENCY_WINDOW * 3 + LATENCY_WINDOW // 2 - 1


@given(st.lists(st.integers(0, 10_000).map(float), min_size=1, max_size=300))
def test_percentiles_are_nearest_rank(samples):
    summary = latency_summary(samples)
    for p in (50, 99):
        value = summary[f"p{p}"]
        at_most = sum(1 for s in samples if s <= value)
        below = sum(1 for s in samples if s < value)
        # nearest rank: the smallest sample with at least p% of them at or below it
        assert value in samples and at_most * 100 >= p * len(samples) > below * 100


def test_no_samples_no_percentiles():
    assert latency_summary([]) == {"samples": 0, "p50": None, "p99": None}


def test_failover_order_follows_fallbacks_depth_first_each_once():
    fallbacks = {"a": ("b", "c"), "b": ("d",), "c": ("d", "e"), "d": ()}
    assert failover_order("a", fallbacks) == ["a", "b", "d", "c", "e"]
    assert failover_order("c", fallbacks) == ["c", "d", "e"]
    assert failover_order("z", fallbacks) == ["z"]


def test_cycles_are_found_with_their_path():
    assert fallback_cycle("a", {"a": ("b",), "b": ("c",), "c": ("a",)}) == ["a", "b", "c", "a"]
    assert fallback_cycle("a", {"a": ("b",), "b": ("b",)}) == ["b", "b"]
    assert fallback_cycle("a", {"a": ("b", "c"), "b": ("c",), "c": ()}) is None
