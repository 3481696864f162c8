"""The completion wake-up in C (pybroker/_fast/send/round.pyx) loses nothing and decides as the
Python side would.

Method: test_send_fast.py's fast send side (a real RingPutter over real shared-memory rings, the
stand-in appender, a RemotingConnection over a fake transport), its completion wake-up driven
two ways with the same seeded schedule: as before (every wake-up Python's: ``RingPutter.on_wake``
then ``on_wake(moved)``, the reference) and through :class:`CompletionRound` calling the real
``Attachment._wake``. The schedule mixes fast sends, Python path sends (delay messages: the
handler's put), a completion ring of 4 slots (puts wait for space: ``python_waiting``), ACK
answers queued between wake-ups (the ACK port's dict, as ``FastAckPort.answer`` fills it), held
pulls / POPs coming and going and the dispatched position moving. Checked: the answers equal
the reference's by opaque, every send answered, every ACK answer written once in order, every
wake-up that finds a request held calls ``on_wake`` with ``moved`` as the reference's, some
wake-ups needed no Python. The round's "Python first" question against the Python conditions
it twins, and ``HeldRequests`` against the worker's former Python question, on seeded states.
The read-only store: a read sees the dispatched position with no wake-up at all.
"""
import asyncio
import random
import types

import pytest

from pybroker._fast.send.round import CompletionRound, HeldRequests
from pybroker.proc.dataplane import Attachment
from pybroker.store.control_block import ControlBlock
from pybroker.store.read_only_store import MessageStoreReader
from tests.unit.broker.test_send_fast import Side, feed, frame, responses

pytestmark = pytest.mark.unit

_SEEDS = range(40)


def _python_holds(holders) -> bool:
    """The worker's question as it was written in Python (proc/remoting.py _holds_requests)."""
    for holder in holders:
        if holder.held_count > 0:
            return True
    return False


def _schedule(rand: random.Random) -> list:
    steps = []
    for _ in range(rand.randrange(30, 90)):
        kind = rand.choices(["fast", "python", "ack", "hold", "dispatch", "append", "wake",
                             "turn"], [6, 2, 2, 2, 3, 4, 5, 3])[0]
        if kind == "fast":
            steps.append(("feed", frame(rand.choice(["binary", "json310", "go"]),
                                        body=b"m%d" % rand.randrange(1000))))
        elif kind == "python":
            steps.append(("feed", frame("binary", properties="DELAY\x013\x02")))
        elif kind == "ack":
            steps.append(("ack", b"ack-%d;" % rand.randrange(1 << 30)))
        elif kind == "hold":
            steps.append(("hold", rand.randrange(2), rand.choice([0, 0, 1, 2])))
        elif kind == "dispatch":
            steps.append(("dispatch", rand.randrange(1, 5000)))
        else:
            steps.append((kind,))
    return steps


def _run(tmp_path, name: str, steps: list, in_c: bool, mutate=None) -> dict:
    side = Side(tmp_path, name, True, slots=4)
    try:
        return asyncio.run(_drive(side, steps, in_c, mutate))
    finally:
        side.close()


def _ack_port(putter) -> tuple[dict, list]:
    """An ACK port's answers as FastAckPort keeps them: (queued by connection, written)."""
    acks: dict = {}
    written_acks: list = []

    def flush() -> None:            # FastAckPort._flush_answers' shape
        if acks:
            answers = list(acks.items())
            acks.clear()
            for _, frames in answers:
                written_acks.append(b"".join(frames))
    putter.add_answers_flush(flush, acks)
    return acks, written_acks


async def _drive(side: Side, steps: list, in_c: bool, mutate) -> dict:
    connection, transport = side.connect()
    side.refresh()
    putter = side.putter
    acks, written_acks = _ack_port(putter)
    holders = [types.SimpleNamespace(held_count=0), types.SimpleNamespace(held_count=0)]
    dispatched = [0]
    calls: list = []        # (held, moved) of every on_wake(moved)
    wakes: list = []        # per wake-up: (held, the reference's moved)
    last_seen = [0]

    def on_wake(moved: bool) -> None:
        calls.append((_python_holds(holders), moved))

    attachment = types.SimpleNamespace(putter=putter, _on_wake=on_wake)
    wake_round = CompletionRound(putter.round_core, lambda: dispatched[0], 0,
                                 HeldRequests(holders), putter.answers_pending,
                                 lambda *args: Attachment._wake(attachment, *args))
    if mutate is not None:
        mutate(wake_round)

    def wake() -> None:
        held = _python_holds(holders)
        moved = dispatched[0] != last_seen[0]
        last_seen[0] = dispatched[0]
        wakes.append((held, moved, len(calls)))
        if in_c:
            wake_round()
        else:
            putter.on_wake()
            on_wake(moved)
        assert not acks, "an ACK answer queued before the wake-up was not written by it"

    queued_acks = []
    for step in steps:
        if step[0] == "feed":
            feed(connection, step[1])
        elif step[0] == "ack":
            acks.setdefault("connection", []).append(step[1])
            queued_acks.append(step[1])
        elif step[0] == "hold":
            holders[step[1]].held_count = step[2]
        elif step[0] == "dispatch":
            dispatched[0] += step[1]
        elif step[0] == "append":
            side.appender.run()
        elif step[0] == "wake":
            wake()
        else:
            await asyncio.sleep(0)
    for _ in range(300):
        for _ in range(3):
            await asyncio.sleep(0)
        side.appender.run()
        wake()
        for _ in range(3):
            await asyncio.sleep(0)
        if putter.core.inflight == 0 and not connection.handler_tasks \
                and not connection._frames_held and not acks:
            break
    else:
        raise AssertionError("sends or answers still waiting after 300 wake-ups")
    assert not transport.aborted
    return {"answers": responses(bytes(transport.written)), "acks": written_acks,
            "queued_acks": queued_acks, "calls": calls, "wakes": wakes,
            "requests": side.appender.requests, "round": wake_round,
            "fast": putter.core.fast_puts_total}


