# Apache RocketMQ's own benchmark classes, compiled from a source checkout, for side-by-side runs.
"""Build Apache RocketMQ's benchmark programs (``org.apache.rocketmq.example.benchmark``) from
source: they live in ``rocketmq-example``, which Maven Central does not serve at any version.

    python3 tools/apache_bench.py build --git https://github.com/apache/rocketmq.git \\
        --tag rocketmq-all-4.9.8
    python3 tools/apache_bench.py build --source ~/src/rocketmq [--tag rocketmq-all-5.3.3]
    python3 tools/apache_bench.py build ... -o DIR          # elsewhere than the cache
    python3 tools/apache_bench.py show [--tag TAG]          # what is built, from what

``--git`` takes any URL git fetches from (https, ssh, file://, a local path or bare
repository) and fetches only the tag's commit (``--depth 1``) into a scratch repository that
is removed afterwards; ``--source`` takes a checkout's working tree. Every ``.java`` file under
``example/src/main/java/org/apache/rocketmq/example/benchmark`` (Producer, Consumer,
BatchProducer, TransactionProducer, AclClient; timer/TimerProducer and TimerConsumer in 5.x)
is compiled with ``javac`` against the client jars of the matching Java RocketMQ install
(tools/java_rocketmq.py installs them when missing) into
``~/.cache/pybroker/apache-bench/<tag>/`` (``classes/``, ``src/``, ``build.json`` naming the
source, its commit and the sha256 of every file). Nothing of Apache's code enters this
repository. ``tools/bench_side_by_side.py --apache [TAG]`` runs them as the load.
"""
import argparse
import datetime
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import java_rocketmq as jr  # noqa: E402  (tools/ is not a package)

# Source tag -> the Java RocketMQ install whose client jars compile and run its classes.
TAGS = {"rocketmq-all-4.9.8": "4.9.8", "rocketmq-all-5.3.3": "5.3.3"}
DEFAULT_TAG = "rocketmq-all-4.9.8"
BENCHMARK_DIR = "example/src/main/java/org/apache/rocketmq/example/benchmark"
PACKAGE = "org.apache.rocketmq.example.benchmark."
# Main classes the side-by-side tool runs, by the first version that has them.
REQUIRED = {"4": ("Producer", "Consumer", "BatchProducer", "TransactionProducer"),
            "5": ("Producer", "Consumer", "BatchProducer", "TransactionProducer",
                  "timer.TimerProducer", "timer.TimerConsumer")}
BUILD_FILE = "build.json"
GIT_TIMEOUT_S = 900.0
_POM_VERSION = re.compile(r"<artifactId>rocketmq-all</artifactId>\s*<version>([^<]+)</version>")


class BuildError(RuntimeError):
    """A build that cannot go on; str() is one line saying why and what to do."""


def cache_root() -> pathlib.Path:
    return pathlib.Path.home() / ".cache" / "pybroker" / "apache-bench"


def default_dir(tag: str) -> pathlib.Path:
    """Where ``build`` puts a tag's classes unless ``-o`` says otherwise."""
    return cache_root() / tag


