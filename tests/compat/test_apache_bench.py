"""tools/apache_bench.py builds benchmark classes from any git URL and from a checkout, against
the client jars of the tag's version, and refuses what it cannot build, in one line.

Method: Apache's source is not reachable from CI, so each test makes a real git repository in
a temporary folder laid out like RocketMQ's (a pom.xml naming rocketmq-all 4.9.8, and under
example/.../benchmark four small classes of our own that call the official client API, so javac
needs the 4.9.8 client jars), tags it rocketmq-all-4.9.8, moves the branch on past the tag, and
runs the tool's CLI against it as a path, a file:// URL and a bare clone; the compiled classes
must load in a JVM on the client jars, build.json must name the tag's commit (not the branch's)
and each file's sha256, and bench_side_by_side must accept the folder as its Apache load. With
PYBROKER_ROCKETMQ_GIT set (a git URL or path of apache/rocketmq), both real tags are built too.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests import peers

pytestmark = [pytest.mark.compat]
ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "apache_bench.py"
BENCHMARK = "example/src/main/java/org/apache/rocketmq/example/benchmark"
CLASS = """package org.apache.rocketmq.example.benchmark;

import org.apache.rocketmq.client.producer.DefaultMQProducer;

public class {name} {{
    public static void main(String[] args) {{
        System.out.println("{name} " + new DefaultMQProducer("g").getProducerGroup());
    }}
}}
"""


def _git(*args, cwd=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          timeout=120).stdout.strip()


@pytest.fixture
def source_repo(tmp_path):
    """A RocketMQ-shaped repository tagged rocketmq-all-4.9.8, its branch one commit past it."""
    repo = tmp_path / "rocketmq"
    (repo / BENCHMARK).mkdir(parents=True)
    (repo / "pom.xml").write_text("<project>\n  <artifactId>rocketmq-all</artifactId>\n  "
                                  "<version>4.9.8</version>\n</project>\n")
    for name in ("Producer", "Consumer", "BatchProducer", "TransactionProducer"):
        (repo / BENCHMARK / f"{name}.java").write_text(CLASS.format(name=name))
    _git("init", "-q", str(repo))
    _git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "4.9.8", cwd=repo)
    _git("tag", "rocketmq-all-4.9.8", cwd=repo)
    tagged = _git("rev-parse", "HEAD", cwd=repo)
    (repo / BENCHMARK / "Producer.java").write_text("does not compile")
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "later", cwd=repo)
    return repo, tagged


def _tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, timeout=900)


def test_build_from_any_git_url_takes_the_tag_and_compiles_on_the_client_jars(
        source_repo, tmp_path):
    install = peers.java_install("4.9.8")
    repo, tagged = source_repo
    bare = tmp_path / "bare.git"
    _git("clone", "-q", "--bare", str(repo), str(bare))
    for url, out in ((repo, tmp_path / "a"), (bare.as_uri(), tmp_path / "b"),
                     (bare, tmp_path / "c")):
        run = _tool("build", "--git", url, "--tag", "rocketmq-all-4.9.8", "-o", out)
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"--apache-classes {out}" in run.stdout
        build = json.loads((out / "build.json").read_text())
        assert build["commit"] == tagged and build["tag"] == "rocketmq-all-4.9.8"
        assert build["source"] == str(url) and build["client_jars"] == str(install.lib_dir)
        assert build["files"]["Producer.java"] == hashlib.sha256(
            (out / "src" / "Producer.java").read_bytes()).hexdigest()
    assert not list(tmp_path.glob("fetch-*")), "scratch repositories are removed"
    java = peers.java_rocketmq.JavaRocketMQ(tmp_path / "java", install)
    ran = java.run_class("org.apache.rocketmq.example.benchmark.Consumer", timeout_s=120,
                         extra_classpath=[tmp_path / "a" / "classes"])
    assert ran.returncode == 0 and ran.stdout.strip() == "Consumer g", ran.stdout + ran.stderr
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_side_by_side as driver

    class Args:
        apache, apache_classes = None, tmp_path / "b"
    classes, info = driver.apache_load(Args)
    assert classes == tmp_path / "b" / "classes" and info["commit"] == tagged
    assert "rocketmq-all-4.9.8" in driver.load_info(classes, info, "4.9.8")["text"]


def test_build_refuses_what_it_cannot_build_in_one_line(source_repo, tmp_path):
    peers.java_install("4.9.8")
    repo, _ = source_repo
    cases = [(("--git", repo, "--tag", "rocketmq-all-5.3.3"), "rocketmq-all-5.3.3"),
             (("--git", tmp_path / "missing", "--tag", "rocketmq-all-4.9.8"),
              "does not appear to be a git repository"),
             (("--source", repo), "javac failed on rocketmq-all-4.9.8"),   # the branch's tree
             (("--source", tmp_path), "has no pom.xml"),
             (("--git", repo), "--git needs --tag")]
    for args, expected in cases:
        run = _tool("build", *args, "-o", tmp_path / "out")
        assert run.returncode == 1, (args, run.stdout, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("apache_bench: "), run.stderr
        assert expected in lines[0], (args, lines)
    assert not list(tmp_path.glob("out*")), "nothing is left of a failed build"


@pytest.mark.slow
@pytest.mark.parametrize("tag", ["rocketmq-all-4.9.8", "rocketmq-all-5.3.3"])
def test_build_of_apache_sources(tmp_path, tag):
    url = os.environ.get("PYBROKER_ROCKETMQ_GIT")
    if not url:
        pytest.skip("PYBROKER_ROCKETMQ_GIT (a git URL or path of apache/rocketmq) is not set")
    peers.java_install(tag.rsplit("-", 1)[1])
    run = _tool("build", "--git", url, "--tag", tag, "-o", tmp_path / "out")
    assert run.returncode == 0, run.stdout + run.stderr
    classes = tmp_path / "out" / "classes" / "org" / "apache" / "rocketmq" / "example" / \
        "benchmark"
    expected = ["Producer", "Consumer", "BatchProducer", "TransactionProducer"]
    if tag.endswith("5.3.3"):
        expected += ["timer/TimerProducer", "timer/TimerConsumer"]
    assert all((classes / f"{name}.class").is_file() for name in expected)
