"""RedisPacer and AsyncRedisPacer on a real Redis Cluster (three primaries,
three replicas: tests/redis_cluster.py): keys routed to the primary that
owns their slot, the engine found on every primary, the script loaded on
every primary, a slot moved (MOVED, ASK) and a primary failed over between
calls, and the misconfigurations.

Every expectation is derived by hand, as in test_redis.py: rate 60, burst
2, idle 30000, 3 retries (SPEC §3: wait bound 2000 ms, hint cap 2 s). The
server's clock moves between calls, so the answers are checked for what
holds at any speed (``assert_answers``): a fresh bucket admits two calls at
once; an admission waits at most the bound (the third at most 1000 ms: one
token at 1/s); a refusal needs more than the bound and gives the hint 2.
The key's counts, read on the primary that owns it (``RedisCluster.info``,
never through the code under test), must be those of the answers; after a
slot move or a failover, those of every answer before and after it (a
bucket reset by the move would count only the calls after it).

The clusters are shared by the tests of this file, which run in its order:
the cluster of mixed engines is given the function library after the tests
that need it without."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pacer import AdmitPath, RedisAdmitted, RedisPacer, RedisPacerError, RedisRefused

from redis_cluster import REDIS_CLI, RedisCluster
from redis_server import REDIS_SERVER
from test_redis import BOUND_MS, CONFIG, HINT_CAP_S, SCRIPT, Driver, needs_module

pytestmark = [
    pytest.mark.skipif(REDIS_SERVER is None or REDIS_CLI is None,
                       reason="redis-server or redis-cli not installed (scripts/redis-deps.sh)"),
    pytest.mark.skipif(os.environ.get("PACER_CLUSTER_TESTS") == "0",
                       reason="PACER_CLUSTER_TESTS=0: run under another interpreter with this redis-py "
                              "(scripts/test-python.sh)"),
]

LIBRARY = b"#!lua name=pacer\n" + SCRIPT
#: The pacers' settings: CONFIG, with the call's timeout at the wait bound
#: (a pacer's first call on a cluster connects to a seed, reads the slots
#: and asks every primary; a busy machine can take more than the default
#: 1000 ms for that).
SETTINGS: dict[str, Any] = {**CONFIG, "timeout_ms": BOUND_MS}
SHA = hashlib.sha1(SCRIPT).hexdigest()


# ------------------------------------------------------------ clusters


@pytest.fixture(scope="module")
def module_cluster() -> Iterator[RedisCluster]:
    """The module on every node."""
    with RedisCluster(module=needs_module()) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def mixed_cluster() -> Iterator[RedisCluster]:
    """The module on every node but one primary; no function until the
    tests that want it load it."""
    with RedisCluster(module=needs_module(), without_module=(2,)) as cluster:
        lacking = [node for node in cluster.primaries() if not cluster.has_module(node)]
        assert lacking == [cluster.nodes[2]], "node 2 is to be a primary without the module"
        yield cluster


@pytest.fixture(params=["sync", "async"])
def d(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver = Driver(request.param)
    try:
        yield driver
    finally:
        driver.close()


def cluster_client(d: Driver, cluster: RedisCluster) -> Any:
    """A RedisCluster of the caller's own (redis-py's, of the driver's
    flavor) on one seed, for ``client=``."""
    import redis.asyncio.cluster
    import redis.cluster

    host, port = cluster.seeds[1].split(":")
    if d.flavor == "async":
        return redis.asyncio.cluster.RedisCluster(host=host, port=int(port), decode_responses=True)
    return redis.cluster.RedisCluster(host=host, port=int(port), decode_responses=True)


def close_client(d: Driver, client: Any) -> None:
    d(client.aclose()) if d.flavor == "async" else client.close()


def errorstat(cluster: RedisCluster, node: Any, code: str) -> int:
    """How many error replies of ``code`` the node has sent (``INFO
    errorstats``): the redirections a client was told to follow."""
    stats = cluster.admin(node).info("errorstats")
    return int(stats.get(f"errorstat_{code}", {}).get("count", 0))


# ------------------------------------------------------------ one bucket's calls, by hand


def reserve_five(d: Driver, pacers: list[Any]) -> list[list[Any]]:
    """Five reserves on each pacer's key, round after round across the keys
    (so the calls alternate between the shards)."""
    answers: list[list[Any]] = [[] for _ in pacers]
    for _ in range(5):
        for i, fleet in enumerate(pacers):
            answers[i].append(d(fleet.reserve()))
    return answers


def assert_answers(answers: list[Any]) -> tuple[int, int]:
    """What holds of a fresh bucket's answers at any speed: the first two
    admitted at once; every one the server's; an admission waits within the
    bound, the third within 1000 ms (one token at 1/s); a refusal needs more
    than the bound and gives the capped hint. Returns (admitted, refused),
    which the key's counts must be."""
    assert len(answers) >= 2
    for outcome in answers[:2]:
        assert isinstance(outcome, RedisAdmitted), outcome
        assert (outcome.wait_ms, outcome.path, outcome.fallback) == (0, AdmitPath.PACED, None)
    for i, outcome in enumerate(answers):
        assert outcome.fallback is None, outcome
        if isinstance(outcome, RedisAdmitted):
            assert outcome.path is AdmitPath.PACED and 0 <= outcome.wait_ms <= (1000 if i == 2 else BOUND_MS)
        else:
            assert isinstance(outcome, RedisRefused), outcome
            assert outcome.retry_after_s == HINT_CAP_S and outcome.required_wait_ms > BOUND_MS
    admitted = sum(isinstance(outcome, RedisAdmitted) for outcome in answers)
    return admitted, len(answers) - admitted


