"""B7: memory of the token cache per 100,000 tokens, without and with derived credentials.

Measured in a fresh spawned process, so nothing else lives in its heap: the
tokens are made the way a broker gets them (each decoded from its znode JSON by
:func:`zk.layout.decode_token`), loaded with ``TokenCache.replace_all``, and the
decoded list dropped, so what remains is what the cache holds (token details,
HMACs, the id/HMAC indexes and the expiry heap). Then every token gets both
SCRAM credentials (SHA-256 and SHA-512), as if each had logged in with both.
Credentials are derived with 1 PBKDF2 iteration instead of 4096: the iteration
count changes the time, not the size of what is kept (salt, stored key, server
key, an int), and 200,000 real derivations would take half an hour.

Two readings per state: Python allocations (tracemalloc, exact, in one process)
and the growth of the process's resident set (VmRSS, in a second process without
tracemalloc, whose own bookkeeping would inflate it). Reported figure: the larger
of the two, scaled to 100,000 tokens. No reference: the target is absolute.

Target: <= 200 MB per 100,000 tokens, with and without derived credentials.

Labels (details only, tracemalloc): the same cache with every token labelled with 4
labels of 32-byte values (8-character keys), once with one label set shared by every
token (a job's tokens: the set is one shared tuple) and once with a set of its own per
token (the worst case: every value differs); and the znode bytes of a token without and
with those labels.
"""

from __future__ import annotations

import gc
import multiprocessing
import tracemalloc
from concurrent.futures import ProcessPoolExecutor

from bench.common import rss_bytes
from bench.suite import BenchContext, Outcome, Target

ID = "B7"
TITLE = "token cache memory per 100k tokens"
TARGET_MB = 200.0
PER = 100_000
MB = 1024 * 1024




def measure(tokens: int, master_key: str, traced: bool) -> dict[str, int]:
    """In this process: bytes held by a cache of ``tokens`` tokens, then with credentials."""
    from bench.env import make_tokens
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys
    from tokensvc.scram.formatter import ScramMechanism
    from zk import layout

    encoded = [layout.encode_token(info) for info in make_tokens(master_key, tokens)]
    gc.collect()
    if traced:
        tracemalloc.start()
    reading = tracemalloc.get_traced_memory()[0] if traced else rss_bytes()

    cache = TokenCache(MasterKeys(master_key), scram_iterations=1)
    cache.replace_all([layout.decode_token(data) for data in encoded])
    gc.collect()
    after_load = tracemalloc.get_traced_memory()[0] if traced else rss_bytes()
    token_ids = [t.info.token_id for t in cache.tokens()]
    for token_id in token_ids:
        for mechanism in ScramMechanism:
            cache.scram_credential(token_id, mechanism)
    del token_ids
    gc.collect()
    after_credentials = tracemalloc.get_traced_memory()[0] if traced else rss_bytes()
    if len(cache) != tokens or cache.derived_count() != 2 * tokens:
        raise RuntimeError("the cache does not hold what was loaded")
    return {"tokens": tokens, "cache": after_load - reading,
            "with_credentials": after_credentials - reading}


LABEL_KEYS = tuple(f"label-{i:02d}" for i in range(4))  # 8 characters each


def labels_for(index: int, shared: bool) -> tuple[tuple[str, str], ...]:
    """4 labels with 32-byte values: the same for every token, or the token's own."""
    return tuple((k, (f"{k}-shared" if shared else f"{k}-{index}").ljust(32, "x"))
                 for k in LABEL_KEYS)


def measure_labels(tokens: int, master_key: str, mode: str) -> dict[str, int]:
    """In this process (tracemalloc): bytes a cache of ``tokens`` tokens holds when each has
    no labels (``none``), the one shared set (``shared``) or a set of its own
    (``unique``), and the znode size of the last token."""
    from dataclasses import replace

    from bench.env import make_tokens
    from tokensvc.core.cache import TokenCache
    from tokensvc.core.keys import MasterKeys
    from zk import layout

    infos = make_tokens(master_key, tokens)
    if mode != "none":
        # Not interned here: the decode below is what makes the shared tuples, counted.
        infos = [replace(info, labels=labels_for(i, mode == "shared"))
                 for i, info in enumerate(infos)]
    encoded = [layout.encode_token(info) for info in infos]
    del infos
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = TokenCache(MasterKeys(master_key), scram_iterations=1)
    cache.replace_all([layout.decode_token(data) for data in encoded])
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    if len(cache) != tokens:
        raise RuntimeError("the cache does not hold what was loaded")
    return {"cache": held, "znode_bytes": len(encoded[-1])}


def run(ctx: BenchContext) -> Outcome:
    tokens = ctx.sizes.b7_tokens
    spawn = multiprocessing.get_context("spawn")
    readings = {}
    for traced in (True, False):
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            readings[traced] = pool.submit(measure, tokens, ctx.master_key, traced).result(600)
    labelled = {}
    for mode in ("none", "shared", "unique"):
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            labelled[mode] = pool.submit(measure_labels, tokens, ctx.master_key, mode).result(600)
    scale = PER / tokens

    def mb(key: str, traced: bool) -> float:
        return round(readings[traced][key] * scale / MB, 1)

    without = max(mb("cache", True), mb("cache", False))
    with_credentials = max(mb("with_credentials", True), mb("with_credentials", False))
    return Outcome(
        ID,
        TITLE,
        measured=with_credentials,
        unit="MB/100k (with creds)",
        reference=without,
        reference_unit="MB/100k",
        reference_label="same cache, no creds",
        ratio=None,
        targets=[
            Target(f"<= {TARGET_MB:.0f} MB without credentials", without <= TARGET_MB),
            Target(f"<= {TARGET_MB:.0f} MB with credentials", with_credentials <= TARGET_MB),
        ],
        details={
            "tokens_measured": tokens,
            "tracemalloc_mb_per_100k": {"cache": mb("cache", True),
                                        "with_credentials": mb("with_credentials", True)},
            "rss_growth_mb_per_100k": {"cache": mb("cache", False),
                                       "with_credentials": mb("with_credentials", False)},
            "bytes_per_token": {"cache": round(without * MB / PER),
                                "with_credentials": round(with_credentials * MB / PER)},
            "pbkdf2_iterations_used": 1,
            "labels_4x32": {
                "cache_bytes_per_token": {mode: round(r["cache"] / tokens)
                                          for mode, r in labelled.items()},
                "znode_bytes": {mode: r["znode_bytes"] for mode, r in labelled.items()},
            },
        },
    )
