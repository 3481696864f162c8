"""Every example of docs/client.md runs as written against a real broker and does what it says.

Method: read docs/client.md, take each ```python block preceded by its
``<!-- example: NAME; expect: TEXT -->`` marker (a python block without a marker fails the
collection check, so no example goes untested), and run it verbatim as ``python -c`` in a fresh
interpreter with ``NAMESRV_ADDR`` pointing at one `pybroker standalone` per module (free
loopback ports, store in a temp directory, 1 s transaction check interval so the check-back
example finishes quickly, enablePropertyFilter=true for the SQL92 example; the ACL and TLS
example gets a second broker with aclEnable, the doc's plain_acl.yml account and
tls.server.mode=enforcing with a throwaway CA whose file it is given). Each example
checks its own results with asserts; here it must exit 0 within its deadline and print the
text its marker promises.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pybroker._testbase import certs
from pybroker._testbase.cluster import StandaloneBroker

pytestmark = [pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "client.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+); expect: (.+?)(?:; broker: (secure))? -->\n"
                     r"```python\n(.*?)```", re.DOTALL)
EXAMPLE_TIMEOUT_S = 180
BROKER_OVERRIDES = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000",
                    "enablePropertyFilter": "true"}


def examples() -> list[tuple[str, str, str | None, str]]:
    """(name, expected output text, broker kind, code) of every example, in document order;
    kind "secure" runs against the ACL + TLS broker, None against the plain one."""
    return [match.groups() for match in EXAMPLE.finditer(DOC.read_text(encoding="utf-8"))]


def test_every_python_block_is_a_checked_example():
    text = DOC.read_text(encoding="utf-8")
    names = [name for name, _, _, _ in examples()]
    assert text.count("```python") == len(names)
    assert len(set(names)) == len(names)
    for feature in ("send-sync", "send-async", "send-oneway", "send-batch", "ordered", "delay",
                    "transaction", "push-clustering", "push-broadcasting", "filter",
                    "lite-pull-subscribe", "lite-pull-assign", "admin", "errors", "acl-tls"):
        assert feature in names


def test_the_transaction_demo_settings_are_the_ones_tested():
    """The doc's demo broker.conf for a quick check-back is what this module's broker runs."""
    text = DOC.read_text(encoding="utf-8")
    demo = re.search(r"printf '(.*?)' > demo\.conf", text)
    assert demo, "docs/client.md lost its transaction demo.conf"
    lines = demo.group(1).split("\\n")
    assert {key: value for key, _, value in (line.partition("=") for line in lines if line)} \
        == {key: BROKER_OVERRIDES[key] for key in ("transactionCheckInterval",
                                                   "transactionTimeOut")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with StandaloneBroker(tmp_path_factory.mktemp("client-docs"), BROKER_OVERRIDES) as running:
        yield running


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    """The broker the ACL and TLS example describes: aclEnable with the doc's account,
    tls.server.mode=enforcing with a throwaway CA (the example gets its path)."""
    missing = certs.openssl_missing()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("client-docs-secure")
    made = certs.make_certificates(work / "certs")
    acl_file = work / "plain_acl.yml"
    account = re.search(r"```yaml\n(accounts:\n  - accessKey: demoSecureClient\n.*?)```",
                        DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert account, "docs/client.md lost the plain_acl.yml account of its ACL example"
    acl_file.write_text(account.group(1))
    with StandaloneBroker(work, {
            "aclEnable": "true", "rocketmq.acl.plain.file": str(acl_file),
            "tls.server.mode": "enforcing", "tls.server.certPath": str(made.server_cert),
            "tls.server.keyPath": str(made.server_key)}) as running:
        yield running, made.ca_cert


@pytest.mark.timeout(EXAMPLE_TIMEOUT_S + 30)
@pytest.mark.parametrize("name, expected, kind, code", examples(),
                         ids=[e[0] for e in examples()])
def test_example_runs(request, tmp_path, name, expected, kind, code):
    env = dict(os.environ, HOME=str(tmp_path))
    if kind == "secure":
        broker, ca_file = request.getfixturevalue("secure_broker")
        env["ROCKETMQ_CA_FILE"] = str(ca_file)
    else:
        broker = request.getfixturevalue("broker")
    env["NAMESRV_ADDR"] = broker.namesrv_addr
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=EXAMPLE_TIMEOUT_S, env=env, cwd=tmp_path)
    assert run.returncode == 0, f"example {name} failed:\n{run.stdout}\n{run.stderr[-4000:]}"
    assert expected in run.stdout, f"example {name} printed:\n{run.stdout}"