def run_buckets(d: Driver, cluster: RedisCluster, prefix: str, expected: str, **options: Any) -> list[Any]:
    """Twelve keys, four on each primary: each bucket created (which finds
    the engine), then given five reserves and its first admission released;
    each key's counts on its owner must be what its pacer was answered.
    Half the pacers make their own cluster client from a seed, half take the
    settings of one given."""
    keys = [key for owned in cluster.keys_per_primary(f"{prefix}:{d.flavor}", 4).values() for key in owned]
    assert len(keys) == 12
    given = cluster_client(d, cluster)
    try:
        pacers = [
            d.pacer(key=key, **({"startup_nodes": [cluster.seeds[i % 6]]} if i % 2 else {"client": given}),
                    **options, **SETTINGS)
            for i, key in enumerate(keys)
        ]
        for fleet in pacers:
            assert d(fleet.create()) is True
        for fleet in pacers:
            answers = [d(fleet.reserve()) for _ in range(5)]
            admitted, refused = assert_answers(answers)
            assert d(fleet.release(answers[0].ticket)) is True
            assert fleet.engine == expected
            info = cluster.info(fleet.key, SCRIPT)
            assert (info["admitted"], info["refused"], info["released"]) == (admitted, refused, 1), fleet.key
    finally:
        close_client(d, given)
    # Each key is on its owner and on no other primary.
    for key in keys:
        owner = cluster.owner(key)
        for node in cluster.primaries():
            assert holds(cluster, node, key) is (node is owner), (key, node.port)
    return pacers


def holds(cluster: RedisCluster, node: Any, key: str) -> bool:
    """Whether the node holds the key (among the keys of its slot)."""
    slot = cluster.keyslot(key)
    return key.encode() in cluster.admin(node).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10000)


# ------------------------------------------------------------ a. the module on every node


def test_the_module_on_every_primary(d: Driver, module_cluster: RedisCluster) -> None:
    run_buckets(d, module_cluster, "module", "module")


# ------------------------------------------------------------ c. a slot moved, d. a primary failed over


def two(d: Driver, fleet: Any) -> list[Any]:
    """A fresh bucket's first two reserves (both admitted at once)."""
    return [d(fleet.reserve()), d(fleet.reserve())]


def three_more(d: Driver, fleet: Any) -> list[Any]:
    """Three more reserves. The key's counts must then be those of all five
    answers: a bucket reset by the move would count only these three (and
    admit the first of them at once), one counted on two shards no longer
    be read whole on its owner."""
    return [d(fleet.reserve()) for _ in range(3)]


def assert_counted(cluster: RedisCluster, key: str, answers: list[Any]) -> None:
    admitted, refused = assert_answers(answers)
    info = cluster.info(key)
    assert (info["admitted"], info["refused"]) == (admitted, refused)


