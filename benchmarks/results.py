"""A benchmark's result rows as JSON, beside what it prints: ``.bench/results/<name>.json``.

Why: BENCHMARKS.md keeps one current table per benchmark with its command, machine and code
commit; a file per run that says the same (rows, command, commit, machine) lets the next
table be filled in, or two runs compared, without copying figures off a terminal. The folder
is generated data (``.bench/`` is gitignored); each run of a benchmark replaces its file.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / ".bench" / "results"


def write_results(name: str, rows: Sequence[Mapping[str, Any]], *,
                  folder: Path = RESULTS, argv: Sequence[str] | None = None) -> Path:
    """Write ``rows`` (one mapping per printed table row) to ``folder/<name>.json`` with the
    command line, the code commit and the machine, and return the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    document = {
        "benchmark": name,
        "command": " ".join(argv if argv is not None else sys.argv),
        "commit": _commit(),
        "machine": machine(),
        "rows": [dict(row) for row in rows],
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return path


def machine() -> dict[str, Any]:
    """Cores, memory and interpreter: what BENCHMARKS.md names as the machine."""
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return {"cores": os.cpu_count(), "memory_gb": round(pages * page_size / 2**30, 1),
            "arch": platform.machine(), "python": platform.python_version()}


def _commit() -> str | None:
    """The checked-out commit (with ``+dirty`` when the work tree has changes), or None
    outside a git work tree."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")
