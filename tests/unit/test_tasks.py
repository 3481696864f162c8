# Tests of pybroker/tasks.py: watched tasks and guarded rounds of periodic services.
"""Goal: no background task or periodic round of pybroker ends silently - a task's end by an
error is logged with its traceback and handed to its owner, a failing round is logged with its
cause and retried, and only an invariant violation or too many failures in a row end a loop.
Method: real asyncio loops running small coroutines that raise, with the log captured.
"""
import asyncio
import logging

import pytest

from pybroker import tasks
from pybroker.errors import DurabilityError, ServiceFailedError, StoreCorruptError


def _errors(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.ERROR]


def test_a_task_ended_by_an_error_is_logged_and_handed_to_its_owner(caplog):
    failures: list[BaseException] = []

    async def broken():
        await asyncio.sleep(0)
        raise KeyError("gone")

    async def main():
        task = tasks.start_task(broken(), "the broken service", failures.append)
        with pytest.raises(KeyError):
            await task
    with caplog.at_level(logging.ERROR, logger="pybroker.tasks"):
        asyncio.run(main())
    assert [type(error) for error in failures] == [KeyError]
    [record] = _errors(caplog)
    assert "the broken service ended by an error" in record.getMessage()
    assert "gone" in record.getMessage() and record.exc_info[1] is failures[0]


def test_cancelled_and_finished_tasks_are_not_reported(caplog):
    failures: list[BaseException] = []

    async def main():
        finished = tasks.start_task(asyncio.sleep(0), "finishes", failures.append)
        waiting = tasks.start_task(asyncio.sleep(60), "waits", failures.append)
        await finished
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not tasks._running        # references dropped once done
    with caplog.at_level(logging.DEBUG, logger="pybroker.tasks"):
        asyncio.run(main())
    assert failures == [] and _errors(caplog) == []


def _round(rounds: tasks.Rounds, error: BaseException | None) -> None:
    with rounds:
        if error is not None:
            raise error


def test_failing_rounds_are_logged_and_retried_until_the_bound(caplog):
    rounds = tasks.Rounds("the service", retry_delay_s=7.0, failures_max=3)
    assert rounds.next_delay_s(0.5) == 0.5
    with caplog.at_level(logging.ERROR, logger="pybroker.tasks"):
        _round(rounds, RuntimeError("first"))
        assert rounds.next_delay_s(0.5) == 7.0
        _round(rounds, None)                           # a good round resets the count
        assert rounds.failures == 0 and rounds.next_delay_s(0.5) == 0.5
        _round(rounds, OSError("disk"))
        _round(rounds, ValueError("bad"))
        with pytest.raises(ServiceFailedError) as ended:
            _round(rounds, RuntimeError("third in a row"))
    assert isinstance(ended.value.__cause__, RuntimeError)
    assert "3 rounds in a row" in str(ended.value) and "third in a row" in str(ended.value)
    logged = _errors(caplog)
    assert [record.exc_info[1].args[0] for record in logged] == ["first", "disk", "bad"]
    assert all("the service: a round failed" in record.getMessage() for record in logged)
    assert rounds.failures_total == 4


@pytest.mark.parametrize("error", [AssertionError("position went back"),
                                   StoreCorruptError("bad record"),
                                   DurabilityError("fsync failed"),
                                   asyncio.CancelledError(), KeyboardInterrupt()])
def test_invariant_violations_and_cancellation_pass_at_once(error, caplog):
    rounds = tasks.Rounds("the service", failures_max=None)
    with caplog.at_level(logging.ERROR, logger="pybroker.tasks"):
        with pytest.raises(type(error)):
            _round(rounds, error)
    assert rounds.failures == 0 and _errors(caplog) == []


def test_a_client_loop_never_gives_up(caplog):
    rounds = tasks.Rounds("pulling", failures_max=None)
    with caplog.at_level(logging.ERROR, logger="pybroker.tasks"):
        for _ in range(tasks.ROUND_FAILURES_MAX * 3):
            _round(rounds, RuntimeError("again"))
    assert rounds.failures == tasks.ROUND_FAILURES_MAX * 3
    assert len(_errors(caplog)) == tasks.ROUND_FAILURES_MAX * 3


# --- unless_set: a start step a stop cuts short; within under an outer bound ---------------------

async def _hello(answer: asyncio.Future, ended: list) -> str:
    """A start step that waits for an answer (the metadata service's hello)."""
    try:
        return await answer
    except asyncio.CancelledError:
        ended.append("cancelled")
        raise


def test_unless_set_ends_the_step_when_the_stop_comes_first():
    async def scenario():
        loop = asyncio.get_running_loop()
        stop, answer, ended = asyncio.Event(), loop.create_future(), []
        loop.call_later(0.05, stop.set)
        started = loop.time()
        outcome = await tasks.unless_set(_hello(answer, ended), stop)
        return outcome, loop.time() - started, ended
    outcome, waited_s, ended = asyncio.run(scenario())
    # Fails when the step is awaited to its end: the answer never comes (the test's timeout).
    assert (outcome, ended) == (False, ["cancelled"]) and waited_s < 5


def test_unless_set_gives_the_step_its_outcome_when_it_ends_first():
    async def scenario(error):
        loop = asyncio.get_running_loop()
        stop, answer = asyncio.Event(), loop.create_future()
        if error is None:
            loop.call_soon(answer.set_result, "hello")
        else:
            loop.call_soon(answer.set_exception, error)
        outcome = await tasks.unless_set(_hello(answer, []), stop)
        return outcome, stop.is_set()
    assert asyncio.run(scenario(None)) == (True, False)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(scenario(ConnectionRefusedError("refused")))


def test_unless_set_with_the_stop_already_set_never_runs_the_step():
    async def scenario():
        stop, ran = asyncio.Event(), []
        stop.set()

        async def step():
            ran.append(True)
        return await tasks.unless_set(step(), stop), ran
    assert asyncio.run(scenario()) == (False, [])


def test_unless_set_passes_a_cancellation_of_its_caller_on_to_the_step():
    async def scenario():
        loop = asyncio.get_running_loop()
        stop, answer, ended = asyncio.Event(), loop.create_future(), []
        waiting = loop.create_task(tasks.unless_set(_hello(answer, ended), stop))  # tidy: allow
        for _ in range(3):
            await asyncio.sleep(0)
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            return "cancelled", ended
        return "returned", ended
    assert asyncio.run(scenario()) == ("cancelled", ["cancelled"])


def test_within_under_a_caught_cancellation_still_times_out():
    """A task whose earlier cancellation an outer handler caught (without uncancel) and went
    on: a later bound's expiry is a TimeoutError, not the caller's cancellation (within
    compares the caller's cancelling() with its count at entry, as asyncio.timeout does;
    fails when it asks cancelling() > 0)."""
    async def scenario():
        task = asyncio.current_task()
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass                                  # caught; task.cancelling() stays 1
        try:
            await tasks.within(asyncio.sleep(5), 0.01)
        except TimeoutError:
            return "timed out"
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"
    assert asyncio.run(scenario()) == "timed out"
