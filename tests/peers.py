# The real RocketMQ peers for compat tests: loading the tools/ harnesses, install, skip-or-fail.
"""Shared by the compat tests: the Java harness (tools/java_rocketmq.py), the Go client build
(tools/go_client.py), and the rule for a missing peer: skip with the reason in a local run,
fail when ``PYBROKER_REQUIRE_PEERS=1`` (``.ci/run`` sets it after installing the peers).
"""
import importlib.util
import pathlib
import sys

import pytest

from tests.conftest import require_peers

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_tool(name: str):
    """Import tools/<name>.py by path (tools/ is not a package); one module object per run."""
    module_name = f"_pybroker_tools_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def unavailable(reason: str):
    """Skip (local run) or fail (CI: PYBROKER_REQUIRE_PEERS=1) for a missing peer."""
    if require_peers():
        pytest.fail(f"peer required (PYBROKER_REQUIRE_PEERS=1): {reason}")
    pytest.skip(reason)


java_rocketmq = load_tool("java_rocketmq")
go_client = load_tool("go_client")


def java_install(version: str = java_rocketmq.DEFAULT_VERSION):
    """The installed Java RocketMQ ``version`` (jars from Maven), or skip/fail."""
    reason = java_rocketmq.java_available()
    if reason:
        unavailable(reason)
    install = java_rocketmq.RocketMQInstall(version)
    try:
        install.install(timeout_s=1200)
    except java_rocketmq.HarnessError as error:
        unavailable(f"cannot install Java RocketMQ {version}: {error}")
    return install


def rmqgo_path() -> pathlib.Path:
    """The built ``rmqgo`` binary (Go client v2.1.2), or skip/fail."""
    reason = go_client.go_available()
    if reason:
        unavailable(reason)
    return go_client.build_go_client().path
