"""The broker's event loop runner: uvloop when installed, and the GIL switch interval
the broker runs with (restored afterwards)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from tokensvc.broker.loop import eventloop


def test_run_hands_the_gil_over_faster_while_the_broker_runs_and_restores_it():
    before = sys.getswitchinterval()

    async def main() -> float:
        await asyncio.sleep(0)
        return sys.getswitchinterval()

    inside = eventloop.run(main())
    assert inside == eventloop.GIL_SWITCH_INTERVAL_S
    assert inside < before
    assert sys.getswitchinterval() == before


def test_run_restores_the_switch_interval_when_the_broker_fails():
    before = sys.getswitchinterval()

    async def main() -> None:
        raise RuntimeError("broker failed")

    with pytest.raises(RuntimeError, match="broker failed"):
        eventloop.run(main())
    assert sys.getswitchinterval() == before


def test_the_loop_is_uvloop_when_installed():
    factory, name = eventloop.loop_factory()
    loop = factory()
    try:
        assert ("uvloop" in type(loop).__module__) == name.startswith("uvloop")
    finally:
        loop.close()
