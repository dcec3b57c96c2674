"""docker-compose.yml is valid (checked by Debian's docker-compose, which needs no engine)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_validates_without_engine() -> None:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is not installed: `scripts/setup.sh --tools` installs it"
    done = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_compose_services_share_the_conf() -> None:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert {"kafka", "topics", "simulator", "stream"} <= set(spec["services"])
    for name in ("topics", "simulator", "stream"):
        env = spec["services"][name]["environment"]
        assert env["URBPIPE_CONF"].endswith("conf/local.yaml")
