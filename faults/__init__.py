"""Fault tools: break a real cluster under load and check it from outside.

Owns the fault drivers behind ``./dev soak`` (:mod:`faults.soak`), ``./dev chaos``
(:mod:`faults.chaos`, rules in :mod:`faults.chaos_check`) and ``./dev chaos --net``
(:mod:`faults.chaos_net` on :mod:`faults.netns`), and the 3-node, 3-broker cluster
they break (:mod:`faults.cluster`). Like ``bench/``, it is not installed with the
service; the numbered benchmarks stay in ``bench/`` and never import from here.
"""
