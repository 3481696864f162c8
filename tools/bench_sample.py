# Per-process figures of a broker under load: CPU, context switches, PSS (benchmark driver).
"""Samples of a broker's process tree taken at the edges of a measured window, and the figures
per message computed from two of them.

* CPU: user+system seconds per process (psutil; every thread of the process).
* Context switches: voluntary + involuntary, summed over every thread of the process
  (``/proc/<pid>/task/*/status``; psutil reads only the main thread's counts, which misses a
  JVM's worker threads).
* PSS (proportional set size, ``/proc/<pid>/smaps_rollup``): a page shared by n processes counts
  1/n in each, so the sum over a broker's processes is its real memory, where the sum of RSS
  counts every page shared between pybroker's forked processes (mapped store files, rings) once
  per process. Split into anonymous (heaps), file-backed (mapped store files, libraries) and
  shared memory.

A process is named by its role: pybroker's workers carry ``pb-<role>`` in /proc/<pid>/comm
(the supervisor names them), the standalone supervisor is the root, its unnamed child is the
embedded NameServer; Java's are ``namesrv`` and ``broker`` (one JVM each).
"""
import os
import pathlib
import threading
import time

import psutil

_KIB = 1024
_PSS_FIELDS = {"Pss:": "pss", "Pss_Anon:": "anon", "Pss_File:": "file", "Pss_Shmem:": "shmem"}


def process_tree(root_pids) -> list[psutil.Process]:
    """Every live process under root_pids (roots included)."""
    processes = []
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            processes.append(root)
            processes.extend(root.children(recursive=True))
        except psutil.Error:
            continue
    return processes


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of pid (0 when gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            text = pathlib.Path(f"/proc/{pid}/task/{task}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                total += int(line.split()[1])
    return total


def pss_bytes(pid: int) -> dict[str, int]:
    """PSS of pid and its anonymous / file / shmem parts, bytes ({} when unreadable)."""
    try:
        text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    figures = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in _PSS_FIELDS:
            figures[_PSS_FIELDS[parts[0]]] = int(parts[1]) * _KIB
    return figures


def take(root_pids, role_of) -> dict:
    """A snapshot: monotonic time, machine CPU times, and per pid its role, CPU s and context
    switches. ``role_of(process)`` names a psutil.Process."""
    processes = {}
    for process in process_tree(root_pids):
        try:
            with process.oneshot():
                times = process.cpu_times()
                role = role_of(process)
        except psutil.Error:
            continue
        processes[process.pid] = {"role": role, "cpu_s": times.user + times.system,
                                  "ctx": context_switches(process.pid)}
    machine = psutil.cpu_times()
    return {"time": time.monotonic(), "processes": processes,
            "machine_busy_s": machine.user + machine.system + machine.nice + machine.irq
            + machine.softirq + machine.steal, "machine_total_s": sum(machine)}


def window_figures(before: dict, after: dict, messages: int) -> dict:
    """Per role: CPU µs and context switches per message, cores used; totals; machine busy.

    A process that appeared mid-window counts from zero; one that vanished is left out.
    """
    seconds = max(after["time"] - before["time"], 1e-9)
    messages = max(messages, 1)
    roles: dict[str, dict] = {}
    for pid, late in after["processes"].items():
        early = before["processes"].get(pid, {"cpu_s": 0.0, "ctx": 0})
        figures = roles.setdefault(late["role"], {"cpu_s": 0.0, "ctx": 0})
        figures["cpu_s"] += late["cpu_s"] - early["cpu_s"]
        figures["ctx"] += late["ctx"] - early["ctx"]
    per_role = {role: {"cpu_us_per_msg": round(f["cpu_s"] * 1e6 / messages, 2),
                       "ctx_per_msg": round(f["ctx"] / messages, 4),
                       "cores": round(f["cpu_s"] / seconds, 3)}
                for role, f in sorted(roles.items())}
    cpu_s = sum(f["cpu_s"] for f in roles.values())
    ctx = sum(f["ctx"] for f in roles.values())
    machine_total = max(after["machine_total_s"] - before["machine_total_s"], 1e-9)
    return {"processes": per_role, "cpu_us_per_msg": round(cpu_s * 1e6 / messages, 2),
            "ctx_per_msg": round(ctx / messages, 4), "cores": round(cpu_s / seconds, 3),
            "sampled_s": round(seconds, 2),
            "machine_busy": round((after["machine_busy_s"] - before["machine_busy_s"])
                                  / machine_total, 3)}


class PssWatcher:
    """Samples the PSS of the processes under root_pids every interval_s in a thread.

    ``result()``: peak and mean of the summed PSS (MiB) and the per-role split of the sample
    at the peak.
    """

    def __init__(self, root_pids, role_of, interval_s: float = 2.0):
        self.root_pids = list(root_pids)
        self.role_of = role_of
        self.interval_s = interval_s
        self.totals: list[int] = []
        self.peak_split: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "PssWatcher":
        self._thread.start()
        return self

    def sample(self) -> None:
        split: dict[str, dict[str, float]] = {}
        total = 0
        for process in process_tree(self.root_pids):
            try:
                role = self.role_of(process)
            except psutil.Error:
                continue
            figures = pss_bytes(process.pid)
            if not figures:
                continue
            total += figures.get("pss", 0)
            role_split = split.setdefault(role, {})
            for name, value in figures.items():
                role_split[name] = role_split.get(name, 0.0) + value / 2**20
        if total and (not self.totals or total >= max(self.totals)):
            self.peak_split = {role: {k: round(v, 1) for k, v in parts.items()}
                               for role, parts in sorted(split.items())}
        if total:
            self.totals.append(total)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        if not self.totals:
            return {}
        return {"pss_peak_mib": round(max(self.totals) / 2**20, 1),
                "pss_mean_mib": round(sum(self.totals) / len(self.totals) / 2**20, 1),
                "pss_by_role_mib": self.peak_split}
