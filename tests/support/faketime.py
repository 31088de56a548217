"""A broker process with a wrong wall clock, under Debian's libfaketime.

Owns the environment that starts one process ``offset`` off the host's clock (``+10m``,
``-10m``): ``LD_PRELOAD=libfaketimeMT``, ``DONT_FAKE_MONOTONIC=1`` (its monotonic clocks,
asyncio's and the clock samples' timeline, stay true) and
``FAKETIME_FORCE_MONOTONIC_FIX=0``: libfaketime's rewrite of condition-variable timeouts
otherwise slows every GIL hand-over (asyncio.to_thread: 27 ms instead of 0.4 ms, a broker
start of 20 s instead of 2 s). The offset is fixed for the life of the process: changing
it while the process runs (libfaketime's timestamp file) makes Python's sleeps fail with
EINVAL, so a test restarts the process to change it.
"""

from __future__ import annotations

import glob


def faketime_env(offset: str) -> dict[str, str]:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    assert found, "libfaketime is not installed: ./dev installs it (apt-get install faketime)"
    return {"LD_PRELOAD": found[0], "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0"}