def load_build(out_dir: pathlib.Path) -> dict | None:
    """The build.json of a finished build in out_dir (None when there is none)."""
    try:
        build = json.loads((pathlib.Path(out_dir) / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    classes = pathlib.Path(out_dir) / "classes"
    return build if all((classes / (PACKAGE + name).replace(".", "/")).with_suffix(".class")
                        .is_file() for name in build.get("main_classes", ())) else None


def build_hint(tag: str) -> str:
    return (f"python3 tools/apache_bench.py build --git https://github.com/apache/rocketmq.git "
            f"--tag {tag} (or --source <a checkout of {tag}>)")


def _run(argv: list[str], what: str, timeout_s: float = GIT_TIMEOUT_S, cwd=None) -> bytes:
    try:
        run = subprocess.run(argv, capture_output=True, timeout=timeout_s, cwd=cwd)
    except FileNotFoundError as error:
        raise BuildError(f"{what}: {argv[0]} is not installed ({error})") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: no answer within {timeout_s:.0f} s") from None
    if run.returncode != 0:
        lines = [line.strip() for line in run.stderr.decode(errors="replace").splitlines()
                 if line.strip()]
        fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
        reason = (fatal or lines or [f"exit {run.returncode}"])[0]
        raise BuildError(f"{what}: {reason}")
    return run.stdout


def _version_of(pom_text: str, where: str) -> str:
    found = _POM_VERSION.search(pom_text)
    if found is None:
        raise BuildError(f"{where} is not RocketMQ's source (no rocketmq-all version in its "
                         f"pom.xml)")
    return found.group(1).strip()


def _tag_for(version: str, tag: str | None, where: str) -> str:
    found = f"rocketmq-all-{version}"
    if tag is not None and tag != found:
        raise BuildError(f"{where} holds RocketMQ {version}, not {tag}")
    if found not in TAGS:
        raise BuildError(f"{where} holds RocketMQ {version}; the tool builds "
                         f"{', '.join(TAGS)} (the client jars it installs)")
    return found


def sources_from_dir(source: pathlib.Path, tag: str | None) -> tuple[str, dict, dict]:
    """(tag, {relative path: bytes}, provenance) from a checkout's working tree."""
    source = source.expanduser().resolve()
    try:
        pom = (source / "pom.xml").read_text(encoding="utf-8")
    except OSError:
        raise BuildError(f"{source} has no pom.xml: pass the root of a RocketMQ checkout") \
            from None
    tag = _tag_for(_version_of(pom, str(source)), tag, str(source))
    files = {str(path.relative_to(source / BENCHMARK_DIR)): path.read_bytes()
             for path in sorted((source / BENCHMARK_DIR).rglob("*.java"))}
    provenance = {"kind": "source", "source": str(source), "commit": None}
    try:
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--",
                                    BENCHMARK_DIR], capture_output=True, text=True, timeout=60)
            provenance["commit"] = head.stdout.strip() + ("+dirty" if dirty.stdout else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return tag, files, provenance


def sources_from_git(url: str, tag: str, scratch_parent: pathlib.Path) -> tuple[dict, dict]:
    """({relative path: bytes}, provenance) of the tag's benchmark folder, fetched shallowly
    into a scratch repository under scratch_parent (removed before returning)."""
    if tag not in TAGS:
        raise BuildError(f"--tag {tag}: the tool builds {', '.join(TAGS)}")
    given, local = url, pathlib.Path(url).expanduser()
    if local.exists():
        url = local.resolve().as_uri()   # a plain path would take the local-clone route
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="fetch-", dir=scratch_parent))
    try:
        _run(["git", "init", "-q", str(scratch)], "git init")
        _run(["git", "-C", str(scratch), "fetch", "-q", "--depth", "1", "--no-tags", url,
              f"refs/tags/{tag}"], f"git fetch of {tag} from {url}")
        commit = _run(["git", "-C", str(scratch), "rev-parse", "FETCH_HEAD^{commit}"],
                      "git rev-parse").decode().strip()
        pom = _run(["git", "-C", str(scratch), "show", f"{commit}:pom.xml"], "pom.xml")
        _tag_for(_version_of(pom.decode("utf-8", errors="replace"), f"{url} {tag}"), tag,
                 f"{url} {tag}")
        names = _run(["git", "-C", str(scratch), "ls-tree", "-r", "--name-only", commit, "--",
                      BENCHMARK_DIR], "git ls-tree").decode().split("\n")
        files = {name[len(BENCHMARK_DIR) + 1:]: _run(
            ["git", "-C", str(scratch), "show", f"{commit}:{name}"], f"git show {name}")
            for name in names if name.endswith(".java")}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return files, {"kind": "git", "source": given, "commit": commit}


