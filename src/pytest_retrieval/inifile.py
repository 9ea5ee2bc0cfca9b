"""pytest's config file, read without pytest: what ``pytest-retrieval eval`` warns that a
pytest run applies and it does not (:func:`unread_gate_settings`).

The command line must not import pytest (a front-end of its own), so this replays pytest's
rules for finding and reading its config file (``findpaths.locate_config``: from the working
directory up, the first file with pytest settings, in pytest's order of names) with the
standard library. A file that does not parse, or a rule pytest changes, costs only the
warning, never the command.
"""

from __future__ import annotations

import configparser
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .settings import OPTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest itself depends on tomli before Python 3.11
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

#: pytest's config file names, in its order of preference (pytest 9 added the TOML ones)
NAMES = (
    *("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"),
    *("pyproject.toml", "tox.ini", "setup.cfg"),
)

#: what shapes a pytest run's gate and eval also takes: (ini key, pytest option, eval's option)
GATE_SETTINGS = tuple(
    (option.ini.key, option.pytest_flag, option.cli_flag("eval"))
    for option in OPTIONS
    if option.concern == "gate" and option.ini is not None and option.takes("eval")
)


def pytest_config(here: Path) -> tuple[Path | None, Mapping[str, Any]]:
    """The config file a pytest run from ``here`` (given no paths) reads, and its pytest
    settings; ``(None, {})`` when there is none."""
    for base in (here, *here.parents):
        for name in NAMES:
            path = base / name
            if path.is_file():
                values = _settings(path)
                if values is not None:
                    return path, values
    return None, {}


def _settings(path: Path) -> dict[str, Any] | None:
    """The pytest settings of a config file, or None when it holds none (then pytest looks
    further); a ``pytest.ini`` or ``pytest.toml`` counts even when empty."""
    name = path.name
    text = path.read_text(encoding="utf-8")
    if name.endswith(".toml"):
        document = tomllib.loads(text)
        if name != "pyproject.toml":
            table = document.get("pytest")
            return dict(table) if isinstance(table, dict) else {}
        tool = document.get("tool", {}).get("pytest")
        if not isinstance(tool, dict):
            return None
        native = {key: value for key, value in tool.items() if key != "ini_options"}
        ini = tool.get("ini_options")
        return native or (dict(ini) if isinstance(ini, dict) else None)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text, source=str(path))
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    if parser.has_section(section):
        return dict(parser[section])
    return {} if name.endswith("pytest.ini") else None


def unread_gate_settings(here: Path) -> tuple[Path | None, dict[str, str]]:
    """What a pytest run from ``here`` takes gate settings from that ``pytest-retrieval
    eval`` does not read -- :data:`GATE_SETTINGS` keys in the config file pytest would read,
    their options in its ``addopts`` or in ``PYTEST_ADDOPTS`` -- each with eval's option
    for it; and that file. Nothing when the file does not parse."""
    found: dict[str, str] = {}  # what sets it -> eval's option
    try:
        path, values = pytest_config(here)
        addopts: Any = values.get("addopts", "")
        words = shlex.split(addopts) if isinstance(addopts, str) else [str(w) for w in addopts]
    except Exception:  # a file that does not parse: pytest will say so itself
        return None, found
    try:
        env_words = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:  # quotes that do not close: pytest says so
        env_words = []
    eval_option = {key: option for key, _, option in GATE_SETTINGS}
    for key in values:  # in the file's order
        if key in eval_option:
            found[key] = eval_option[key]
    for _, pytest_option, option in GATE_SETTINGS:
        for where, given in (("addopts", words), ("PYTEST_ADDOPTS", env_words)):
            if any(word.split("=", 1)[0] == pytest_option for word in given):
                found[f"{pytest_option} in {where}"] = option
    return path, found
