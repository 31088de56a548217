"""Diagnostic probes for the benchmarks: what a measured stall was made of.

``turns`` times each turn of a broker's event loop and logs the long ones with what ran
in them. Enabled for the broker processes of one run through ``site/sitecustomize.py``:

    TOKENSVC_TURN_PROBE_MS=15 PYTHONPATH=$PWD/bench/probes/site \
        python -m bench.b13_stalls --tokens 100000

(an absolute path: the brokers do not start in the repository's directory). Each broker
writes ``turns-<pid>.log`` to ``$TOKENSVC_TURN_PROBE_DIR`` (default: the temporary
directory).

Off unless that variable is set; never imported by the product.
"""