def test_a_slot_moved_between_calls_is_followed(d: Driver, module_cluster: RedisCluster) -> None:
    """The key's slot moved to another primary (keys migrated, the slot
    given to it everywhere): the next call is answered ``MOVED`` once by the
    old primary, redis-py follows it and keeps the new owner; the counts
    continue on the new primary (nothing reset, nothing counted twice)."""
    cluster = module_cluster
    primaries = cluster.primaries()
    key = cluster.keys_per_primary(f"moved:{d.flavor}", 1)[primaries[0].port][0]
    fleet = d.pacer(startup_nodes=cluster.seeds[:1], key=key, **SETTINGS)
    before = two(d, fleet)
    source, target = primaries[0], primaries[1]
    moved = errorstat(cluster, source, "MOVED")
    cluster.move_slot(cluster.keyslot(key), target)
    assert cluster.owner(key) is target and not holds(cluster, source, key)
    after = three_more(d, fleet)
    assert errorstat(cluster, source, "MOVED") - moved == 1  # one call redirected, then routed to the new owner
    assert_counted(cluster, key, before + after)


def test_a_slot_migrating_is_followed_by_ask(d: Driver, module_cluster: RedisCluster) -> None:
    """The key's slot MIGRATING from its primary and IMPORTING on another,
    the key already migrated: each call is answered ``ASK`` by the old
    primary and runs on the new one (after ``ASKING``); once the slot is
    given to the new primary, ``MOVED`` once. The counts continue."""
    cluster = module_cluster
    primaries = cluster.primaries()
    key = cluster.keys_per_primary(f"ask:{d.flavor}", 1)[primaries[1].port][0]
    fleet = d.pacer(startup_nodes=cluster.seeds[:1], key=key, **SETTINGS)
    before = two(d, fleet)
    source, target, slot = primaries[1], primaries[2], cluster.keyslot(key)
    asked, moved = errorstat(cluster, source, "ASK"), errorstat(cluster, source, "MOVED")
    cluster.move_slot(slot, target, finish=False)
    assert holds(cluster, target, key) and not holds(cluster, source, key)
    during = two(d, fleet)
    assert errorstat(cluster, source, "ASK") - asked == 2  # each call asked: ASK moves no slot in the client
    assert errorstat(cluster, source, "MOVED") == moved
    cluster.finish_move(slot, target, source)
    after = [d(fleet.reserve())]
    assert errorstat(cluster, source, "MOVED") - moved == 1
    assert_counted(cluster, key, before + during + after)


def test_a_primary_failed_over_between_calls_is_followed(d: Driver, module_cluster: RedisCluster) -> None:
    """The key's primary failed over to its replica (``WAIT 1``, then
    ``CLUSTER FAILOVER``): the old primary, now a replica, answers ``MOVED``
    once; the counts continue on the promoted replica."""
    cluster = module_cluster
    # A shard of its own for each flavor (a shard failed over again at once
    # waits for its primaries' votes).
    old = cluster.nodes[0 if d.flavor == "sync" else 2]
    assert cluster.role(old) == "master"
    key = cluster.keys_per_primary(f"failover:{d.flavor}", 1)[old.port][0]
    fleet = d.pacer(startup_nodes=cluster.seeds[:1], key=key, **SETTINGS)
    before = two(d, fleet)
    moved = errorstat(cluster, old, "MOVED")
    new = cluster.failover(old)
    assert cluster.owner(key) is new
    after = three_more(d, fleet)
    assert errorstat(cluster, old, "MOVED") - moved == 1
    assert_counted(cluster, key, before + after)


def test_a_primary_killed_is_an_outage_until_its_replica_takes_over(module_cluster: RedisCluster) -> None:
    """The key's primary SIGKILLed (after ``WAIT 1``): the calls are
    outages the policy answers (the connection refused, then the slot's
    primary unreachable) until the cluster promotes the replica; then
    redis-py's refreshed slots send the next call there, and the counts
    continue: the replica had every admission acknowledged before."""
    cluster = module_cluster
    old = cluster.nodes[1]
    assert cluster.role(old) == "master"
    key = cluster.keys_per_primary("killed", 1)[old.port][0]
    fleet = RedisPacer(startup_nodes=cluster.seeds, key=key, on_failure="closed", retry_after_ms=100, **SETTINGS)
    try:
        before = [fleet.reserve(), fleet.reserve()]
        replica = cluster.kill_primary(old)
        by_policy: list[Any] = []
        deadline = time.monotonic() + 60
        while True:
            answer = fleet.reserve()
            if answer.fallback is None:
                break
            assert isinstance(answer, RedisRefused) and answer.fallback == "closed"
            by_policy.append(answer)
            assert time.monotonic() < deadline, "the cluster never answered for the key again"
            time.sleep(0.05)
        assert by_policy  # the first call after the kill met it
        cluster.wait_promoted(replica)
        assert cluster.owner(key) is replica
        after = [answer, fleet.reserve()]
        assert not fleet.in_outage
        assert_counted(cluster, key, before + after)
    finally:
        fleet.close()


