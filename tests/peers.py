# The real RocketMQ peers for compat tests: loading the tools/ harnesses, install, skip-or-fail.
"""Shared by the compat tests: the Java harness (tools/java_rocketmq.py), the Go client build
(tools/go_client.py), and the rule for a missing peer: skip with the reason in a local run,
fail when ``PYBROKER_REQUIRE_PEERS=1`` (``.ci/run`` sets it after installing the peers).

Every peer is prepared once per session (once per run under pytest-xdist), before the first
test runs: tests/conftest.py calls :func:`prepare_all` when the selected tests include compat
tests, and each preparation prints one progress line with the time it took. The outcome (the
install, or why there is none) is remembered, so every test sees the same peers whatever the
order, and a failed install is not retried by each fixture.
"""
import contextlib
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import urllib.parse

import pytest

from tests import parallel, progress
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
rocketmq_sdks = load_tool("rocketmq_sdks")

# peer key -> the prepared peer, or the reason (str) why it is missing.
_prepared: dict[str, object] = {}


def _prepare_java(version: str):
    reason = java_rocketmq.java_available()
    if reason:
        progress.line(f"Java RocketMQ {version}: unavailable ({reason})")
        return reason
    install = java_rocketmq.RocketMQInstall(version)
    if install.is_complete():
        progress.line(f"Java RocketMQ {version} jars: cached in {install.lib_dir}")
        return install
    try:
        with progress.stage(f"Java RocketMQ {version} jars: installing from Maven Central") \
                as notes:
            install.install(timeout_s=1200)
            notes.append(f"{len(install.jar_names())} jars in {install.lib_dir}")
    except java_rocketmq.HarnessError as error:
        return f"cannot install Java RocketMQ {version}: {error}"
    return install


def _prepare_go():
    reason = go_client.go_available()
    if reason:
        progress.line(f"Go client: unavailable ({reason})")
        return reason
    try:
        with progress.stage("Go client rmqgo (rocketmq-client-go v2.1.2)") as notes:
            build = go_client.build_go_client()
            notes.append("built" if build.built else f"cached in {build.path.parent}")
    except go_client.GoBuildError as error:
        return f"cannot build the Go client: {error}"
    return build.path


def _prepare_go_tls():
    reason = go_client.go_available()
    if reason:
        return reason
    try:
        with progress.stage("Go client rmqgotls (rocketmq-client-go with TLS)") as notes:
            build = go_client.build_go_client(tls_harness=True)
            notes.append("built" if build.built else f"cached in {build.path.parent}")
    except go_client.GoBuildError as error:
        return f"cannot build the Go TLS harness: {error}"
    return build.path


def _prepare_python_sdk():
    venv = load_tool("python_sdk_venv")
    try:
        with progress.stage(f"RocketMQ 5 Python SDK {venv.SDK_VERSION}: its environment") \
                as notes:
            python = venv.ensure()
            notes.append(str(python))
    except venv.SdkVenvError as error:
        return f"cannot make the RocketMQ 5 Python SDK's environment: {error}"
    return pathlib.Path(python)


def _prepare_java_sdk():
    reason = java_rocketmq.java_available()
    if reason:
        return reason
    lib = rocketmq_sdks.java_sdk()
    if lib.is_complete():
        progress.line(f"RocketMQ 5 Java SDK: cached in {lib.lib_dir}")
        return lib
    try:
        with progress.stage(f"RocketMQ 5 Java SDK {rocketmq_sdks.JAVA_SDK_VERSION}: "
                            f"installing from Maven Central") as notes:
            lib.install(timeout_s=1200)
            notes.append(str(lib.lib_dir))
    except java_rocketmq.HarnessError as error:
        return f"cannot install the RocketMQ 5 Java SDK: {error}"
    return lib


def _prepare_go_sdk():
    reason = go_client.go_available()
    if reason:
        return reason
    try:
        with progress.stage("RocketMQ 5 Go SDK harness rmqgo5 (rocketmq-clients/golang/v5)") \
                as notes:
            build = rocketmq_sdks.go_sdk()
            notes.append("built" if build.built else f"cached in {build.path.parent}")
    except go_client.GoBuildError as error:
        return f"cannot build the RocketMQ 5 Go SDK harness: {error}"
    return build.path


def _prepared_peer(key: str, prepare):
    if key not in _prepared:
        _prepared[key] = prepare()
    peer = _prepared[key]
    if isinstance(peer, str):
        unavailable(peer)
    return peer