def _check_against_reference(tmp_path, seed: int, mutate=None) -> dict:
    steps = _schedule(random.Random(seed))
    expected = _run(tmp_path, f"python{seed}", steps, False)
    got = _run(tmp_path, f"c{seed}", steps, True, mutate)
    assert got["answers"] == expected["answers"], seed
    assert got["requests"] == expected["requests"], seed
    assert got["fast"] == expected["fast"], seed
    # Every ACK answer written once, in order (batched differently is allowed).
    assert b"".join(got["acks"]) == b"".join(got["queued_acks"]), seed
    # Every wake-up that found a request held ran on_wake with the reference's moved.
    for index, (held, moved, calls_before) in enumerate(got["wakes"]):
        if held:
            after = got["wakes"][index + 1][2] if index + 1 < len(got["wakes"]) \
                else len(got["calls"])
            assert got["calls"][calls_before:after] == [(True, moved)], (seed, index)
    return got


@pytest.mark.parametrize("seed", _SEEDS)
def test_seeded_schedules_lose_nothing(tmp_path, seed):
    got = _check_against_reference(tmp_path, seed)
    sends = len(got["answers"])
    assert sends > 0 and got["fast"] > 0


def test_the_schedules_take_both_ways(tmp_path):
    """Over the seeds some wake-ups needed no Python and some did (the test covers both)."""
    c_rounds = python_rounds = 0
    for seed in range(6):
        got = _check_against_reference(tmp_path, seed)
        c_rounds += got["round"].c_rounds
        python_rounds += got["round"].python_rounds
    assert c_rounds > 0 and python_rounds > 0


def test_python_first_twins_the_python_conditions(tmp_path):
    """CompletionRound's Python-first question equals the Python side's conditions on seeded
    states: puts wait for ring space (RingPutter._space_waiters), an ACK answer queued
    (FastAckPort._flush_answers' test), a request held (the former _holds_requests)."""
    side = Side(tmp_path, "twin", True, slots=4)
    try:
        async def main():
            putter = side.putter
            answers = [{}, {}]
            for pending in answers:
                putter.add_answers_flush(lambda: None, pending)
            holders = [types.SimpleNamespace(held_count=0) for _ in range(3)]
            held = HeldRequests(holders)
            wake_round = CompletionRound(putter.round_core, lambda: 0, 0, held,
                                         putter.answers_pending, lambda *args: None)
            rand = random.Random(20261207)
            for _ in range(2000):
                move = rand.randrange(4)
                if move == 0:
                    if rand.randrange(2):
                        putter.wait_for_space()
                    else:
                        putter._wake_space_waiters()
                elif move == 1:
                    pending = answers[rand.randrange(2)]
                    if rand.randrange(2):
                        pending[rand.randrange(3)] = [b"x"]
                    else:
                        pending.clear()
                else:
                    holders[rand.randrange(3)].held_count = rand.choice([0, 0, 1, 3])
                expected = bool(putter._space_waiters) or any(answers) \
                    or _python_holds(holders)
                assert wake_round.python_first_now() == expected
                assert held() == _python_holds(holders)
            putter._wake_space_waiters()
        asyncio.run(main())
    finally:
        side.close()


def test_sync_flush_and_slaves_are_pythons(tmp_path):
    """Without a send path it may drain (SYNC_FLUSH holds acknowledgements in Python; a
    slave has none) every wake-up is Python's."""
    side = Side(tmp_path, "sync", True, {"flushDiskType": "SYNC_FLUSH"})
    try:
        assert side.putter.round_core is None
        seen = []
        wake_round = CompletionRound(None, lambda: 7, 0, None, [],
                                     lambda *args: seen.append(args))
        wake_round()
        wake_round()
        assert seen == [(None, None, True), (None, None, False)]
        assert wake_round.python_rounds == 2 and wake_round.c_rounds == 0
    finally:
        side.close()


def test_reads_see_the_dispatched_position_without_a_wake_up(tmp_path):
    """The wake-up no longer advances the read-only store: its reads catch up from the live
    positions (MessageStoreReader._catch_up), as the Attachment wires it."""
    control = ControlBlock(str(tmp_path / "control"), create=True)
    store = tmp_path / "store"
    from pybroker.config import load_broker_config
    config = load_broker_config(None, {"storePathRootDir": str(store)})
    (store / "commitlog").mkdir(parents=True)
    reader = MessageStoreReader(
        config.store, control.dispatched_position,
        positions=control.two_loader("dispatched_position", "written_position"))
    try:
        control.publish("written_position", 8192)
        control.publish("dispatched_position", 4096)
        assert reader.fast_positions()[:2] == (4096, 8192)
    finally:
        reader.close()
        control.close()


def test_the_ack_ports_answers_are_emptied_in_place():
    """The round watches the ACK port's dict itself (RingPutter.add_answers_flush): a flush
    that replaced it would leave the round looking at a dict nobody fills."""
    from pybroker.proc.ack_port import FastAckPort
    written = []
    answers = {written.append: [b"a", b"b"], (lambda frames: written.append(frames)): [b"c"]}
    port = types.SimpleNamespace(_answers=answers)
    FastAckPort._flush_answers(port)
    assert port._answers is answers and not answers
    assert sorted(written) == [b"ab", b"c"]