# ------------------------------------------------------------ e. bad input (mixed engines, no function)


def test_auto_uses_the_script_when_one_primary_lacks_the_module(d: Driver, mixed_cluster: RedisCluster) -> None:
    for node in mixed_cluster.primaries():
        assert mixed_cluster.admin(node).execute_command("FUNCTION", "LIST") == []
    run_buckets(d, mixed_cluster, "mixed", "script")
    for node in mixed_cluster.primaries():  # loaded on every primary, no function loaded
        assert mixed_cluster.admin(node).execute_command("SCRIPT", "EXISTS", SHA) == [1]
        assert mixed_cluster.admin(node).execute_command("FUNCTION", "LIST") == []


@pytest.mark.parametrize("policy", ["closed", "local"])
def test_the_module_forced_where_a_primary_lacks_it_is_an_outage(d: Driver, mixed_cluster: RedisCluster,
                                                                  policy: str) -> None:
    """A key of the primary without the module: ``unknown command`` twice
    (the retry after the engine change), so an outage the policy answers,
    and no shard counted it. A key of a primary with the module: the
    server's answer."""
    lacking = mixed_cluster.nodes[2]
    keys = mixed_cluster.keys_per_primary(f"forced-module:{policy}:{d.flavor}", 1)
    fleet = d.pacer(startup_nodes=mixed_cluster.seeds, key=keys[lacking.port][0], engine="module",
                    on_failure=policy, **SETTINGS)
    answer = d(fleet.reserve())
    assert answer.fallback == policy and fleet.in_outage
    if policy == "closed":
        assert isinstance(answer, RedisRefused) and answer.retry_after_s == HINT_CAP_S
    else:
        assert isinstance(answer, RedisAdmitted) and answer.wait_ms == 0
    for node in mixed_cluster.nodes:
        assert not holds(mixed_cluster, node, fleet.key)
    other_port = next(port for port in keys if port != lacking.port)
    served = d.pacer(startup_nodes=mixed_cluster.seeds, key=keys[other_port][0], engine="module",
                     on_failure=policy, **SETTINGS)
    outcome = d(served.reserve())
    assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None
    assert mixed_cluster.info(served.key)["admitted"] == 1


def test_a_plain_client_on_a_node_that_does_not_own_the_key_is_an_error(d: Driver,
                                                                        mixed_cluster: RedisCluster) -> None:
    """``url=`` names one node: a key another primary owns is answered
    ``MOVED`` there, an error to the caller (not an outage, never an
    admission), whatever the policy; nothing is counted anywhere."""
    primaries = mixed_cluster.primaries()
    keys = mixed_cluster.keys_per_primary(f"plain:{d.flavor}", 1)
    key = keys[primaries[1].port][0]
    for engine in ("auto", "script"):
        fleet = d.pacer(url=primaries[0].url, key=key, engine=engine, on_failure="open", **SETTINGS)
        with pytest.raises(RedisPacerError, match="MOVED"):
            d(fleet.reserve())
        assert not fleet.in_outage
    for node in mixed_cluster.nodes:
        assert not holds(mixed_cluster, node, key)


# ------------------------------------------------------------ b. the function on every primary


def test_the_function_on_every_primary(d: Driver, mixed_cluster: RedisCluster) -> None:
    mixed_cluster.load_function(LIBRARY)
    run_buckets(d, mixed_cluster, "function", "function")


