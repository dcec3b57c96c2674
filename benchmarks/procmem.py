"""Resident memory of a Spark job's process tree, read from /proc (no psutil dependency).

A PySpark job is three kinds of process: the driver's Python interpreter, the driver JVM it
launches (spark-submit's ``java``), and the Python workers the JVM forks (``pyspark.daemon``
and its children). Their memory is reported separately because each has its own bound:
``spark.driver.memory`` caps only the JVM heap, RocksDB and Arrow buffers are native, and the
Python workers are outside the JVM entirely.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids of every live process (one /proc walk)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces/parens: the fields after the last ')' are fixed.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _rss_mb(pid: int) -> float:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * _PAGE_KB / 1024


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            "utf-8", "replace")
    except OSError:
        return ""


@dataclass
class TreeMemory:
    """One sample of a job's process tree, in MB."""

    driver_python_mb: float = 0.0
    driver_jvm_mb: float = 0.0
    python_workers_mb: float = 0.0
    python_workers: int = 0
    #: the largest single worker (a task's own process: issue 17's "memory per state task";
    #: the sum above counts pages the forked workers share with pyspark.daemon again each)
    largest_worker_mb: float = 0.0


def is_python_worker(cmdline: str) -> bool:
    """A PySpark worker (``python -m pyspark.daemon`` and the workers it forks), not another
    child of the JVM: Hadoop's local file system shells out (``chmod``, ``readlink``, through
    ``jspawnhelper``), and such a child, sampled between its spawn and its exec, shares the
    JVM's memory and shows the JVM's cmdline and RSS: counted as a worker, it reads as a
    "largest worker" of the JVM's size."""
    exe, _, args = cmdline.partition(" ")
    return Path(exe).name.startswith("python") and "pyspark" in args


def sample_tree(root: int) -> TreeMemory:
    """RSS of the driver's Python (``root``), its JVM(s), and the Python workers below them
    (``is_python_worker``: the JVM's other children are not counted)."""
    mem = TreeMemory(driver_python_mb=_rss_mb(root))
    children = _children_map()
    for pid in children.get(root, []):
        if "java" not in _cmdline(pid).split(" ", 1)[0]:
            continue  # e.g. a simulator the caller started: not part of the job
        mem.driver_jvm_mb += _rss_mb(pid)
        todo = list(children.get(pid, []))
        while todo:  # pyspark.daemon and the workers it forked
            worker = todo.pop()
            todo.extend(children.get(worker, []))
            if not is_python_worker(_cmdline(worker)):
                continue
            rss = _rss_mb(worker)
            mem.python_workers_mb += rss
            mem.python_workers += 1
            mem.largest_worker_mb = max(mem.largest_worker_mb, rss)
    return mem


@dataclass
class PeakSampler:
    """Samples a process tree in a background thread and keeps each kind's peak."""

    root: int
    interval_s: float = 0.5
    peak: TreeMemory = field(default_factory=TreeMemory)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PeakSampler:
        self._thread = threading.Thread(target=self._run, name="mem-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> TreeMemory:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        return self.peak

    def _run(self) -> None:
        while not self._stop.is_set():
            now = sample_tree(self.root)
            self.samples += 1
            self.peak.driver_python_mb = max(self.peak.driver_python_mb, now.driver_python_mb)
            self.peak.driver_jvm_mb = max(self.peak.driver_jvm_mb, now.driver_jvm_mb)
            self.peak.python_workers_mb = max(self.peak.python_workers_mb,
                                              now.python_workers_mb)
            self.peak.python_workers = max(self.peak.python_workers, now.python_workers)
            self.peak.largest_worker_mb = max(self.peak.largest_worker_mb,
                                              now.largest_worker_mb)
            time.sleep(self.interval_s)


def load_average() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"
