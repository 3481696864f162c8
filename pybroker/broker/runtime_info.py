# GET_BROKER_RUNTIME_INFO: Java's keys, meanings and string formats from the shared counters.
"""The runtime table mqadmin brokerStatus prints (Java 4.9.8 keys, plus 5.x putLatency99/999,
the ack pool's keys and the 5.x timer keys of pybroker/stats/timer_gauges.py).

Every figure is measured: store counters come from the instrument region (the appender's puts,
the remoting workers' reads), rates from the supervisor's sampler, positions from the control
block. Java keys pybroker cannot measure are left out rather than filled with a made-up value
(dispatchMaxBuffer, scheduleMessageOffset_<level>). pybroker has no thread-pool queues: the
requests a worker has received and not answered are the queue sizes, the age of the oldest
one the head wait. Formats follow Java: rates are ``Double.toString`` with an empty field for a
window not yet filled, putLatency99 ``%.2f``.

With ``statsInstrumentsEnable=false`` nothing is recorded, so every figure read from the
instrument region is left out (positions, disk and capacities stay), the pybroker key
``statsInstrumentsEnable`` reads ``false``, and the five TPS keys read ``NaN NaN NaN`` (Java's
Double.toString of not-a-number): mqadmin 4.9.8's clusterList splits them without a null
check.
"""
import os
import time

from pybroker.broker.context import BrokerContext
from pybroker.protocol import constants
from pybroker._fast.stats import StatsCounter as C
from pybroker.stats.service import PUT_DISTRIBUTE_DESC, histogram_percentile
from pybroker.stats.timer_gauges import TimerGauges
from pybroker.stats.windows import java_double
from pybroker.store import paths
from pybroker.store.message_store import human_readable_bytes

__all__ = ["runtime_info", "disk_used_ratio", "format_runtime"]

# Java BrokerConfig's default queue capacities (pybroker has no thread pools to size).
_POOL_CAPACITIES = {"sendThreadPoolQueueCapacity": "10000",
                    "pullThreadPoolQueueCapacity": "100000",
                    "queryThreadPoolQueueCapacity": "20000",
                    "EndTransactionThreadPoolQueueCapacity": "100000",
                    "ackThreadPoolQueueCapacity": "100000"}
_QUEUES = {"sendThreadPoolQueueSize": (C.SEND_STARTED, C.SEND_FINISHED),
           "pullThreadPoolQueueSize": (C.PULL_STARTED, C.PULL_FINISHED),
           "queryThreadPoolQueueSize": (C.QUERY_STARTED, C.QUERY_FINISHED),
           "EndTransactionQueueSize": (C.TRANSACTION_STARTED, C.TRANSACTION_FINISHED),
           "ackThreadPoolQueueSize": (C.ACK_STARTED, C.ACK_FINISHED)}
# Java's head wait of each pool queue: here the age of the oldest unanswered request.
_HEAD_WAITS = {"sendThreadPoolQueueHeadWaitTimeMills": C.SEND_OLDEST_MS,
               "pullThreadPoolQueueHeadWaitTimeMills": C.PULL_OLDEST_MS,
               "queryThreadPoolQueueHeadWaitTimeMills": C.QUERY_OLDEST_MS,
               "ackThreadPoolQueueHeadWaitTimeMills": C.ACK_OLDEST_MS}
# Rates mqadmin clusterList parses without a null check (kept, as NaN, with the instruments off).
_TPS_KEYS = ("putTps", "getFoundTps", "getMissTps", "getTotalTps", "getTransferedTps")
# Keys read from the instrument region's sections (left out with the instruments off).
_MEASURED_BROKER_KEYS = ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                         "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning",
                         "msgGetTotalTodayMorning", "msgGetTotalTodayNow",
                         "pageCacheLockTimeMills", *_QUEUES, *_HEAD_WAITS)
# Java TransientStorePool.availableBufferNums() when the pool is off.
_NO_TRANSIENT_POOL = str(2 ** 31 - 1)


