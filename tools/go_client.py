# Builds rmqgo, the Go-client harness in tests/compat/goclient, into a cache folder (prints path).
"""Build the ``rmqgo`` binary (github.com/apache/rocketmq-client-go/v2 v2.1.2) once per source.

Library::

    build = build_go_client()          # ~/.cache/pybroker/rmqgo/rmqgo-<digest>
    subprocess.run([str(build.path), "version"])

CLI::

    python tools/go_client.py [--cache-dir DIR] [--force]    # prints the binary's path

The binary's name carries a digest of go.mod, go.sum, every .go file and ``go version``, so a
second call with unchanged sources does nothing (idempotent), and an edit rebuilds. Modules come
from the Go module proxy only (``-mod=mod``, GOPROXY left at its default); the build writes to a
temporary name and renames, so two concurrent builds cannot leave a half-written binary.
"""
import argparse
import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOCLIENT_DIR = ROOT / "tests" / "compat" / "goclient"
BINARY_STEM = "rmqgo"
PINNED_CLIENT = "github.com/apache/rocketmq-client-go/v2 v2.1.2"
# rmqgotls: the TLS harness. TLS (WithTls) came to the Go client after v2.1.2; the module proxy
# serves the later master as this pseudo-version.
GOTLS_DIR = ROOT / "tests" / "compat" / "gotls"
GOTLS_STEM = "rmqgotls"
GOTLS_PINNED_CLIENT = ("github.com/apache/rocketmq-client-go/v2 "
                       "v2.1.3-0.20251226070945-2173d070fd1b")


# rmqgo5: the harness of the official RocketMQ 5 Go SDK (gRPC, through rocketmq-proxy).
SDK5_DIR = ROOT / "tests" / "compat" / "gosdk"
SDK5_STEM = "rmqgo5"
SDK5_PINNED_CLIENT = "github.com/apache/rocketmq-clients/golang/v5 v5.1.2"


@dataclasses.dataclass(frozen=True)
class Harness:
    """A Go program of tests/compat: its folder, binary name and the client version it pins."""
    source_dir: pathlib.Path
    stem: str
    pinned: str


CLIENT_HARNESS = Harness(GOCLIENT_DIR, BINARY_STEM, PINNED_CLIENT)
TLS_HARNESS = Harness(GOTLS_DIR, GOTLS_STEM, GOTLS_PINNED_CLIENT)
SDK5_HARNESS = Harness(SDK5_DIR, SDK5_STEM, SDK5_PINNED_CLIENT)


class GoBuildError(RuntimeError):
    """go is missing, or `go build` failed or overran its deadline."""


@dataclasses.dataclass
class GoBuild:
    """A built binary: path, whether this call compiled it, and seconds spent compiling."""
    path: pathlib.Path
    built: bool
    seconds: float


def go_available() -> str | None:
    """Why rmqgo cannot be built here (no `go` on PATH), or None when it can."""
    return None if shutil.which("go") else "`go` is not on PATH"


def default_cache_dir() -> pathlib.Path:
    """~/.cache/pybroker/rmqgo."""
    return pathlib.Path.home() / ".cache" / "pybroker" / "rmqgo"


def go_version(timeout_s: float = 60) -> str:
    """`go version` output, e.g. 'go version go1.26.8 linux/amd64'."""
    result = subprocess.run(["go", "version"], capture_output=True, text=True,
                            timeout=timeout_s, check=True)
    return result.stdout.strip()


def source_digest(source_dir: pathlib.Path = GOCLIENT_DIR, toolchain: str = "") -> str:
    """First 16 hex digits of sha256 over the toolchain string and every build input file."""
    digest = hashlib.sha256(toolchain.encode())
    inputs = [source_dir / "go.mod", source_dir / "go.sum", *sorted(source_dir.glob("*.go"))]
    for path in inputs:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def check_pin(source_dir: pathlib.Path = GOCLIENT_DIR, pinned: str = PINNED_CLIENT) -> None:
    """Refuse to build when go.mod no longer pins the client version the harness is for."""
    text = (source_dir / "go.mod").read_text(encoding="utf-8")
    if pinned not in text:
        raise GoBuildError(f"{source_dir / 'go.mod'} does not require {pinned}")


def build_go_client(cache_dir=None, timeout_s: float = 900, force: bool = False,
                    tls_harness: bool = False, harness: Harness | None = None) -> GoBuild:
    """Build rmqgo (or, with ``tls_harness``, rmqgotls; or ``harness``) into cache_dir unless a
    binary for the same sources exists; return it.

    timeout_s bounds the whole `go build` (module download included), in seconds.
    """
    reason = go_available()
    if reason:
        raise GoBuildError(reason)
    if harness is None:
        harness = TLS_HARNESS if tls_harness else CLIENT_HARNESS
    source_dir, stem = harness.source_dir, harness.stem
    check_pin(source_dir, harness.pinned)
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache_dir()
    target = cache / f"{stem}-{source_digest(source_dir, toolchain=go_version())}"
    if target.is_file() and os.access(target, os.X_OK) and not force:
        return GoBuild(target, built=False, seconds=0.0)
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{target.name}.{os.getpid()}.partial"
    argv = ["go", "build", "-mod=mod", "-buildvcs=false", "-trimpath", "-o", str(partial), "."]
    started = time.monotonic()
    try:
        result = subprocess.run(argv, cwd=source_dir, capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        partial.unlink(missing_ok=True)
        raise GoBuildError(f"go build overran {timeout_s} s") from error
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise GoBuildError(f"go build failed ({result.returncode}):\n{result.stderr[-4000:]}")
    os.replace(partial, target)
    return GoBuild(target, built=True, seconds=time.monotonic() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=pathlib.Path, default=None,
                        help="where binaries go (default ~/.cache/pybroker/rmqgo)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--tls", action="store_true",
                        help="build rmqgotls (tests/compat/gotls, the client with TLS)")
    args = parser.parse_args(argv)
    try:
        build = build_go_client(args.cache_dir, force=args.force, tls_harness=args.tls)
    except GoBuildError as error:
        sys.stderr.write(f"go_client: {error}\n")
        return 1
    if build.built:
        sys.stderr.write(f"go_client: built in {build.seconds:.1f} s, "
                         f"{build.path.stat().st_size} bytes\n")
    sys.stdout.write(f"{build.path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
