"""A replica set's turn: the pure check-and-set, and the lease in a real journal raced by
processes (never two holders)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from sparkwarden.restart.journal import Journal
from sparkwarden.restart.turn import Lease, settle

T0 = 1_796_000_000.0


def test_two_takers_at_the_same_instant_one_wins() -> None:
    lease, first = settle(None, "take", "spark1", 600, T0)
    lease, second = settle(lease, "take", "spark2", 600, T0)
    assert first.granted and first.holder == "spark1"
    assert not second.granted and second.holder == "spark1" and "spark1" in second.why
    assert lease == Lease("spark1", T0, T0 + 600)


def test_an_expired_turn_is_free_for_the_next_taker() -> None:
    lease, _ = settle(None, "take", "spark1", 600, T0)
    _, before = settle(lease, "take", "spark2", 600, T0 + 599.9)
    after_lease, after = settle(lease, "take", "spark2", 600, T0 + 600)
    assert not before.granted
    assert after.granted and after_lease == Lease("spark2", T0 + 600, T0 + 1200)


def test_renew_pushes_the_expiry_only_for_its_live_holder() -> None:
    lease, _ = settle(None, "take", "spark1", 600, T0)
    lease, renewed = settle(lease, "renew", "spark1", 600, T0 + 500)
    assert renewed.granted and lease == Lease("spark1", T0, T0 + 1100)
    _, other = settle(lease, "renew", "spark2", 600, T0 + 510)
    assert not other.granted
    _, late = settle(lease, "renew", "spark1", 600, T0 + 1100)  # expired: a peer may have gone
    assert not late.granted and late.holder is None


def test_release_by_a_non_holder_is_refused() -> None:
    lease, _ = settle(None, "take", "spark1", 600, T0)
    kept, refused = settle(lease, "release", "spark2", 600, T0 + 1)
    assert not refused.granted and kept == lease
    freed, released = settle(lease, "release", "spark1", 600, T0 + 2)
    assert released.granted and freed is None


def test_taking_a_turn_already_held_renews_it_and_read_changes_nothing() -> None:
    lease, _ = settle(None, "take", "spark1", 600, T0)
    again, answer = settle(lease, "take", "spark1", 600, T0 + 100)
    assert answer.granted and again == Lease("spark1", T0, T0 + 700)
    same, read = settle(again, "read", "spark2", 600, T0 + 200)
    assert same == again and read.holder == "spark1" and read.expires_in == 500


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_the_lease_in_the_journal_expires_by_the_journals_clock(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path, clock=clock)
    assert journal.turn("take", "spark1", 60).granted
    assert not journal.turn("take", "spark2", 60).granted
    clock.now += 60
    assert journal.turn("take", "spark2", 60).holder == "spark2"
    assert not journal.turn("release", "spark1", 60).granted
    assert journal.turn("release", "spark2", 60).granted
    assert journal.turn("read", "", 0).holder is None
    journal.close()


def _racer(state_dir: str, name: str, rounds: int, barrier: Any, inside: Any, most: Any) -> None:
    """Each round: all start at one instant (the barrier), each asks for the turn; a winner
    counts itself in, stays a moment, counts itself out, releases."""
    journal = Journal(Path(state_dir))
    for _ in range(rounds):
        barrier.wait(timeout=30)
        if journal.turn("take", name, 60).granted:
            with inside.get_lock():
                inside.value += 1
                most.value = max(most.value, inside.value)
            time.sleep(0.001)
            with inside.get_lock():
                inside.value -= 1
            if not journal.turn("release", name, 60).granted:  # another took it meanwhile
                with inside.get_lock():
                    most.value = max(most.value, 2)
    journal.close()


@pytest.mark.timeout(180)
def test_processes_racing_for_the_turn_never_hold_it_together(tmp_path: Path) -> None:
    racers, rounds = 4, 150
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(racers)
    inside, most = ctx.Value("i", 0), ctx.Value("i", 0)
    Journal(tmp_path).close()  # created once, so the racers only open it
    procs = [
        ctx.Process(target=_racer, args=(str(tmp_path), f"spark{i}", rounds, barrier, inside, most))
        for i in range(racers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(170)
    assert [p.exitcode for p in procs] == [0] * racers
    assert most.value == 1
    journal = Journal(tmp_path)
    assert journal.turn("read", "", 0).holder is None  # every winner released it
    journal.close()
