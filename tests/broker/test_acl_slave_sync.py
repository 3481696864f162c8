"""A slave of an ACL master syncs the master's metadata when it signs with its own account
(innerClientAuthenticationCredentials), and not when it does not sign.

Method: real processes (pybroker/_testbase/ha_cluster.py): a master with aclEnable=true and a
plain_acl.yml holding an admin account and a producer account, a slave without ACL whose
broker.conf names the admin account as its inner credentials, a second slave without them.
A topic is created on the master with a signed admin request; the signing slave must learn it
(its SlaveSynchronize: GET_ALL_TOPIC_CONFIG every 10 s, 3 s after start), the other must be
refused by the master's ACL (logged there) and never learn it.
"""
import pytest

from pybroker._testbase.ha_cluster import HACluster
from pybroker.acl.signature import sign_request
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import create_request
from tests.ha_support import client_for, pull, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN = ("innerAdmin", "inner-admin-secret")
ACL_TEXT = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
TOPIC = "AclSyncedTopic"


def test_signed_slave_syncs_and_unsigned_slave_is_refused(tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_TEXT)
    cluster = HACluster(tmp_path, slaves_per_group=2)
    master, (signing, unsigned) = cluster.masters[0], cluster.slaves[0]
    for name, value in (("aclEnable", "true"), ("rocketmq.acl.plain.file", str(acl_file))):
        master.values[name] = value
    signing.values["innerClientAuthenticationCredentials"] = \
        f'{{"accessKey":"{ADMIN[0]}","secretKey":"{ADMIN[1]}"}}'
    for broker in (master, signing):
        with open(broker.conf_path, "w", encoding="utf-8") as out:
            out.writelines(f"{key}={value}\n" for key, value in broker.values.items())
    with cluster:
        request = create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "4",
            "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0", "order": "false"})
        sign_request(request.ext_fields, None, *ADMIN)
        with client_for(master.address) as client:
            assert client.invoke(request, 5000).code == ResponseCode.SUCCESS

        def knows(slave) -> bool:
            with client_for(slave.address) as client:
                return pull(client, TOPIC, 0, 0).code != ResponseCode.TOPIC_NOT_EXIST
        wait_for(lambda: knows(signing), 40, "the signing slave's topic sync", interval_s=0.5)
        refusal = f"ACL refused request code {int(RequestCode.GET_ALL_TOPIC_CONFIG)} from"
        wait_for(lambda: refusal in master.log_text(), 30,
                 "the master refusing the unsigned slave's sync")
        assert not knows(unsigned)
