"""Seeded property (issue #22 item 4): one random damage to one store file, then a restart must
refuse naming the damaged file or serve every acknowledged message the damage did not destroy.

Method: a real `pybroker standalone` (SYNC_FLUSH, 64 KiB CommitLog files, 48-unit queue files,
small index files) takes 400 acknowledged sends over four queues, then is killed with SIGKILL
(one snapshot of the store, abort file present) and restarted and stopped cleanly (a second
snapshot). Each case copies a snapshot and applies one damage chosen by the seeded generator -
a bit flip, 4 or 512 zeroed bytes, a truncation, a removed file - to a random file of a random
kind: CommitLog, ConsumeQueue, IndexFile, checkpoint, abort, the config JSON documents. The
restart runs the broker's own code in this process (the metadata documents as the supervisor
loads them, then MessageStore recovery and dispatch) and reads every queue back like a
consumer; a few cases also restart a real broker process and pull over the wire
(pybroker/_testbase/damage.py). A refusal must name the damaged file (derived files never
refuse); otherwise every acknowledged message whose record bytes the damage did not touch must
be served at its queue offset with its body, and nothing may crash. The fault table (damage
kind x file kind: cases, refused, served, destroyed, lost) is printed; tools/damage_table.py
runs more. ``--damage-cases N`` (default 300), ``--damage-broker-cases N`` (default 3),
``--seed S`` replays a run.
"""
import random

import pytest

from pybroker._testbase.damage import build_store, run_cases

pytestmark = [pytest.mark.crash, pytest.mark.slow, pytest.mark.timeout(900)]

MESSAGES = 400
BUILD_SEED = 20261205


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_store(str(tmp_path_factory.mktemp("damage-store")), MESSAGES,
                       random.Random(BUILD_SEED))


def test_every_single_damage_is_refused_by_name_or_costs_only_what_it_hit(
        built, rand, tmp_path, request):
    cases = request.config.getoption("--damage-cases")
    broker_cases = request.config.getoption("--damage-broker-cases")
    table, broker_table, problems = run_cases(built, rand, cases, broker_cases, str(tmp_path))
    print(f"\n{rand!r}, {cases} cases, restarted in process:\n{table.markdown()}\n"  # noqa: T201
          f"{broker_cases} of them restarted as a real broker too:\n{broker_table.markdown()}")
    assert not problems, f"{rand!r}\n" + "\n".join(problems[:20])
