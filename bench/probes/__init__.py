"""Diagnostic probes for the benchmarks: what a measured stall was made of.

``turns`` times each turn of a broker's event loop and logs the long ones with what ran
in them. Enabled for the broker processes of one run through ``site/sitecustomize.py``:

    TOKENSVC_TURN_PROBE_MS=15 PYTHONPATH=bench/probes/site python -m bench.b13_stalls --tokens 100000

Off unless that variable is set; never imported by the product.
"""
