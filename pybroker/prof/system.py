# The kernel's side of a profile: dirty/writeback memory, vm.dirty_* settings, disk and processes.
"""Figures the kernel keeps about the page cache, the store's disk and the broker's processes.

Each function reads /proc or /sys once (a few hundred microseconds); the sampler calls them
once a second. Byte figures are bytes, times are seconds unless the name says otherwise.
"""
import os

import psutil

__all__ = ["memory_figures", "vm_settings", "store_device", "disk_figures", "process_figures"]

_VM_SETTINGS = ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes",
                "dirty_expire_centisecs", "dirty_writeback_centisecs")
_MEMINFO_KEYS = {"Dirty": "dirty_bytes", "Writeback": "writeback_bytes", "Cached": "cached_bytes",
                 "MemAvailable": "available_bytes", "MemTotal": "total_bytes"}
_VMSTAT_KEYS = ("nr_dirty", "nr_writeback", "nr_dirtied", "nr_written", "pgmajfault",
                "pgfault", "pgpgin", "pgpgout")


def memory_figures() -> dict[str, int]:
    """Dirty, writeback, cached and available memory (/proc/meminfo, bytes) and the page
    counters of /proc/vmstat (nr_dirty, nr_writeback, nr_dirtied, nr_written, faults)."""
    figures: dict[str, int] = {}
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(":")
            key = _MEMINFO_KEYS.get(name)
            if key is not None:
                figures[key] = int(rest.split()[0]) * 1024
    with open("/proc/vmstat", encoding="ascii") as vmstat:
        for line in vmstat:
            name, _, value = line.partition(" ")
            if name in _VMSTAT_KEYS:
                figures[name] = int(value)
    return figures


def vm_settings() -> dict[str, int]:
    """The vm.dirty_* settings (/proc/sys/vm) that decide when the kernel writes back."""
    settings = {}
    for name in _VM_SETTINGS:
        try:
            with open(f"/proc/sys/vm/{name}", encoding="ascii") as setting:
                settings[name] = int(setting.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return settings


def store_device(path: str) -> str | None:
    """The block device (name as in /proc/diskstats) holding ``path``, or None (tmpfs,
    overlay without a backing device)."""
    device = os.stat(path).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/uevent",
                  encoding="ascii") as uevent:
            for line in uevent:
                if line.startswith("DEVNAME="):
                    return line.strip().split("=", 1)[1]
    except OSError:
        return None
    return None


def disk_figures(device: str | None) -> dict[str, int] | None:
    """Cumulative I/O of ``device``: bytes and requests read and written, ms busy."""
    if device is None:
        return None
    counters = psutil.disk_io_counters(perdisk=True).get(device)
    if counters is None:
        return None
    return {"read_bytes": counters.read_bytes, "write_bytes": counters.write_bytes,
            "read_count": counters.read_count, "write_count": counters.write_count,
            "busy_ms": getattr(counters, "busy_time", 0)}


def _faults(pid: int) -> tuple[int, int]:
    """(minor, major) page faults of ``pid`` (/proc/<pid>/stat fields 10 and 12)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[7]), int(fields[9])


def process_figures(pid: int) -> dict[str, float] | None:
    """CPU seconds, RSS, page faults and context switches of ``pid`` (cumulative), or None
    when it is gone."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            cpu = process.cpu_times()
            rss = process.memory_info().rss
            switches = process.num_ctx_switches()
        minor, major = _faults(pid)
    except (psutil.Error, OSError):
        return None
    return {"pid": pid, "cpu_user_s": cpu.user, "cpu_system_s": cpu.system, "rss_bytes": rss,
            "minor_faults": minor, "major_faults": major,
            "voluntary_switches": switches.voluntary,
            "involuntary_switches": switches.involuntary}
