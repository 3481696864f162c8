# Installs the official RocketMQ 5 SDKs (gRPC, through rocketmq-proxy) the compat tests run.
"""The RocketMQ 5 SDK peers of the rocketmq-proxy tests, pinned, each cached under
~/.cache/pybroker:

- Python: rocketmq-python-client in a virtual environment of its own (tools/python_sdk_venv.py,
  shared with the gRPC endpoint's tests): its package is named ``rocketmq``, as is PyPI's C++
  client (``rocketmq==0.4.4``, another peer).
- Java: org.apache.rocketmq:rocketmq-client-java from Maven Central into
  ``rocketmq-client-java-<v>/lib`` (one shaded jar; tools/javarmq/pom-client-java-<v>.xml).
- Go: github.com/apache/rocketmq-clients/golang/v5 from the Go module proxy, built with the
  harness tests/compat/gosdk into ``rmqgo/rmqgo5-<digest>`` (tools/go_client.py).

CLI::

    python3 tools/rocketmq_sdks.py install [--python] [--java] [--go]   # all three by default
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import go_client  # noqa: E402
import java_rocketmq as jr  # noqa: E402
import python_sdk_venv  # noqa: E402

TOOLS_DIR = pathlib.Path(__file__).resolve().parent
PYTHON_SDK_VERSION = python_sdk_venv.SDK_VERSION
JAVA_SDK_VERSION = "5.0.8"
JAVA_SDK_POM = jr.POM_DIR / f"pom-client-java-{JAVA_SDK_VERSION}.xml"
JAVA_SDK_SOURCE = TOOLS_DIR / "proxy_sdk" / "JavaSdk.java"


def cache_root() -> pathlib.Path:
    return pathlib.Path.home() / ".cache" / "pybroker"


def python_sdk() -> pathlib.Path:
    """The python of the Python SDK's environment (made on first use)."""
    return pathlib.Path(python_sdk_venv.ensure())


def java_sdk(cache_dir=None) -> jr.MavenLib:
    """rocketmq-client-java's jar (Maven Central), installed by ``install()``."""
    directory = pathlib.Path(cache_dir) if cache_dir else \
        cache_root() / f"rocketmq-client-java-{JAVA_SDK_VERSION}"
    return jr.MavenLib(JAVA_SDK_POM, directory, f"rocketmq-client-java {JAVA_SDK_VERSION}",
                       "python3 tools/rocketmq_sdks.py install --java")


def go_sdk(force: bool = False) -> go_client.GoBuild:
    """The rmqgo5 harness binary (built once per source digest)."""
    return go_client.build_go_client(force=force, harness=go_client.SDK5_HARNESS)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("install",))
    parser.add_argument("--python", action="store_true")
    parser.add_argument("--java", action="store_true")
    parser.add_argument("--go", action="store_true")
    args = parser.parse_args(argv)
    everything = not (args.python or args.java or args.go)
    done = {}
    try:
        if args.python or everything:
            done["python"] = {"python": str(python_sdk())}
        if args.java or everything:
            lib = java_sdk()
            done["java"] = {"lib_dir": str(lib.lib_dir), "install_s": round(lib.install(), 1)}
        if args.go or everything:
            build = go_sdk()
            done["go"] = {"binary": str(build.path), "build_s": round(build.seconds, 1)}
    except (python_sdk_venv.SdkVenvError, jr.HarnessError, go_client.GoBuildError) as error:
        sys.stderr.write(f"rocketmq_sdks: {error}\n")
        return 1
    sys.stdout.write(json.dumps(done) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
