"""zk.notifications.ChangeNotifications against a real ZooKeeper: versions and the futures
that wait for them, the reconnect policy (catch-up after a suspension, full resync after a
session loss), purging by age and by count with the purge mark, /config/changes staying
bounded under 10,000 credential changes, a burst of notifications read in multi-reads, and
the listing adapter (``zk.client.list_children``) against kazoo's own listing."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

from tests.support.wait import poll_until as eventually
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk.client import ZkSettings, list_children, open_client
from zk.credential_store import CHANGES_PATH, CredentialStore
from zk.credential_sync import CredentialSync, UserCredentialCache
from zk.notifications import (
    CatchUp,
    ChangeNotifications,
    Listing,
    NotificationRoot,
    Purge,
    Resync,
)

ROOT = NotificationRoot("things", "/things/changes", "thing_change_")


@pytest.fixture
def open_zk(zk_connect):
    clients = []

    def make():
        c = open_client(ZkSettings(zk_connect, session_timeout_ms=6000))
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.stop()
        c.close()


def _purge(*, purger: bool = False, **rules) -> Purge:
    """A purge by the wall clock (the test's ZooKeeper runs on this host): the recipe
    purges on its own only when ``purger``; a test calls ``purge(now_ms)`` directly."""
    return Purge(lambda: purger, lambda: int(time.time() * 1000), **rules)


class Things:
    """A follower of /things/changes whose 'cache' is the list of payloads applied."""

    def __init__(self, client, **kw) -> None:
        self.client = client
        self.seen: list[bytes] = []
        self.loads = 0
        self.recipe = ChangeNotifications(client, "things", [ROOT], load=self._load,
                                          apply=self._apply, **kw)

    def _load(self) -> int:
        self.loads += 1
        self.seen = [self.client.get(f"/things/items/{c}")[0]
                     for c in sorted(self.client.get_children("/things/items"))]
        return len(self.seen)

    def _apply(self, root, notes) -> None:
        self.seen.extend(data for _, data in notes)


def _write(client, payload: bytes) -> int:
    """One change and its notification in one transaction; returns the sequence."""
    tx = client.transaction()
    tx.create("/things/items/item_", payload, sequence=True)
    tx.create(ROOT.create_path(), payload, sequence=True)
    return int(tx.commit()[-1][-10:])


@pytest.fixture
def things(open_zk):
    made = []

    def make(**kw) -> Things:
        client = open_zk()
        client.ensure_path("/things/items")
        t = Things(client, **kw)
        t.recipe.start()
        made.append(t)
        return t

    yield make
    for t in made:
        t.recipe.close()


def test_wait_for_a_version_is_set_once_the_follower_applied_it(things, open_zk):
    follower = things()
    writer = open_zk()
    sequence = _write(writer, b"a")
    follower.recipe.wait_for([("things", sequence)]).result(10)
    assert follower.seen == [b"a"]
    assert follower.recipe.applied["things"] >= sequence
    done = follower.recipe.wait_for([("things", sequence), ("other-root", 10**9)])
    assert done.done()  # applied already; versions of other roots are not this recipe's


def test_a_wait_is_not_set_before_the_version_exists_and_close_cancels_it(things):
    follower = things()
    pending = follower.recipe.wait_for([("things", 10**6)])
    assert not pending.done()
    follower.recipe.close()
    assert pending.cancelled()


def test_confirm_current_waits_until_every_change_committed_before_it_is_applied(things, open_zk):
    import threading

    gate = threading.Event()
    follower = things()
    original = follower._apply

    def slow_apply(root, notes) -> None:
        gate.wait(30)
        original(root, notes)

    follower.recipe._apply = slow_apply
    writer = open_zk()
    _write(writer, b"committed-before")
    confirmed = follower.recipe.confirm_current()
    assert not eventually(confirmed.done, timeout=0.5)  # the follower has not applied it
    gate.set()
    assert confirmed.result(10) is None
    assert b"committed-before" in follower.seen
    # Nothing new: the next confirmation needs no listing.
    assert follower.recipe.confirm_current().result(10) is None


def test_confirm_current_sees_a_purge_that_emptied_the_root(things, open_zk):
    """Deleting notifications bumps the root's cversion: a confirmation waits for the
    follower to list again (and resync, past the purge mark) even with no child left."""
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    follower = things()
    follower.recipe.close()  # stop following: it misses what comes next
    _write(writer, b"missed")
    purger = ChangeNotifications(writer, "purger", [ROOT], load=lambda: 0,
                                 apply=lambda r, n: None,
                                 purge=_purge(max_pending=0, count_min_age_ms=None))
    assert purger.purge(now_ms=0) == 1
    assert writer.get_children(ROOT.path) == []
    again = things()
    assert again.recipe.confirm_current().result(10) is None
    assert b"missed" in again.seen
    listed = again.recipe._listed["things"]
    assert listed == writer.exists(ROOT.path).cversion
    # The closed follower never saw the purge: its confirmation cannot complete.
    assert not eventually(follower.recipe.confirm_current().done, timeout=0.5)


def test_confirm_current_fails_when_the_client_is_closed(things):
    follower = things()
    follower.client.stop()
    failed = follower.recipe.confirm_current()
    assert eventually(failed.done, timeout=10)
    assert failed.exception() is not None


def test_catch_up_after_a_suspension_and_full_resync_after_a_session_loss(things, open_zk):
    follower = things()
    writer = open_zk()
    loads = follower.loads
    # Suspended, then connected again within the session: the watches survived, the
    # recipe lists the root again and applies what it missed, without reloading.
    follower.recipe._on_state(KazooState.SUSPENDED)
    sequence = _write(writer, b"during-suspension")
    follower.recipe._on_state(KazooState.CONNECTED)
    follower.recipe.wait_for([("things", sequence)]).result(10)
    assert follower.loads == loads
    assert b"during-suspension" in follower.seen
    # Lost, then connected (a new session): everything is reloaded.
    follower.recipe._on_state(KazooState.LOST)
    follower.recipe._on_state(KazooState.CONNECTED)
    assert eventually(lambda: follower.recipe.resync_count == 2, timeout=10)
    assert follower.loads == loads + 1


def test_purge_deletes_by_count_and_a_follower_behind_the_mark_resyncs(things, open_zk):
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    purger = ChangeNotifications(writer, "purger", [ROOT], load=lambda: 0,
                                 apply=lambda r, n: None,
                                 purge=_purge(max_pending=5, count_min_age_ms=None))
    last = 0
    for i in range(12):
        last = _write(writer, f"x{i}".encode())
    assert purger.purge(now_ms=0) == 7  # only the count rule: nothing is 15 minutes old
    assert len(writer.get_children(ROOT.path)) == 5
    assert b"purged_through" in writer.get(ROOT.path)[0]
    # A follower whose last applied version is below the mark reloads instead of
    # silently missing the purged changes.
    behind = things()
    behind.recipe._last["things"] = -1
    behind.recipe._mark_version["things"] = -1
    _write(writer, b"after")
    assert eventually(lambda: behind.recipe.resync_count >= 2, timeout=10)
    assert behind.recipe.wait_for([("things", last)]).result(10) is None
    assert len(behind.seen) == 13


def test_the_count_rule_spares_notifications_younger_than_its_minimum_age(open_zk):
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    purger = ChangeNotifications(writer, "purger", [ROOT], load=lambda: 0,
                                 apply=lambda r, n: None, purge=_purge(max_pending=5))
    for i in range(12):
        _write(writer, f"y{i}".encode())
    ctimes = sorted(writer.exists(f"{ROOT.path}/{c}").ctime for c in writer.get_children(ROOT.path))
    # A burst younger than a minute: a busy follower is not purged past.
    assert purger.purge(now_ms=ctimes[-1] + 1_000) == 0
    assert len(writer.get_children(ROOT.path)) == 12
    # Once a minute old, the count rule applies again.
    assert purger.purge(now_ms=ctimes[-1] + 61_000) == 7
    assert len(writer.get_children(ROOT.path)) == 5


def test_a_busy_followers_count_purge_waits_until_the_oldest_can_be_old_enough(open_zk):
    """On the controller, a listing above 1.5x max_pending tries a purge by count. When
    the oldest pending notification is younger than the count rule's minimum age, it is
    not tried again on every listing (each try stat-ed a window of notifications) until
    that one can be old enough."""
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    stat_calls = []
    purger = ChangeNotifications(writer, "purger", [ROOT], load=lambda: 0,
                                 apply=lambda r, n: None,
                                 purge=_purge(purger=True, max_pending=2,
                                              count_min_age_ms=60_000))
    original = writer.exists_async

    def counting_exists_async(path, *args, **kw):
        stat_calls.append(path)
        return original(path, *args, **kw)

    writer.exists_async = counting_exists_async
    purger.start()
    oldest = f"{ROOT.path}/{ROOT.child(0)}"
    try:
        for i in range(12):  # from the fourth on, every listing is above 1.5 x 2
            _write(writer, f"z{i}".encode())
            assert purger.wait_caught_up(10)
        # A try stats the oldest notification first (it is never purged here: all are
        # young). Without the wait, each of the listings above the bound would try again.
        assert eventually(lambda: oldest in stat_calls, timeout=10)
        assert purger.listings >= 2, purger.listings
        assert stat_calls.count(oldest) == 1, (purger.listings, stat_calls)
        assert len(writer.get_children(ROOT.path)) == 12
        assert purger.listed_names >= 12
    finally:
        purger.close()


def test_a_burst_of_notifications_is_read_in_multi_reads_not_one_get_each(things, open_zk):
    """A follower behind by 2,500 notifications reads them with ZooKeeper's multi-read
    (a thousand a request), never with a get of its own per notification, and applies
    every payload once, in order."""
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    follower = things()
    assert follower.recipe.wait_caught_up(10)
    gets: list[str] = []
    original = follower.client.get_async

    def counting_get_async(path, *args, **kw):
        gets.append(path)
        return original(path, *args, **kw)

    follower.client.get_async = counting_get_async
    payloads = [f"n{i:05d}".encode() for i in range(2_500)]
    for lo in range(0, len(payloads), 500):
        pending = []
        for payload in payloads[lo:lo + 500]:
            tx = writer.transaction()
            tx.create("/things/items/item_", payload, sequence=True)
            tx.create(ROOT.create_path(), payload, sequence=True)
            pending.append(tx.commit_async())
        for result in pending:
            result.get(timeout=30)
    assert eventually(lambda: len(follower.seen) >= len(payloads), timeout=60)
    assert follower.seen == payloads
    assert follower.recipe.applied_changes == len(payloads)
    assert [p for p in gets if p.startswith(ROOT.path + "/")] == []


@pytest.mark.parametrize("names", [
    [ROOT.child(n) for n in range(0, 3_000, 2)],                 # one length: the C path
    [ROOT.child(n) for n in range(40)] + ["a", "longer_name_0"],  # mixed lengths
    [ROOT.child(n) for n in range(5)] + ["caf\u00e9_name_000001"],   # not ASCII
    ["x" * 200, "y" * 200],                                      # a length byte >= 0x80
    [],
], ids=["uniform", "mixed-lengths", "non-ascii", "long-names", "empty"])
def test_list_children_answers_as_kazoos_listing_and_sets_the_child_watch(open_zk, names):
    client = open_zk()
    parent = "/listing/p"
    client.ensure_path(parent)
    for lo in range(0, len(names), 500):
        for result in [client.create_async(f"{parent}/{n}") for n in set(names[lo:lo + 500])]:
            result.get(timeout=30)
    fired = threading.Event()
    children, stat = list_children(client, parent, watch=lambda event: fired.set()).get(
        timeout=30)
    theirs, their_stat = client.get_children(parent, include_data=True)
    assert sorted(children) == sorted(theirs) == sorted(set(names))
    assert stat == their_stat
    client.create(f"{parent}/one_more")
    assert fired.wait(10)
    with pytest.raises(NoNodeError):
        list_children(client, "/listing/missing").get(timeout=10)


def test_purge_by_age_keeps_young_notifications(open_zk):
    writer = open_zk()
    purger = ChangeNotifications(writer, "purger", [ROOT], load=lambda: 0,
                                 apply=lambda r, n: None, purge=_purge())
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    _write(writer, b"a")
    ctime = max(writer.exists(f"{ROOT.path}/{c}").ctime for c in writer.get_children(ROOT.path))
    assert purger.purge(now_ms=ctime + 60_000) == 0
    assert purger.purge(now_ms=ctime + 15 * 60 * 1000 + 1) == 1


def test_config_changes_stay_bounded_under_10000_credential_changes(open_zk):
    client = open_zk()
    store = CredentialStore(client)
    cache = UserCredentialCache()
    # The count rule without its minimum age: this test streams 10,000 changes in seconds.
    sync = CredentialSync(store, cache, purge=_purge(purger=True, max_pending=1_000,
                                                     count_min_age_ms=None))
    sync.start()
    credential = derive_credential("pw", ScramMechanism.SCRAM_SHA_256, 4096)
    observed = []
    try:
        for batch in range(100):
            changes = [CredentialChange(f"bulk-{batch}-{i}", ScramMechanism.SCRAM_SHA_256,
                                        credential) for i in range(100)]
            store.alter(changes)  # one transaction, 100 notifications
            if batch % 10 == 9:
                observed.append(len(client.get_children(CHANGES_PATH)))
        assert sync.wait_caught_up(30)
        sync.purge(int(time.time() * 1000))
        final = len(client.get_children(CHANGES_PATH))
    finally:
        sync.close()
    assert len(cache) >= 10_000
    assert final <= 1_000, final
    # While the changes streamed in, the controller's follower kept the list bounded.
    assert max(observed) <= 3_000, observed


def test_the_resync_hooks_let_a_user_catch_up_instead_of_loading(things, open_zk):
    """``catch_up`` gets each root's listing and may answer a CatchUp (no load);
    ``during_resync`` is held around the whole resync; ``on_resync`` gets a Resync."""
    writer = open_zk()
    writer.ensure_path("/things/items")
    writer.ensure_path(ROOT.path)
    first = _write(writer, b"before")
    resyncs: list[Resync] = []
    held: list[str] = []
    listings: list[Listing] = []

    @contextmanager
    def during():
        held.append("in")
        yield
        held.append("out")

    def catch_up(found):
        listings.append(found["things"])
        if len(listings) == 1:
            return None  # the first resync loads everything
        return CatchUp(entries=41, through={"things": 10**6})

    follower = things(catch_up=catch_up, during_resync=during, on_resync=resyncs.append)
    assert follower.loads == 1
    assert listings[0].names == [ROOT.child(first)] and listings[0].newest == first
    assert resyncs == [Resync("things", 1, resyncs[0].duration_ms, caught_up=False)]
    follower.recipe._on_state(KazooState.LOST)
    follower.recipe._on_state(KazooState.CONNECTED)
    assert eventually(lambda: len(resyncs) == 2, timeout=10)
    assert follower.loads == 1  # caught up: no load
    assert (resyncs[1].entries, resyncs[1].caught_up) == (41, True)
    assert follower.recipe.applied["things"] == 10**6  # the hook's sequence counts
    assert held == ["in", "out", "in", "out"]


def test_every_sync_reports_its_resync_the_same_way(open_zk):
    client = open_zk()
    store = CredentialStore(client)
    store.upsert("alice", ScramMechanism.SCRAM_SHA_256,
                 derive_credential("pw", ScramMechanism.SCRAM_SHA_256, 4096))
    resyncs: list[Resync] = []
    sync = CredentialSync(store, UserCredentialCache(), on_resync=resyncs.append)
    sync.start()
    sync.close()
    assert [(r.name, r.entries, r.caught_up) for r in resyncs] == [("credential-sync", 1, False)]