def _javac_version() -> str:
    try:
        run = subprocess.run(["javac", "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (run.stdout + run.stderr).strip()


def compile_sources(tag: str, files: dict, provenance: dict, out_dir: pathlib.Path) -> dict:
    """javac the files against the tag's client jars into out_dir/classes (built beside it and
    renamed into place); writes and returns build.json."""
    version = TAGS[tag]
    required = REQUIRED[version.split(".")[0]]
    missing = [name for name in required if name.replace(".", "/") + ".java" not in files]
    if missing:
        raise BuildError(f"{tag}: {BENCHMARK_DIR} lacks {', '.join(missing)}")
    install = jr.RocketMQInstall(version)
    try:
        install.install()
    except jr.HarnessError as error:
        raise BuildError(f"installing the Java RocketMQ {version} client jars failed: "
                         f"{str(error).strip().splitlines()[0]}") from None
    out_dir = pathlib.Path(out_dir).expanduser().resolve()
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for name, data in files.items():
        path = staging / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        jr.compile_java(install, sorted((staging / "src").rglob("*.java")), staging / "classes",
                        timeout_s=300)
    except jr.HarnessError as error:
        shutil.rmtree(staging, ignore_errors=True)
        errors = [line for line in str(error).splitlines() if "error:" in line]
        raise BuildError(f"javac failed on {tag}: {errors[0] if errors else str(error)[:300]}") \
            from None
    build = {"tag": tag, "version": version, **provenance,
             "client_jars": str(install.lib_dir), "javac": _javac_version(),
             "built": datetime.datetime.now().isoformat(timespec="seconds"),
             "main_classes": list(required),
             "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
    (staging / BUILD_FILE).write_text(json.dumps(build, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(out_dir)
    return build


def build(source=None, git_url=None, tag=None, out_dir=None) -> tuple[pathlib.Path, dict]:
    """Fetch or read the sources, compile them; returns (output folder, build.json)."""
    if (source is None) == (git_url is None):
        raise BuildError("give one of --source DIR and --git URL")
    if git_url is not None:
        if tag is None:
            raise BuildError(f"--git needs --tag ({' or '.join(TAGS)})")
        out = pathlib.Path(out_dir) if out_dir else default_dir(tag)
        files, provenance = sources_from_git(git_url, tag, out.expanduser().resolve().parent)
    else:
        tag, files, provenance = sources_from_dir(pathlib.Path(source), tag)
        out = pathlib.Path(out_dir) if out_dir else default_dir(tag)
    return out.expanduser().resolve(), compile_sources(tag, files, provenance, out)


def describe(build_info: dict) -> str:
    """One line naming what a build is: tag, source and commit."""
    commit = build_info.get("commit")
    return (f"Apache's benchmark classes from {build_info['tag']} "
            f"({build_info['kind']} {build_info['source']}"
            + (f" at {commit[:12]}" if commit else "") + ")")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "show"))
    parser.add_argument("--source", type=pathlib.Path, default=None,
                        help="root of a RocketMQ source checkout (its working tree)")
    parser.add_argument("--git", dest="git_url", default=None,
                        help="a git URL or path to fetch --tag from (shallow)")
    parser.add_argument("--tag", default=None, choices=tuple(TAGS),
                        help="the release tag (with --source: checked against its pom.xml)")
    parser.add_argument("-o", "--out", type=pathlib.Path, default=None,
                        help=f"output folder (default {cache_root()}/<tag>)")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "show":
        found = 0
        for tag in ([args.tag] if args.tag else list(TAGS)):
            out = args.out or default_dir(tag)
            info = load_build(out)
            if info is not None:
                found += 1
                sys.stdout.write(f"{tag}: {out / 'classes'} — {describe(info)}, built "
                                 f"{info['built']}\n")
            else:
                sys.stdout.write(f"{tag}: not built; {build_hint(tag)}\n")
        return 0 if found else 1
    try:
        out, info = build(args.source, args.git_url, args.tag, args.out)
    except BuildError as error:
        sys.stderr.write(f"apache_bench: {error}\n")
        return 1
    use = f"--apache {info['tag']}" if out == default_dir(info["tag"]) else \
        f"--apache-classes {out}"
    sys.stdout.write(f"built {len(info['files'])} sources: {describe(info)} into "
                     f"{out / 'classes'}\nuse: python3 tools/bench_side_by_side.py {use}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
