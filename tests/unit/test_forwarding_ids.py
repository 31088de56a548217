"""The envelope client id of a forwarded write: broker, request key, first-attempt mark."""

from tokensvc.broker.forwarding import envelope_client_id, is_first_attempt, split_request_key


def test_first_attempt_is_marked_and_the_key_is_the_same_on_every_attempt():
    first = envelope_client_id(2, "k1", first=True)
    retry = envelope_client_id(2, "k1")
    assert first == "broker-2|rk=k1|first"
    assert retry == "broker-2|rk=k1"
    assert split_request_key(first) == split_request_key(retry) == ("broker-2", "k1")
    assert is_first_attempt(first) and not is_first_attempt(retry)


def test_client_ids_without_a_request_key_are_never_first_attempts():
    for client_id in (None, "", "broker-2", "broker-2|first", "app|first"):
        assert not is_first_attempt(client_id)
        assert split_request_key(client_id)[1] is None


def test_an_empty_key_is_no_key():
    assert split_request_key("broker-2|rk=") == ("broker-2", None)
    assert split_request_key("broker-2|rk=|first") == ("broker-2", None)
