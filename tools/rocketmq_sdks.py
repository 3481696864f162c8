# Installs the official RocketMQ 5 SDKs (gRPC, through rocketmq-proxy) the compat tests run.
"""The RocketMQ 5 SDK peers, pinned, each cached under ~/.cache/pybroker:

- Python: rocketmq-python-client from PyPI, ``pip install --target`` into
  ``rocketmq-python-client-<v>/`` with its dependencies pinned (tools/proxy_sdk/
  python-requirements.txt). Its package is named ``rocketmq``, as is PyPI's C++ client
  (``rocketmq==0.4.4``, another peer), so it never goes beside pybroker: the scenario program
  tools/proxy_sdk/python_sdk.py puts the folder first on its path.
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
import shutil
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import go_client  # noqa: E402
import java_rocketmq as jr  # noqa: E402

TOOLS_DIR = pathlib.Path(__file__).resolve().parent
PYTHON_SDK_VERSION = "5.1.2"
PYTHON_REQUIREMENTS = TOOLS_DIR / "proxy_sdk" / "python-requirements.txt"
JAVA_SDK_VERSION = "5.0.8"
JAVA_SDK_POM = jr.POM_DIR / f"pom-client-java-{JAVA_SDK_VERSION}.xml"
JAVA_SDK_SOURCE = TOOLS_DIR / "proxy_sdk" / "JavaSdk.java"
COMPLETE_MARKER = ".complete.json"


class SdkError(RuntimeError):
    """An SDK could not be installed or built."""


def cache_root() -> pathlib.Path:
    return pathlib.Path.home() / ".cache" / "pybroker"


class PythonSdk:
    """rocketmq-python-client and its pinned dependencies in one ``pip --target`` folder."""

    def __init__(self, cache_dir=None):
        self.path = pathlib.Path(cache_dir) if cache_dir else \
            cache_root() / f"rocketmq-python-client-{PYTHON_SDK_VERSION}"

    def is_complete(self) -> bool:
        try:
            marker = json.loads((self.path / COMPLETE_MARKER).read_text())
        except (OSError, ValueError):
            return False
        return marker.get("requirements") == PYTHON_REQUIREMENTS.read_text() and \
            (self.path / "rocketmq" / "v5").is_dir()

    def install(self, timeout_s: float = 900) -> float:
        """pip install into a staging folder, renamed when complete; seconds (0.0: cached)."""
        if self.is_complete():
            return 0.0
        started = time.monotonic()
        staging = self.path.with_name(self.path.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        argv = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                "--target", str(staging), "-r", str(PYTHON_REQUIREMENTS)]
        try:
            run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as error:
            raise SdkError(f"pip overran {timeout_s} s") from error
        if run.returncode != 0:
            raise SdkError(f"pip failed ({run.returncode}):\n{run.stderr[-3000:]}")
        (staging / COMPLETE_MARKER).write_text(json.dumps(
            {"requirements": PYTHON_REQUIREMENTS.read_text()}))
        shutil.rmtree(self.path, ignore_errors=True)
        staging.rename(self.path)
        return time.monotonic() - started


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
            sdk = PythonSdk()
            done["python"] = {"path": str(sdk.path), "install_s": round(sdk.install(), 1)}
        if args.java or everything:
            lib = java_sdk()
            done["java"] = {"lib_dir": str(lib.lib_dir), "install_s": round(lib.install(), 1)}
        if args.go or everything:
            build = go_sdk()
            done["go"] = {"binary": str(build.path), "build_s": round(build.seconds, 1)}
    except (SdkError, jr.HarnessError, go_client.GoBuildError) as error:
        sys.stderr.write(f"rocketmq_sdks: {error}\n")
        return 1
    sys.stdout.write(json.dumps(done) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
