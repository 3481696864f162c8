"""The schema's defaults are the Java broker's own: every setting pybroker declares with a Java key
has the default that Java 4.9.8 and 5.3.3 print, except the differences listed here with a reason.

Method: run the pinned Java ``BrokerStartup -p`` and ``NamesrvStartup -p`` (tools/java_rocketmq.py;
they print every setting with its default and exit) and compare, key by key, with the defaults
declared in pybroker.config / pybroker.store.settings, written as broker.conf would spell them.
A key no Java version prints is a misspelt key. Skips with the reason when java or the jars are
unavailable, unless PYBROKER_REQUIRE_PEERS=1.
"""
import pytest

from pybroker import config, schema
from tests import peers

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

BROKER_AREAS = (config.BrokerConfig, config.StoreConfig, config.RemotingConfig)
NAMESRV_AREAS = (config.NamesrvConfig,)
ALL_VERSIONS = frozenset(peers.java_rocketmq.VERSIONS)
# key -> (versions where pybroker's default differs from what Java prints, why).
DIFFERENCES = {
    "storePathRootDir": (ALL_VERSIONS, "~/pybroker/store, so a Java store is never opened by "
                         "accident"),
    "kvConfigPath": (ALL_VERSIONS, "~/pybroker/namesrv/kvConfig.json, for the same reason"),
    "serverSocketSndBufSize": (ALL_VERSIONS, "pybroker sets 128 KiB as Java brokers before 4.x "
                               "did at start-up; 4.9.8 and 5.3.3 print 0 (OS default)"),
    "serverSocketRcvBufSize": (ALL_VERSIONS, "as serverSocketSndBufSize"),
    "transactionCheckInterval": (frozenset({"5.3.3"}), "pybroker keeps 4.9.x's 60 s"),
    "registerBrokerTimeoutMills": (frozenset({"5.3.3"}), "pybroker keeps 4.9.x's 6 s"),
}
# Derived from the host by the same rule on both sides, but the JVM may see the host otherwise
# (a qualified host name, interfaces in another order): not compared.
HOST_DERIVED = frozenset({"brokerName", "brokerIP1", "brokerIP2"})
# Java keys read from broker.conf into a config object BrokerStartup -p does not print
# (5.3.3's AuthConfig): not compared.
NOT_PRINTED = frozenset({"innerClientAuthenticationCredentials"})


def declared(areas) -> dict[str, str]:
    """{Java key: default as broker.conf spells it} of every setting Java also has."""
    values = {}
    for area in areas:
        for spec in schema.settings_of(area):
            if spec.pybroker_only or spec.key in HOST_DERIVED | NOT_PRINTED:
                continue
            default = spec.default() if callable(spec.default) else spec.default
            values[spec.key] = schema.java_text(default)
    return values


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[tuple[str, str], dict[str, list[str]]]:
    """{(version, role): what Java prints} for every pinned version."""
    result = {}
    for version in sorted(ALL_VERSIONS):
        install = peers.java_install(version)
        for role in ("broker", "namesrv"):
            harness = peers.java_rocketmq.JavaRocketMQ(
                tmp_path_factory.mktemp(f"java-{version}-{role}"), install=install)
            result[(version, role)] = harness.printed_defaults(role)
    return result


@pytest.mark.parametrize("role, areas", [("broker", BROKER_AREAS),
                                         ("namesrv", NAMESRV_AREAS)])
def test_defaults_match_java(printed, role, areas):
    mismatches = []
    for key, ours in declared(areas).items():
        for version in sorted(ALL_VERSIONS):
            java_values = printed[(version, role)].get(key)
            if java_values is None or ours in java_values:
                continue
            versions, _ = DIFFERENCES.get(key, (frozenset(), ""))
            if version not in versions:
                mismatches.append(f"{key}: pybroker {ours!r}, Java {version} {java_values}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("role, areas", [("broker", BROKER_AREAS),
                                         ("namesrv", NAMESRV_AREAS)])
def test_every_java_key_is_spelt_as_java_prints_it(printed, role, areas):
    unknown = [key for key in declared(areas)
               if not any(key in printed[(version, role)] for version in ALL_VERSIONS)]
    assert not unknown, f"keys no Java version prints: {unknown}"


def test_listed_differences_are_real(printed):
    """A listed difference that Java no longer shows is stale: the list stays honest."""
    ours = declared(BROKER_AREAS) | declared(NAMESRV_AREAS)
    stale = []
    for key, (versions, _) in DIFFERENCES.items():
        for version in versions:
            role = "namesrv" if key in declared(NAMESRV_AREAS) else "broker"
            java_values = printed[(version, role)].get(key)
            if java_values is not None and ours[key] in java_values:
                stale.append(f"{key} ({version})")
    assert not stale, f"listed as different but equal: {stale}"