def disk_used_ratio(path: str) -> float:
    """Java UtilAll.getDiskPartitionSpaceUsedPercent: used / (used + usable), rounded up to a
    percent, as a fraction; -1 when the path does not exist."""
    try:
        disk = os.statvfs(path)
    except OSError:
        return -1.0
    total = disk.f_blocks * disk.f_frsize
    if total <= 0:
        return -1.0
    used = total - disk.f_bfree * disk.f_frsize
    entire = used + disk.f_bavail * disk.f_frsize
    round_up = 1 if used * 100 % entire else 0
    return (used * 100 // entire + round_up) / 100.0


def format_runtime(elapsed_ms: int) -> str:
    """Java's "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
    seconds_total = elapsed_ms // 1000
    days, rest = divmod(seconds_total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def _store_figures(service, snapshot) -> dict[str, str]:
    counter = snapshot.counter
    put_total = counter(C.PUT_MESSAGES)
    put_bytes = counter(C.PUT_BYTES)
    distribute, latency = service.last_minute(snapshot)
    rates = service.rates
    total_tps = " ".join(java_double((rates["get_found"].rate(seconds) or 0.0)
                                     + (rates["get_miss"].rate(seconds) or 0.0))
                         for seconds in (10, 60, 600))
    boot_ms = service.region.boot_ms
    return {
        "bootTimestamp": str(boot_ms),
        "runtime": format_runtime(time.time_ns() // 1_000_000 - boot_ms),
        "putMessageEntireTimeMax": str(counter(C.PUT_ENTIRE_TIME_MAX_MS)),
        "putMessageTimesTotal": str(put_total),
        "putMessageFailedTimes": str(counter(C.PUT_FAILED)),
        "putMessageSizeTotal": str(put_bytes),
        "putMessageAverageSize": java_double(put_bytes / put_total if put_total else 0.0),
        "putMessageDistributeTime": "".join(f"{name}:{int(count)} " for name, count
                                            in zip(PUT_DISTRIBUTE_DESC, distribute, strict=True)),
        "getMessageEntireTimeMax": str(counter(C.GET_ENTIRE_TIME_MAX_MS)),
        "getMessageTimesTotalFound": str(counter(C.GET_FOUND)),
        "getMessageTimesTotalMiss": str(counter(C.GET_MISS)),
        "getMessageTransferedMsgCount": str(counter(C.GET_TRANSFERRED_MESSAGES)),
        "putTps": rates["put"].java_text(),
        "getFoundTps": rates["get_found"].java_text(),
        "getMissTps": rates["get_miss"].java_text(),
        "getTotalTps": total_tps,
        "getTransferedTps": rates["transferred"].java_text(),
        # The put latency histogram is in µs; Java prints milliseconds.
        "putLatency99": f"{histogram_percentile(latency, 0.99) / 1000:.2f}",
        "putLatency999": f"{histogram_percentile(latency, 0.999) / 1000:.2f}",
    }


def _broker_figures(service, snapshot, control) -> dict[str, str]:
    morning = service.morning
    counter = snapshot.counter
    info = {
        "msgPutTotalYesterdayMorning": str(morning["put_yesterday"]),
        "msgPutTotalTodayMorning": str(morning["put_today"]),
        "msgPutTotalTodayNow": str(counter(C.PUT_MESSAGES)),
        "msgGetTotalYesterdayMorning": str(morning["get_yesterday"]),
        "msgGetTotalTodayMorning": str(morning["get_today"]),
        "msgGetTotalTodayNow": str(counter(C.GET_TRANSFERRED_MESSAGES)),
    }
    info.update(_POOL_CAPACITIES)
    for key, (started, finished) in _QUEUES.items():
        info[key] = str(max(counter(started) - counter(finished), 0))
    now_ms = time.time_ns() // 1_000_000
    for key, index in _HEAD_WAITS.items():
        starts = [int(start) for start in snapshot.counters[:, index] if start]
        info[key] = str(max(now_ms - min(starts), 0) if starts else 0)
    written = control.written_position
    # Java's ReputMessageService.behind: the confirm offset less the reput offset.
    info["dispatchBehindBytes"] = str(max(control.confirm_offset()
                                          - control.dispatched_position, 0))
    info["remainHowManyDataToFlush"] = human_readable_bytes(
        max(written - control.flushed_position, 0))
    begin_ms = counter(C.PAGE_CACHE_LOCK_BEGIN_MS)
    info["pageCacheLockTimeMills"] = str(
        max(time.time_ns() // 1_000_000 - begin_ms, 0) if begin_ms else 0)
    info["remainTransientStoreBufferNumbs"] = _NO_TRANSIENT_POOL
    return info


def _disk_figures(config) -> dict[str, str]:
    store = config.store
    root = store.store_path_root_dir
    commitlog_dir = store.store_path_commit_log or paths.commitlog_dir(root)
    ratio = disk_used_ratio(commitlog_dir)
    info = {"commitLogDiskRatio": java_double(ratio),
            f"commitLogDiskRatio_{commitlog_dir}": java_double(ratio),
            "consumeQueueDiskRatio": java_double(disk_used_ratio(
                paths.consume_queue_root(root)))}
    try:
        disk = os.statvfs(root)
        info["commitLogDirCapacity"] = (
            f"Total : {human_readable_bytes(disk.f_blocks * disk.f_frsize)}, "
            f"Free : {human_readable_bytes(disk.f_bavail * disk.f_frsize)}.")
    except OSError:
        pass    # Java leaves the key out when the directory does not exist
    return info


# The timer's gauges of the context last asked for (its store, config and statistics): the
# wheel stays mapped between requests, so a brokerStatus opens no file (issue #28 item 5).
_TIMER_GAUGES: list[tuple[tuple[object, object, object], TimerGauges]] = []


def _timer_gauges(ctx: BrokerContext, service) -> TimerGauges:
    key = (ctx.store, ctx.config, service)
    if _TIMER_GAUGES:
        known, gauges = _TIMER_GAUGES[0]
        if all(mine is theirs for mine, theirs in zip(known, key, strict=True)):
            return gauges
        gauges.close()
        _TIMER_GAUGES.clear()
    gauges = TimerGauges(ctx.config, lambda: service.control, ctx.store)
    _TIMER_GAUGES.append((key, gauges))
    return gauges


def runtime_info(ctx: BrokerContext) -> dict[str, str]:
    """The GET_BROKER_RUNTIME_INFO table of a broker whose ``ctx.stats_service`` is the
    supervisor's StatsService (its ``control()`` is the running generation's)."""
    service = ctx.stats_service
    assert service is not None, "runtime_info needs the supervisor's statistics"
    snapshot = service.region.snapshot()
    store_info = ctx.store.runtime_info()
    version = constants.CURRENT_VERSION
    info = {"brokerVersionDesc": version.name, "brokerVersion": str(int(version)),
            "commitLogMinOffset": store_info["commitLogMinOffset"],
            "commitLogMaxOffset": str(service.control.written_position),
            "earliestMessageTimeStamp": store_info["earliestMessageTimeStamp"],
            # Java's BrokerConfig default: sends are accepted from the start (no such setting).
            "startAcceptSendRequestTimeStamp": "0"}
    store_figures = _store_figures(service, snapshot)
    broker_figures = _broker_figures(service, snapshot, service.control)
    if not service.region.enabled:
        # Untouched zeros are not measurements: keep what the control block and the disk
        # say, drop what the (unrecorded) instruments would.
        store_figures = {key: store_figures[key] for key in ("bootTimestamp", "runtime")}
        store_figures.update({key: "NaN NaN NaN" for key in _TPS_KEYS})
        for key in _MEASURED_BROKER_KEYS:
            broker_figures.pop(key, None)
        info["statsInstrumentsEnable"] = "false"
    info.update(store_figures)
    info.update(broker_figures)
    info.update(_disk_figures(ctx.config))
    # pybroker's: the scrubber's progress and findings, and reads that met a damaged record.
    if service.scrubber_status is not None:
        info.update(service.scrubber_status())
    if service.region.enabled:
        info["damagedRecordsRead"] = str(snapshot.counter(C.DAMAGED_RECORDS_READ))
    info.update(_timer_gauges(ctx, service).runtime_info())
    store = ctx.config.store
    if store.transient_store_pool_active:
        # Java's availableBufferNums(): one buffer is attached to the file being written and
        # the rest stay free, since a rolled file is committed whole before its successor
        # takes one (pybroker/store/transient_pool.py).
        info["remainTransientStoreBufferNumbs"] = str(store.transient_store_pool_size - 1)
    return info
