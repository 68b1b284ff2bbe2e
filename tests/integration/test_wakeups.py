"""Wake-ups of idle worker slots: one slot per notification, and none lost."""

from __future__ import annotations

import threading
import time

from qexport.worker.wakeups import Wakeups

POLL = 5.0  # long enough that a slot returning early was woken, not timed out


def _waiting_slots(wakeups: Wakeups, count: int) -> tuple[list[threading.Thread], list[float]]:
    woken: list[float] = []

    def slot() -> None:
        wakeups.wait(POLL)
        woken.append(time.monotonic())

    threads = [threading.Thread(target=slot) for _ in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # all of them waiting
    return threads, woken


def test_one_notification_wakes_one_idle_slot_not_all() -> None:
    """Three idle slots, one new export: exactly one slot goes to claim it."""
    wakeups = Wakeups(3)
    threads, woken = _waiting_slots(wakeups, 3)
    wakeups.wake_one()
    time.sleep(0.3)
    assert len(woken) == 1
    wakeups.release_all()
    for thread in threads:
        thread.join()
    assert len(woken) == 3


def test_a_wake_up_sent_while_no_slot_waits_is_kept_for_the_next_wait() -> None:
    """A notification arriving while every slot is busy is not lost: the next wait returns
    at once instead of sleeping until the poll."""
    wakeups = Wakeups(1)
    wakeups.wake_one()
    started = time.monotonic()
    wakeups.wait(POLL)
    assert time.monotonic() - started < 1.0


def test_kept_wake_ups_are_bounded_by_the_number_of_slots() -> None:
    """A burst of notifications while busy sends each slot to look once, not once each."""
    wakeups = Wakeups(2)
    for _ in range(10):
        wakeups.wake_one()
    wakeups.wait(POLL)
    wakeups.wait(POLL)
    started = time.monotonic()
    wakeups.wait(0.3)
    assert time.monotonic() - started >= 0.25
