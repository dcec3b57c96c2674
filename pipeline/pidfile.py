"""The PID files of the local servers the project starts (broker, metastore)."""

from __future__ import annotations

import os
from pathlib import Path


def running_pid(pid_file: Path) -> int | None:
    """PID named by ``pid_file`` if that process is alive, else None (no file, garbage, or a
    process that has gone)."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
