"""Master keys: Kafka-compatible token HMACs (JDK vectors), key ids, rotation."""

from __future__ import annotations

import base64

import pytest

from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.keys import MasterKeys, UnknownKeyError, key_id, token_hmac

# JDK-computed (javax.crypto HmacSHA512), from the shared token_scram_vectors.json:
# (master key, token id, base64 HMAC). Inlined so the suite runs anywhere.
TOKEN_HMAC_VECTORS = [
    ("tokensvc-master-key-1", "Ab3dEf-hIjKlMnOpQrStUv",
     "q+O/HuG87F8ppOggvflaI7kyFlYpcfjgK3Pw0RZnFI7w8hBJCiJUs42/omBnKlNur7mpPMTGwAaBA5wNVAfkWA=="),
    ("tokensvc-master-key-1", "0000000000000000000000",
     "B1EKPdLpPhLVHx1kTNNJ4xxJE1coeUSKFqZaw9ekLkWWFd6/2flIgkF5X7Ft+NmkyVUHhGgKd0MD8WCvgOYs4Q=="),
    ("tokensvc-master-key-1", "zz_-zz_-zz_-zz_-zz_-zz",
     "WyzVAnKJE3exMy3jA0BL8/DyPoLsafZWlnEScSKcJo/TN561IzEMaoM5jz7fzY/OrVT49176xAg9+uSX0RSouw=="),
    ("another secret key with spaces", "Ab3dEf-hIjKlMnOpQrStUv",
     "HUQvi6m/iClTqMzH3vSeAW+iX+Ij/8o6w087jW/C3OT7S077550rolVI1ncs8PPy64CnWcHd1LPzeiJP639RNg=="),
    ("another secret key with spaces", "0000000000000000000000",
     "hk/ynLo3Nej+F399Zgxvyn84P0eVUffBKkDVAuNly4dvcdxVlr7v/UzqRq51HidiQzrO6O4OHKO2/zx9RBP0CA=="),
    ("another secret key with spaces", "zz_-zz_-zz_-zz_-zz_-zz",
     "0MGiSkEmdF3WjDgg7N1JiMRJwNRj93STE4dKad/JDweM5dMD54d0vux9uMmfZQHuHvMPx/IwpXdlhz69snWV8A=="),
    ("k", "Ab3dEf-hIjKlMnOpQrStUv",
     "Szat37MpVfyDYIWTWLYftsybdpnZ3FfHAevhjYnEdjDG5z7+VSwA1rbQvRQQ0Bjo9lzqH08HEGQaSVfdrBFIgA=="),
    ("k", "0000000000000000000000",
     "fOl2SBOzZbYAfDx6waINVXgikSKpQwiz1G1TDB2ndOAhF7zbVezbymqRqxzj+1k0Tlea6B6ZhA68pJitwkHW8A=="),
    ("k", "zz_-zz_-zz_-zz_-zz_-zz",
     "A4tSV74lDyxlB+oAIYBHwi2wtf1W9qsclWZH3CUoVxa7UOwPszx35ULg9SDiqFY79VRelg9o/VgbzsbOR78iyw=="),
]


@pytest.mark.parametrize(("master_key", "token_id", "expected"), TOKEN_HMAC_VECTORS)
def test_token_hmac_matches_jdk_vector(master_key: str, token_id: str, expected: str) -> None:
    digest = token_hmac(master_key, token_id)
    assert len(digest) == 64
    assert base64.b64encode(digest).decode() == expected


@pytest.mark.parametrize(("master_key", "token_id", "expected"), TOKEN_HMAC_VECTORS)
def test_master_keys_hmac_matches_jdk_vector(master_key: str, token_id: str, expected: str) -> None:
    keys = MasterKeys(master_key)
    assert base64.b64encode(keys.hmac(token_id, keys.current_id)).decode() == expected


