"""A cancelled request is cancelled: a client pool call cancelled at any step of a connection
attempt ends by CancelledError, whatever the attempt's own outcome in the same loop turn.

Why: on Python 3.11 ``asyncio.wait_for`` returns (or raises) its awaitable's result when the
cancellation of the waiting task meets that awaitable's end, and the cancellation is lost. The
client's connect used it: a controller-mode broker's role change cancelled its slave sync while a
connect to the old, dead master was being refused, the refusal was caught as an ordinary failed
round, the loop went on, and the supervisor's generation never ended (the rejoin failure of
tests/crash/test_controller_failover.py). The library now uses ``asyncio.timeout``
(tools/tidy.py bans ``wait_for`` under pybroker/).

The bound is ``pybroker.tasks.within``, not ``asyncio.timeout``, which refuses to run outside a
task: a remoting handler's first step runs before any task (remoting/server.py's eager request
tables), and a POP consumer's QUERY_ASSIGNMENT, which connects to the NameServer from its first
step, failed with RuntimeError (tests/client/test_pop_pybroker.py's Java push consumer in POP
mode, in the CI run at 4246e1d).

Method: a real refused connection on 127.0.0.1 (a port bound and closed), one pool call per
number of loop turns let run before ``cancel()``; every call whose ``cancel()`` was taken
(returned True) must end by CancelledError. With ``wait_for`` in the connect, the calls
cancelled four to six turns in ended by ConnectionRefusedError.
"""
import asyncio
import socket

import pytest

from pybroker.protocol.codes import RequestCode
from pybroker.protocol.command import create_request
from pybroker.remoting.client import RemotingClientPool
from pybroker.remoting.server import _resume
from pybroker.tasks import within

TURNS_MAX = 16


def _refused_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


async def _outcomes(address: str) -> dict[int, tuple[bool, str]]:
    loop = asyncio.get_running_loop()
    outcomes = {}
    for turns in range(TURNS_MAX):
        pool = RemotingClientPool()
        task = loop.create_task(pool.invoke(  # tidy: allow (awaited)
            address, create_request(RequestCode.GET_TIMER_CHECK_POINT, {}), 1000))
        for _ in range(turns):
            await asyncio.sleep(0)
        taken = task.cancel()
        try:
            await task
            outcome = "returned"
        except asyncio.CancelledError:
            outcome = "cancelled"
        except OSError as error:
            outcome = type(error).__name__
        finally:
            pool.close()
        outcomes[turns] = (taken, outcome)
    return outcomes


@pytest.mark.timeout(60)
def test_a_cancelled_pool_call_ends_cancelled_at_every_step_of_a_refused_connect():
    outcomes = asyncio.run(_outcomes(_refused_address()))
    lost = {turns: outcome for turns, (taken, outcome) in outcomes.items()
            if taken and outcome != "cancelled"}
    assert not lost, f"cancellations lost: {lost} (all: {outcomes})"
    # Both ends of the range were reached: cancelled before the refusal, and done before the
    # cancel (the refusal itself, not swallowed).
    assert outcomes[0] == (True, "cancelled"), outcomes
    assert outcomes[TURNS_MAX - 1] == (False, "ConnectionRefusedError"), outcomes


async def _resumed(coroutine, yielded):
    return await _resume(coroutine, yielded)


def test_within_bounds_returns_and_runs_in_an_eager_first_step():
    """Its answer, TimeoutError past the bound, and a first step outside any task (as the
    remoting server steps an eager handler: ``send(None)`` from a loop callback) that
    suspends instead of raising; a task then finishes it."""
    async def scenario():
        assert await within(asyncio.sleep(0.01, "done"), 5) == "done"
        with pytest.raises(TimeoutError):
            await within(asyncio.sleep(5), 0.05)
        loop = asyncio.get_running_loop()
        stepped = loop.create_future()

        def eager_step() -> None:
            assert asyncio.current_task() is None
            coroutine = within(asyncio.sleep(0.01, "eager"), 5)
            try:
                yielded = coroutine.send(None)
            except BaseException as error:  # noqa: BLE001 - the test reports it
                stepped.set_exception(AssertionError(f"the first step raised {error!r}"))
                return
            stepped.set_result((coroutine, yielded))
        loop.call_soon(eager_step)
        coroutine, yielded = await stepped
        # The server's way on from a suspended first step (a task resumes it).
        resumed = loop.create_task(_resumed(coroutine, yielded))  # tidy: allow (awaited)
        assert await resumed == "eager"
    asyncio.run(scenario())