def java_install(version: str = java_rocketmq.DEFAULT_VERSION):
    """The installed Java RocketMQ ``version`` (jars from Maven), or skip/fail."""
    return _prepared_peer(f"java-{version}", lambda: _prepare_java(version))


def rmqgo_path() -> pathlib.Path:
    """The built ``rmqgo`` binary (Go client v2.1.2), or skip/fail."""
    return _prepared_peer("go", _prepare_go)


def rmqgotls_path() -> pathlib.Path:
    """The built ``rmqgotls`` binary (the Go client after v2.1.2, with TLS), or skip/fail."""
    return _prepared_peer("go-tls", _prepare_go_tls)


def python_sdk_python() -> pathlib.Path:
    """The python of the RocketMQ 5 Python SDK's environment (rocketmq-python-client), or
    skip/fail."""
    return _prepared_peer("python-sdk", _prepare_python_sdk)


def java_sdk():
    """The installed RocketMQ 5 Java SDK (rocketmq-client-java jars), or skip/fail."""
    return _prepared_peer("java-sdk", _prepare_java_sdk)


def go_sdk_path() -> pathlib.Path:
    """The built ``rmqgo5`` binary (the RocketMQ 5 Go SDK), or skip/fail."""
    return _prepared_peer("go-sdk", _prepare_go_sdk)


_SESSION_PEERS = {"go": _prepare_go, "go-tls": _prepare_go_tls,
                  "python-sdk": _prepare_python_sdk, "java-sdk": _prepare_java_sdk,
                  "go-sdk": _prepare_go_sdk}


def _prepare_each() -> None:
    for version in java_rocketmq.VERSIONS:
        if f"java-{version}" not in _prepared:
            _prepared[f"java-{version}"] = _prepare_java(version)
    for key, prepare in _SESSION_PEERS.items():
        if key not in _prepared:
            _prepared[key] = prepare()


def prepare_all(config=None) -> None:
    """Install every peer now (session start): both Java versions, the Go clients and the
    RocketMQ 5 SDKs. Missing tools or failed installs are remembered; the tests then skip or
    fail with them.

    In a pytest-xdist run (``config`` of a worker; tests/parallel.py) the workers take turns
    under a lock in the run directory: the first installs and records why any peer is missing,
    the others find the installs cached (quietly) and take over those reasons, so a failed
    install is tried once per run. Every worker returns only when every peer is ready: no test
    starts before (the controller schedules once all workers have collected)."""
    directory = parallel.run_dir(config) if config is not None else None
    if directory is None:
        _prepare_each()
        return
    with parallel.locked(directory / "peers.lock", exclusive=True):
        record = directory / "peers.json"
        if not record.exists():
            _prepare_each()
            missing = {key: peer for key, peer in _prepared.items() if isinstance(peer, str)}
            record.write_text(json.dumps(missing))
            return
        _prepared.update(json.loads(record.read_text()))
        with progress.muted():
            _prepare_each()


@contextlib.contextmanager
def java_broker(work_dir, install, **options):
    """A running Java NameServer + broker (``JavaRocketMQ(work_dir, install, free_ports=True,
    **options)``), its start-up shown as a progress stage; stopped on exit."""
    broker = java_rocketmq.JavaRocketMQ(work_dir, install, **{"free_ports": True, **options})
    with progress.stage(f"Java RocketMQ {install.version}: starting NameServer and broker"):
        broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def compile_java(install, sources, out_dir):
    """``java_rocketmq.compile_java`` shown as a progress stage (javac takes seconds)."""
    names = ", ".join(pathlib.Path(source).name for source in sources)
    with progress.stage(f"javac {names} against {install.what}"):
        return java_rocketmq.compile_java(install, sources, out_dir)


def compiled_java(install, source: pathlib.Path) -> pathlib.Path:
    """The classes of one tools/ Java source for this client version, compiled once per source
    digest into the install's cache (shared by every test that runs it)."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out_dir = install.cache_dir / f"java_{source.stem}" / digest
    if not (out_dir / f"{source.stem}.class").is_file():
        staging = out_dir.with_name(digest + f".partial{os.getpid()}")
        compile_java(install, [source], staging)
        try:
            staging.rename(out_dir)
        except OSError:
            if not (out_dir / f"{source.stem}.class").is_file():   # another run won the race
                raise
    return out_dir


def parse_result_line(line: str) -> dict:
    """{key: value} of a harness "RESULT op=... k=v" line (values URL-decoded)."""
    fields = {}
    for pair in line.split()[1:]:
        key, _, value = pair.partition("=")
        fields[key] = urllib.parse.unquote_plus(value)
    return fields