def test_key_id_is_stable_short_hex_and_differs_per_key() -> None:
    kid = key_id("tokensvc-master-key-1")
    assert kid == key_id("tokensvc-master-key-1")
    assert len(kid) == 16
    int(kid, 16)
    assert kid != key_id("tokensvc-master-key-2")


def test_key_id_does_not_contain_the_key() -> None:
    assert "abcdef" not in key_id("abcdef")
    assert key_id("k") not in token_hmac("k", "tokensvc key id v1").hex()


def test_empty_current_key_disables_tokens() -> None:
    keys = MasterKeys("")
    assert not keys.enabled
    assert keys.current_id == ""
    assert keys.ids() == ()
    with pytest.raises(UnknownKeyError):
        keys.hmac("Ab3dEf-hIjKlMnOpQrStUv", "")


def test_hmac_under_current_and_empty_key_id_uses_current_key() -> None:
    keys = MasterKeys("tokensvc-master-key-1")
    expected = token_hmac("tokensvc-master-key-1", "tok")
    assert keys.enabled
    assert keys.current_id == key_id("tokensvc-master-key-1")
    assert keys.hmac("tok", keys.current_id) == expected
    assert keys.hmac("tok", "") == expected


def test_previous_key_keeps_old_tokens_hmac_after_rotation() -> None:
    old = MasterKeys("old-key")
    rotated = MasterKeys("new-key", ["old-key"])
    old_hmac = old.hmac("tok", old.current_id)
    assert rotated.current_id == key_id("new-key")
    assert rotated.hmac("tok", old.current_id) == old_hmac
    assert rotated.hmac("tok", rotated.current_id) == token_hmac("new-key", "tok")
    assert rotated.ids() == (key_id("new-key"), key_id("old-key"))
    assert rotated.knows(old.current_id)


def test_unknown_key_id_raises_unknown_key_error_with_not_found_code() -> None:
    keys = MasterKeys("new-key")
    with pytest.raises(UnknownKeyError) as caught:
        keys.hmac("tok", key_id("dropped-key"))
    assert isinstance(caught.value, KafkaError)
    assert caught.value.error == Errors.DELEGATION_TOKEN_NOT_FOUND
    assert caught.value.key_id == key_id("dropped-key")
    assert not keys.knows(key_id("dropped-key"))


def test_blank_and_duplicate_previous_keys_are_ignored() -> None:
    keys = MasterKeys("k1", ["", "k1", "k2", "k2"])
    assert keys.ids() == (key_id("k1"), key_id("k2"))


def test_previous_must_be_a_sequence_not_a_string() -> None:
    with pytest.raises(TypeError):
        MasterKeys("k1", "k2")


def test_repr_and_errors_never_show_keys() -> None:
    keys = MasterKeys("super-secret-current", ["super-secret-previous"])
    text = repr(keys) + str(keys)
    assert "super-secret" not in text
    assert key_id("super-secret-current") in text
    with pytest.raises(UnknownKeyError) as caught:
        keys.hmac("tok", "0123456789abcdef")
    assert "super-secret" not in str(caught.value)


def test_equal_key_sets_compare_equal() -> None:
    assert MasterKeys("a", ["b"]) == MasterKeys("a", ["b"])
    assert MasterKeys("a", ["b"]) != MasterKeys("b", ["a"])


def test_hmac_keys_are_the_first_bits_of_each_hmac():
    from tokensvc.core.keys import MasterKeys, key_id

    keys = MasterKeys("current-key", ["older-key"])
    ids = ["a", "b", "tok-é", "c"]
    kids = ["", key_id("current-key"), key_id("older-key"), key_id("nobody's key")]
    first_64 = [int.from_bytes(keys.hmac(i, k)[:8], "big") for i, k in zip(ids[:3], kids)]
    assert keys.hmac_keys(ids, kids) == [*first_64, None]
    assert keys.hmac_keys(ids, kids, bits=60) == [*(v >> 4 for v in first_64), None]