def test_the_script_forced_is_found_on_every_shard(d: Driver, mixed_cluster: RedisCluster) -> None:
    mixed_cluster.load_function(LIBRARY)
    primaries = mixed_cluster.primaries()
    for node in primaries:
        mixed_cluster.admin(node).execute_command("SCRIPT", "FLUSH")
    noscript = [errorstat(mixed_cluster, node, "NOSCRIPT") for node in primaries]
    run_buckets(d, mixed_cluster, "script", "script", engine="script")
    for node in primaries:
        assert mixed_cluster.admin(node).execute_command("SCRIPT", "EXISTS", SHA) == [1]
    # Loaded on every primary before the first EVALSHA: none was answered NOSCRIPT.
    assert [errorstat(mixed_cluster, node, "NOSCRIPT") for node in primaries] == noscript


def test_a_failover_with_the_script_loads_it_on_the_new_primary(d: Driver, mixed_cluster: RedisCluster) -> None:
    """The script forced, its key's primary failed over: the promoted
    replica's script cache never had the script (``SCRIPT LOAD`` is not
    replicated), so the call after ``MOVED`` is answered ``NOSCRIPT`` once;
    the pacer loads it on every primary and retries, within the call. The
    counts continue."""
    cluster = mixed_cluster
    old = cluster.nodes[0 if d.flavor == "sync" else 1]
    assert cluster.role(old) == "master"
    key = cluster.keys_per_primary(f"script-failover:{d.flavor}", 1)[old.port][0]
    fleet = d.pacer(startup_nodes=cluster.seeds[:1], key=key, engine="script", **SETTINGS)
    before = two(d, fleet)
    replica = cluster.replica_of(old)
    noscript = errorstat(cluster, replica, "NOSCRIPT")
    new = cluster.failover(old)
    assert new is replica and cluster.owner(key) is new
    after = three_more(d, fleet)
    assert errorstat(cluster, new, "NOSCRIPT") - noscript == 1
    assert cluster.admin(new).execute_command("SCRIPT", "EXISTS", SHA) == [1]
    assert not fleet.in_outage
    assert_counted(cluster, key, before + after)


# ------------------------------------------------------------ the cluster client itself


def test_an_unreachable_cluster_is_an_outage(d: Driver) -> None:
    """No seed answers: making the pacer asks nothing; a decision is the
    policy's (an outage), ``create`` raises redis-py's cluster error."""
    from redis.exceptions import RedisClusterException

    from redis_server import free_port

    seeds = [f"127.0.0.1:{free_port()}", ("127.0.0.1", free_port())]
    fleet = d.pacer(startup_nodes=seeds, key="pacer-test:unreachable", on_failure="closed", **SETTINGS)
    answer = d(fleet.reserve())
    assert isinstance(answer, RedisRefused) and answer.fallback == "closed" and fleet.in_outage
    other = d.pacer(startup_nodes=seeds, key="pacer-test:unreachable", **SETTINGS)
    with pytest.raises(RedisClusterException, match="cannot be connected"):
        d(other.create())


def test_the_sync_cluster_connections_keep_the_calls_deadline(module_cluster: RedisCluster) -> None:
    """Every node's connections of the synchronous pacer's own cluster client
    are the pacer's deadline-bound class (``_bounded``), those of nodes it
    learnt of after the seed too: one deadline per call, not a timeout per
    read."""
    with RedisPacer(startup_nodes=module_cluster.seeds[:1], key="pacer-test:deadline", **SETTINGS) as fleet:
        assert fleet.reserve().fallback is None
        nodes = fleet._client.get_nodes()
        assert {node.port for node in module_cluster.primaries()} <= {node.port for node in nodes}
        for node in nodes:
            assert node.redis_connection.connection_pool.connection_class.__module__ == "pacer._redis"


def test_startup_nodes_are_checked() -> None:
    for bad in ([], "127.0.0.1:7000", ["127.0.0.1"], [("127.0.0.1",)], [7000]):
        with pytest.raises(TypeError, match="startup"):
            RedisPacer(startup_nodes=bad, key="k")
    for bad in (["127.0.0.1:port"], ["127.0.0.1:0"], [(":", 70000)]):
        with pytest.raises(ValueError, match="startup node"):
            RedisPacer(startup_nodes=bad, key="k")
    with pytest.raises(TypeError, match="exactly one of url=, client= and startup_nodes="):
        RedisPacer(startup_nodes=["127.0.0.1:7000"], url="redis://127.0.0.1:7000", key="k")
