"""ApiVersions advertises exactly what the broker serves."""

from tokensvc.broker.handlers import HANDLERS
from tokensvc.protocol import SUPPORTED


def test_every_advertised_api_has_a_handler_and_every_handler_is_advertised():
    assert {int(k) for k in SUPPORTED} == set(HANDLERS)


def test_only_kip590_writes_are_forwarded():
    writes = {key for key, handler in HANDLERS.items() if handler.write}
    assert writes == {30, 31, 38, 39, 40, 51}
    assert all(HANDLERS[key].precheck is not None for key in writes)
