"""DescribeDelegationToken for a million tokens: select by index, encode in slices.

Owns: which tokens a describe shows and the bytes of its ``Tokens`` array. Tokens are
selected through the cache's principal index when the request names owners (so one
owner costs that owner's tokens, not the cache), through its label-set index when it
names labels (tokensvc's ``LabelSelector`` tag; both when it names both), and from a
snapshot of the token ids otherwise; Kafka's rule then keeps a token when the requester is its owner, requester
or renewer, or ``may_describe`` allows it (see ``TokenManager.describe``, the same
rule over a list). The array is encoded here, in slices: after each slice that has
held the event loop for :data:`SLICE_BUDGET_S`, :func:`describe_tokens` yields to the
loop, so logins and other requests keep being answered while a large describe is
built; the slices stay separate bytes objects up to the socket (the broker writes a
response's parts without joining them). A token's labels are encoded (its ``Labels``
tag, in the element's tagged-field section) only when the request asked for them
(``IncludeLabels``) and the token has some: a client that asks nothing gets Kafka's
bytes. Encoding is direct (``struct`` and byte joins, each principal encoded once per
describe); ``tests/unit/broker/test_broker_describe.py`` checks it against the schema codec.

Must not: change the cache, authorize on its own (the handler passes
``may_describe``), audit, or touch sockets.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokensvc.broker.loop.slices import SLICE_BUDGET_S
from tokensvc.core.cache import TokenCache
from tokensvc.core.labels import NO_LABELS, Labels
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import DelegationToken, TokenInformation
from tokensvc.protocol import flexible
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.primitives import encode_uvarint
from tokensvc.protocol.schema import EncodedElements

# How many tokens go between clock reads; a slice may hold the event loop as long as any
# other walk on it (SLICE_BUDGET_S, tokensvc.broker.loop.slices).
SLICE_TOKENS = 128

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_TIMES = struct.Struct(">qqq")


@dataclass(frozen=True)
class Described:
    """The tokens a describe shows: how many, and the encoded ``Tokens`` elements."""

    count: int
    tokens: EncodedElements


class _Encoder:
    """Encodes DescribedDelegationToken elements of one API version."""

    def __init__(self, version: int, include_labels: bool = False) -> None:
        self.version = version
        self.flexible = flexible(ApiKey.DESCRIBE_DELEGATION_TOKEN, version)
        self.include_labels = include_labels and self.flexible
        self._principals: dict[KafkaPrincipal, bytes] = {}
        self._renewer_lists: dict[tuple[KafkaPrincipal, ...], bytes] = {}
        self._label_sections: dict[Labels, bytes] = {}

    def _string(self, text: str) -> bytes:
        data = text.encode("utf-8")
        if self.flexible:
            return encode_uvarint(len(data) + 1) + data
        return _INT16.pack(len(data)) + data

    def _length(self, length: int) -> bytes:
        return encode_uvarint(length + 1) if self.flexible else _INT32.pack(length)

    def _principal(self, principal: KafkaPrincipal) -> bytes:
        found = self._principals.get(principal)
        if found is None:
            found = self._string(principal.principal_type) + self._string(principal.name)
            self._principals[principal] = found
        return found

    def _renewers(self, renewers: tuple[KafkaPrincipal, ...]) -> bytes:
        found = self._renewer_lists.get(renewers)
        if found is None:
            tags = b"\x00" if self.flexible else b""
            found = self._length(len(renewers)) + b"".join(
                self._principal(r) + tags for r in renewers
            )
            self._renewer_lists[renewers] = found
        return found

    def _tagged(self, labels: Labels) -> bytes:
        """The element's tagged-field section: empty, or tag 0 ``Labels`` (compact array
        of ``{Key, Value}``, each with its own empty tagged-field section)."""
        if not self.include_labels or not labels:
            return b"\x00"
        found = self._label_sections.get(labels)
        if found is None:
            data = encode_uvarint(len(labels) + 1) + b"".join(
                self._string(k) + self._string(v) + b"\x00" for k, v in labels)
            found = b"\x01" + encode_uvarint(0) + encode_uvarint(len(data)) + data
            self._label_sections[labels] = found
        return found

    def element(self, token: DelegationToken) -> bytes:
        info = token.info
        parts = [self._principal(info.owner)]
        if self.version >= 3:
            parts.append(self._principal(info.token_requester))
        parts.append(_TIMES.pack(info.issue_timestamp, info.expiry_timestamp, info.max_timestamp))
        parts.append(self._string(info.token_id))
        parts.append(self._length(len(token.hmac)))
        parts.append(token.hmac)
        parts.append(self._renewers(info.renewers))
        if self.flexible:
            parts.append(self._tagged(info.labels))
        return b"".join(parts)


def selected_ids(cache: TokenCache, owners: Sequence[KafkaPrincipal] | None,
                 selector: Labels = NO_LABELS) -> list[str]:
    """The ids a describe looks at: the indexes' for named owners and labels (both: the
    ids in both), else every id."""
    if owners is None and not selector:
        return cache.token_ids()
    if not selector:
        return sorted(cache.ids_of(owners or ()))
    labelled = cache.ids_labelled(selector)
    if owners is not None:
        labelled &= cache.ids_of(owners)
    return sorted(labelled)


async def describe_tokens(
    cache: TokenCache,
    principal: KafkaPrincipal,
    owners: Sequence[KafkaPrincipal] | None,
    may_describe: Callable[[TokenInformation], bool],
    version: int,
    *,
    selector: Labels = NO_LABELS,
    include_labels: bool = False,
    budget_s: float = SLICE_BUDGET_S,
) -> Described:
    """The tokens ``principal`` may see, filtered by ``owners`` (None: every owner,
    empty: none) and by the label ``selector`` (every label on the token), encoded for
    DescribeDelegationToken ``version`` (with their labels when ``include_labels``).

    Runs on the event loop and yields to it whenever a slice has taken ``budget_s``.
    A token removed while the describe runs is left out; one renewed shows either
    state. Tokens whose master key is unknown have no HMAC and are never shown.
    """
    if owners is not None and not owners:
        return Described(0, EncodedElements(0, ()))
    me = principal.without_token_flag()
    ids = selected_ids(cache, owners, selector)
    await asyncio.sleep(0)
    encoder = _Encoder(version, include_labels)
    slices: list[bytes] = []
    elements: list[bytes] = []
    count = 0
    started = time.perf_counter()
    for lo in range(0, len(ids), SLICE_TOKENS):
        for token in cache.tokens_by_ids(ids[lo : lo + SLICE_TOKENS]):
            info = token.info
            if info.owner_or_renewer(me) or may_describe(info):
                elements.append(encoder.element(token))
        if time.perf_counter() - started >= budget_s:
            if elements:
                count += len(elements)
                slices.append(b"".join(elements))
                elements = []
            await asyncio.sleep(0)
            started = time.perf_counter()
    count += len(elements)
    if elements:
        slices.append(b"".join(elements))
    return Described(count, EncodedElements(count, tuple(slices)))
