"""Reading a conf file: YAML with duplicate keys refused, environment overrides, one-line
errors."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from pipeline.config.base import ENV_PREFIX
from pipeline.config.settings import Settings
from pipeline.config_error import ConfigError

DEFAULT_CONF = Path(__file__).resolve().parents[2] / "conf" / "local.yaml"


class _DuplicateKey(yaml.YAMLError):
    """A key written twice in one mapping (the message names it and both lines)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in a mapping is refused: the
    plain loader keeps the later value silently, so a second ``kafka:`` block or a repeated
    ``security_protocol`` overrode the first without a word."""

    def construct_document(self, node: yaml.Node) -> Any:
        _refuse_duplicates(node, "")
        return super().construct_document(node)


def _refuse_duplicates(node: yaml.Node, path: str) -> None:
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicates(item, f"{path}[{i}]")
        return
    if not isinstance(node, yaml.MappingNode):
        return
    first_line: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor`` may repeat
            continue
        name = str(key_node.value)
        key = f"{path}.{name}" if path else name
        line = key_node.start_mark.line + 1
        if name in first_line:
            raise _DuplicateKey(f"key {key!r} is written twice (lines {first_line[name]} "
                                f"and {line})")
        first_line[name] = line
        _refuse_duplicates(value_node, key)


#: env keys whose value is a secret: taken as the literal string, never parsed as YAML (a
#: password ``0123`` or ``true`` must stay what it is)
_LITERAL_ENV = re.compile(r"(password|secret)$")


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name[len(ENV_PREFIX):].split("__") if k]
        node = raw
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: {'.'.join(keys)} does not name a section")
        node[keys[-1]] = value if _LITERAL_ENV.search(keys[-1]) else yaml.safe_load(value)
    return raw


def _one_line(error: ValidationError, source: str) -> str:
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{source}: {key}: {msg}{more}"


def load_settings(path: str | Path | None = None,
                  env: Mapping[str, str] | None = None) -> Settings:
    """Load, override from the environment, and validate. Raises ConfigError (one line)."""
    env = os.environ if env is None else env
    conf = Path(path or env.get("URBPIPE_CONF") or DEFAULT_CONF)
    try:
        raw = yaml.load(conf.read_text(), Loader=_UniqueKeyLoader) or {}  # a SafeLoader
    except OSError as exc:
        raise ConfigError(f"{conf}: cannot read: {exc.strerror}") from None
    except _DuplicateKey as exc:
        raise ConfigError(f"{conf}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{conf}:{where} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{conf}: top level must be a mapping of sections")
    raw = _apply_env(raw, env)
    home = conf.resolve().parent
    raw.setdefault("base_dir", str(home.parent if home.name == "conf" else home))
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, str(conf))) from None
