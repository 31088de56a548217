"""Started by Python in every process whose PYTHONPATH names this directory: installs
the turn probe (``bench.probes.turns``) in broker processes when
``TOKENSVC_TURN_PROBE_MS`` is set. Lines go to ``$TOKENSVC_TURN_PROBE_DIR`` (default: the
system's temporary directory), one file per broker process, ``turns-<pid>.log``."""

import os
import sys

if os.environ.get("TOKENSVC_TURN_PROBE_MS") and "broker" in " ".join(sys.argv):
    import tempfile

    # The repository's root (this file is bench/probes/site/sitecustomize.py).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))))
    from bench.probes import turns

    directory = os.environ.get("TOKENSVC_TURN_PROBE_DIR") or tempfile.gettempdir()
    turns.install(float(os.environ["TOKENSVC_TURN_PROBE_MS"]) / 1000.0,
                  open(os.path.join(directory, f"turns-{os.getpid()}.log"), "a"))  # noqa: SIM115
