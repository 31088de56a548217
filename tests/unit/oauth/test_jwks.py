"""Key sets and their sources: parsing, the refetch rule, a file read again, an endpoint
refetched for an unknown kid (its fetch function replaced: no network)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from joserfc.jwk import ECKey, OctKey, RSAKey

from tokensvc.oauth.jwks import FileJwks, HttpsJwks, JwksError, KeySet, RefetchLimiter, check_url
from tokensvc.oauth.refusals import OAuthRefusal

RSA = RSAKey.generate_key(2048, parameters={"kid": "r1"})
EC = ECKey.generate_key("P-256", parameters={"kid": "e1"})


def jwks(*keys, private: bool = False) -> str:
    return json.dumps({"keys": [k.as_dict(private=private) for k in keys]})


def test_parse_keeps_public_signing_keys_only():
    oct_key = OctKey.generate_key(256, parameters={"kid": "o1"}).as_dict(private=True)
    enc = {**EC.as_dict(private=False), "kid": "enc", "use": "enc"}
    document = json.dumps({"keys": [RSA.as_dict(private=True), oct_key, enc, {"kty": "XYZ"}]})
    keys = KeySet.parse(document, "test")
    assert set(keys.by_kid) == {"r1"}
    assert not keys.by_kid["r1"].is_private


@pytest.mark.parametrize("text", ["", "[]", '{"keys": 1}', '{"keys": []}', "{bad"])
def test_unusable_documents_are_errors(text):
    with pytest.raises(JwksError, match="test"):
        KeySet.parse(text, "test")


def test_a_token_without_kid_uses_the_only_key_of_its_type():
    keys = KeySet.parse(jwks(RSA, EC), "test")
    assert keys.find(None, "ES256") is keys.by_kid["e1"]
    assert keys.find(None, "RS256") is keys.by_kid["r1"]
    two = KeySet.parse(jwks(RSA, RSAKey.generate_key(2048, parameters={"kid": "r2"})), "t")
    assert two.find(None, "RS256") is None


def test_refetch_limiter_once_a_minute_per_kid_and_once_a_second_in_all():
    limiter = RefetchLimiter()
    assert limiter.allow("a", 0)
    assert not limiter.allow("b", 500)  # the floor
    assert limiter.allow("b", 1000)
    assert not limiter.allow("a", 30_000)  # a's minute
    assert limiter.allow("a", 60_000)


def test_refetch_limiter_forgets_the_oldest_of_many_kids():
    limiter = RefetchLimiter(floor_ms=0, entries=2)
    for i, kid in enumerate("abc"):
        assert limiter.allow(kid, i)
    assert limiter.allow("a", 10)  # forgotten
    assert not limiter.allow("c", 10)


@pytest.mark.parametrize("url", ["http://example.com/jwks", "ftp://x/jwks", "https://", "jwks"])
def test_urls_must_be_https_or_loopback_http(url):
    with pytest.raises(JwksError):
        check_url(url)


def test_loopback_http_and_https_are_accepted():
    check_url("http://127.0.0.1:8080/jwks")
    check_url("http://localhost/jwks")
    check_url("https://issuer.example/jwks")


def test_a_file_is_read_again_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "jwks.json"
    path.write_text(jwks(RSA))
    source = FileJwks(str(path))
    monkeypatch.setattr("tokensvc.oauth.jwks.FILE_CHECK_INTERVAL_S", 0.0)

    async def run() -> None:
        assert await source.key_for("r1", "RS256") is not None
        with pytest.raises(OAuthRefusal) as caught:
            await source.key_for("e1", "ES256")
        assert caught.value.reason == "unknown_key"
        path.write_text(jwks(RSA, EC))
        os.utime(path, (1, 1))  # a different mtime whatever the file system's resolution
        assert await source.key_for("e1", "ES256") is not None

    asyncio.run(run())


def test_a_missing_file_is_an_error_at_start(tmp_path):
    with pytest.raises(JwksError, match="JWKS file"):
        FileJwks(str(tmp_path / "absent.json"))


class FakeEndpoint:
    def __init__(self, *keys) -> None:
        self.keys = list(keys)
        self.calls = 0
        self.down = False

    def __call__(self, url: str, ca_file: str | None) -> bytes:
        self.calls += 1
        if self.down:
            raise JwksError(f"{url}: connection refused")
        return jwks(*self.keys).encode()


def endpoint_source(fake: FakeEndpoint, now: list[int]) -> HttpsJwks:
    return HttpsJwks("https://issuer.example/jwks", refresh_ms=3_600_000, backoff_ms=10,
                     backoff_max_ms=100, fetch=fake, now_ms=lambda: now[0], wait_s=2)


def test_an_unknown_kid_is_refetched_once_then_refused():
    fake, now = FakeEndpoint(RSA), [0]
    source = endpoint_source(fake, now)

    async def run() -> None:
        assert await source.key_for("r1", "RS256") is not None
        assert fake.calls == 1
        fake.keys.append(EC)
        assert await source.key_for("e1", "ES256") is not None  # rotated in: refetched
        assert fake.calls == 2
        now[0] += 2000
        with pytest.raises(OAuthRefusal) as caught:
            await source.key_for("ghost", "RS256")
        assert caught.value.reason == "unknown_key" and fake.calls == 3
        with pytest.raises(OAuthRefusal):
            await source.key_for("ghost", "RS256")
        assert fake.calls == 3  # rate-limited

    asyncio.run(run())


def test_an_endpoint_never_fetched_refuses_with_jwks_unavailable():
    fake = FakeEndpoint(RSA)
    fake.down = True
    source = endpoint_source(fake, [0])

    async def run() -> None:
        with pytest.raises(OAuthRefusal) as caught:
            await source.key_for("r1", "RS256")
        assert caught.value.reason == "jwks_unavailable"

    asyncio.run(run())


def test_the_last_good_set_serves_while_the_endpoint_is_down():
    fake, now = FakeEndpoint(RSA), [0]
    source = endpoint_source(fake, now)

    async def run() -> None:
        assert await source.key_for("r1", "RS256") is not None
        fake.down = True
        now[0] += 120_000
        assert await source.key_for("r1", "RS256") is not None
        with pytest.raises(OAuthRefusal) as caught:
            await source.key_for("e1", "ES256")
        assert caught.value.reason == "unknown_key"

    asyncio.run(run())


def test_concurrent_logins_share_one_fetch():
    fake = FakeEndpoint(RSA)
    source = endpoint_source(fake, [0])

    async def run() -> None:
        keys = await asyncio.gather(*(source.key_for("r1", "RS256") for _ in range(20)))
        assert all(k is not None for k in keys)
        assert fake.calls == 1

    asyncio.run(run())


def test_the_refresher_fetches_every_refresh_period_and_retries_a_failed_fetch():
    fake = FakeEndpoint(RSA)
    source = HttpsJwks("https://issuer.example/jwks", refresh_ms=20, backoff_ms=5,
                       backoff_max_ms=10, fetch=fake, wait_s=2)

    async def run() -> None:
        source.start()
        try:
            while fake.calls < 3:
                await asyncio.sleep(0.005)
            fake.down = True
            down_at = fake.calls
            while fake.calls < down_at + 3:  # retried with backoff while it is down
                await asyncio.sleep(0.005)
            assert source.keys is not None and "r1" in source.keys.by_kid  # last good set
            fake.down = False
            fake.keys.append(EC)
            while source.keys is None or "e1" not in source.keys.by_kid:
                await asyncio.sleep(0.005)
        finally:
            await source.close()

    asyncio.run(asyncio.wait_for(run(), 10))
