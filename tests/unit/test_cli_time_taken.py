"""How `--wait` says how long an export took: the time it ran apart from its time queued."""

from __future__ import annotations

from qexport.cli.exports import _time_taken

CREATED = "2026-12-07T08:00:00Z"


def test_the_run_and_the_wait_in_the_queue_are_told_apart() -> None:
    view = {
        "created_at": CREATED,
        "started_at": "2026-12-07T08:01:03Z",
        "completed_at": "2026-12-07T08:01:18Z",
    }
    assert _time_taken(view) == " in 15.0 s, after 1 min 03 s in the queue"


def test_a_wait_under_a_second_is_not_mentioned() -> None:
    view = {
        "created_at": CREATED,
        "started_at": "2026-12-07T08:00:00.400Z",
        "completed_at": "2026-12-07T08:00:02.400Z",
    }
    assert _time_taken(view) == " in 2.0 s"


def test_an_export_that_never_started_gives_its_whole_time() -> None:
    view = {"created_at": CREATED, "started_at": None, "completed_at": "2026-12-07T08:00:09Z"}
    assert _time_taken(view) == " in 9.0 s"
    assert _time_taken({"created_at": CREATED}) == ""
