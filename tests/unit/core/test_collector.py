"""tokensvc.core.collector: pauses of the cyclic collector that overlap across threads."""

from __future__ import annotations

import gc
import threading

from tokensvc.core import collector


def test_a_pause_turns_the_collector_off_and_back_on():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_comes_back_when_the_last_of_overlapping_pauses_ends():
    entered, release_a, a_done = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with collector.paused():
            entered.set()
            release_a.wait(10)
        a_done.set()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert entered.wait(10)
        with collector.paused():  # begins inside the first, ends after it
            release_a.set()
            assert a_done.wait(10)
            assert not gc.isenabled()  # the first ended, this one still runs
        assert gc.isenabled()
    finally:
        release_a.set()
        thread.join(10)
        gc.enable()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_exception_inside_still_ends_the_pause():
    try:
        with collector.paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
