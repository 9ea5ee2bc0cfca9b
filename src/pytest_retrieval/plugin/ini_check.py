"""Whether pytest left the project's ini file unread because of one of our options' values.

pytest picks its rootdir and ini file before it knows a plugin's options: every word on the
command line (and in ``PYTEST_ADDOPTS``) that its own options do not use up and that names
an existing path counts as a test path. In ``pytest --retrieval-run ../x.trec`` it takes
``../x.trec`` for one, the folder that it and the working directory share becomes the
rootdir, and the project's ini file -- its golden set, thresholds, baseline settings -- goes
unread, silently. Written ``--retrieval-run=../x.trec`` it does not. :func:`check_ini_read`
replays pytest's choice (``findpaths.determine_setup``'s rules) with and without our
options' values and says so when they differ; it says nothing when ``-c`` names the file,
or when its replay with the values is not what pytest did (another plugin's option with a
value after a space, another version's rules).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .._internal.io import relative
from ..errors import ConfigError

#: pytest's config file names, in its order of preference (pytest 9 adds pytest.toml)
_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
#: options that name the ini file: pytest reads that one, whatever the paths
_NAMING_INI = {"-c", "--config-file", "--inifile"}


def check_ini_read(config: pytest.Config) -> None:
    """A ConfigError naming the ini file pytest left unread because of one of our options'
    values given after a space, and the fix (``=``)."""
    from_env = _addopts_from_env()
    words = [*from_env, *(str(arg) for arg in config.invocation_params.args)]
    if not any(word.startswith("--retrieval-") for word in words):
        return
    kinds = _option_kinds(config)
    if kinds is None:
        return  # pytest's parser is not what it was: nothing to replay with
    free, ours, named = _read_words(words, kinds)
    if named & _NAMING_INI or not ours:
        return
    here = config.invocation_params.dir
    rootdir_given = "--rootdir" in named
    paths_with = sorted([*free, *ours])
    if _ini_pytest_picks([words[p] for p in paths_with], here, rootdir_given) != config.inipath:
        return  # pytest chose otherwise than the replay: nothing to say
    unread = _ini_pytest_picks([words[p] for p in free], here, rootdir_given)
    if unread is None or unread == config.inipath or not _holds_settings(unread):
        return
    position = next((p for p in ours if _existing(words[p], here)), next(iter(ours)))
    option, value = ours[position], words[position]
    where = " in PYTEST_ADDOPTS" if position < len(from_env) else ""
    raise ConfigError(
        f"{option} {value}{where}: pytest took {value} for a test path when it looked for its "
        f"ini file (before it knows plugins' options), so it did not read "
        f"{relative(unread, here)} (rootdir: {config.rootpath}); write "
        f"{shlex.quote(f'{option}={value}')}{where}"
    )


def _addopts_from_env() -> list[str]:
    """``PYTEST_ADDOPTS`` split as pytest splits it (none when its quotes do not close)."""
    try:
        return shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        return []


def _option_kinds(config: pytest.Config) -> dict[str, str] | None:
    """Every option pytest knows now -> "flag", "one", "optional" (nargs ?) or "many", read
    from its argparse parser's own actions (an action class such as pytest 7's ``-q``
    says only there that it takes no value)."""
    options: Any = getattr(config, "_parser", None)
    parser: Any = getattr(options, "optparser", None)
    if parser is None and hasattr(options, "_getparser"):  # pytest < 9, before its parse
        parser = options._getparser()
    actions = getattr(parser, "_option_string_actions", None)
    if not isinstance(actions, dict):
        return None
    kinds = {}
    for name, action in actions.items():
        nargs = getattr(action, "nargs", None)
        if nargs == 0:
            kinds[name] = "flag"
        elif nargs is None or nargs == 1:
            kinds[name] = "one"
        else:
            kinds[name] = "optional" if nargs == "?" else "many"
    return kinds


def _read_words(
    words: Sequence[str], kinds: dict[str, str]
) -> tuple[list[int], dict[int, str], set[str]]:
    """The positions of the words that are no option's value (pytest's test paths), those
    of our options' values given after a space (-> their option), and the options named."""
    free: list[int] = []
    ours: dict[int, str] = {}
    named: set[str] = set()
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        if word == "--":
            continue  # pytest still reads options after it
        if not word.startswith("-") or word == "-":
            free.append(position - 1)
            continue
        long = word.startswith("--")
        name = word.split("=", 1)[0] if long else word[:2]
        named.add(name)
        kind = kinds.get(name, "flag")
        if kind == "flag" or (long and "=" in word) or (not long and len(word) > 2):
            continue  # a flag, or its value attached
        while position < len(words) and not words[position].startswith("-"):
            if name.startswith("--retrieval-"):
                ours[position] = name
            position += 1
            if kind != "many":
                break
    return free, ours, named


def _ini_pytest_picks(paths: Sequence[str], here: Path, rootdir_given: bool) -> Path | None:
    """The config file pytest picks for these test paths when none is named: the first from
    the folder common to them up, else (no setup.py on the way, no --rootdir) the first up
    from each path's folder."""
    existing = [path for path in (_existing(word, here) for word in paths) if path is not None]
    folders = [path if path.is_dir() else path.parent for path in existing]
    try:
        common = Path(os.path.commonpath(folders)) if folders else here
    except ValueError:  # paths on two drives: pytest's own replay differs, say nothing
        return None
    found = _first_config([common])
    if (
        found is None
        and not rootdir_given
        and folders != [common]
        and not any((base / "setup.py").is_file() for base in (common, *common.parents))
    ):
        found = _first_config(folders)
    return found


def _existing(word: str, here: Path) -> Path | None:
    path = Path(os.path.abspath(here / word.split("::")[0]))
    try:
        return path if path.exists() else None
    except OSError:  # a name too long for a path: not one
        return None


def _first_config(starts: Sequence[Path]) -> Path | None:
    """pytest's ``locate_config``: from each start up, the first file with pytest settings;
    else, from pytest 8.1, the first pyproject.toml seen (it takes that for its rootdir)."""
    from _pytest.config import findpaths

    names: list[str] = list(getattr(findpaths, "CONFIG_LOADERS_BY_NAME", None) or _NAMES)
    pyproject = None
    for start in starts:
        for base in (start, *start.parents):
            for name in names:
                path = base / name
                if path.is_file():
                    if name == "pyproject.toml" and pyproject is None:
                        pyproject = path
                    if findpaths.load_config_dict_from_file(path) is not None:
                        return path
    return pyproject if pytest.version_tuple[:2] >= (8, 1) else None


def _holds_settings(path: Path) -> bool:
    from _pytest.config import findpaths

    return findpaths.load_config_dict_from_file(path) is not None
