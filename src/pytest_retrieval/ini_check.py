"""Whether pytest left the project's ini file unread because of one of our options' values.

pytest picks its rootdir and ini file before it knows a plugin's options, from every word on
the command line (and in ``PYTEST_ADDOPTS``) that names an existing path: in ``pytest
--retrieval-run ../x.trec`` it takes ``../x.trec`` for a test path, the folder that it and
the working directory share becomes the rootdir, and the project's ini file -- its golden
set, thresholds, baseline settings -- goes unread, silently. Written ``--retrieval-run=
../x.trec`` it does not. :func:`check_ini_read` replays pytest's choice with and without our
options' values (``findpaths.determine_setup``'s rules) and says so when they differ, only
when the replay with them matches what pytest did (``-c``, ``--rootdir`` and other pytest
versions' rules are then left to pytest).
"""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from ._io import relative
from .errors import ConfigError

#: pytest's config file names, in its order of preference (pytest 9 adds pytest.toml)
_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def check_ini_read(config: pytest.Config) -> None:
    """A ConfigError naming the ini file pytest left unread because of one of our options'
    values given after a space, and the fix (``=``)."""
    tokens = [
        *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
        *(str(arg) for arg in config.invocation_params.args),
    ]
    ours: dict[int, str] = {}  # position of a value -> its option
    for position, (option, value) in enumerate(itertools.pairwise(tokens), 1):
        if not option.startswith("--retrieval-") or "=" in option or value.startswith("-"):
            continue
        given = config.getoption(option[2:].replace("-", "_"), None)
        if value == given or (isinstance(given, list) and value in given):
            ours[position] = option  # not a flag with a test path after it
    if not ours:
        return
    here = config.invocation_params.dir
    rootdir_given = any(token.split("=", 1)[0] == "--rootdir" for token in tokens)
    if _ini_pytest_picks(tokens, here, rootdir_given) != config.inipath:
        return  # pytest chose otherwise (-c, another version's rules): nothing to say
    rest = [token for position, token in enumerate(tokens) if position not in ours]
    unread = _ini_pytest_picks(rest, here, rootdir_given)
    if unread is None or unread == config.inipath or not _holds_settings(unread):
        return
    position = next((p for p in ours if _existing(tokens[p], here)), next(iter(ours)))
    option, value = ours[position], tokens[position]
    raise ConfigError(
        f"{option} {value}: pytest took {value} for a test path when it looked for its ini "
        f"file (before it knows plugins' options), so it did not read {relative(unread, here)} "
        f"(rootdir: {config.rootpath}); write {shlex.quote(f'{option}={value}')}"
    )


def _ini_pytest_picks(tokens: Sequence[str], here: Path, rootdir_given: bool) -> Path | None:
    """The config file pytest picks for these words when none is named: the first from the
    folder common to the paths among them up, else (no setup.py on the way, no --rootdir)
    the first up from each path's folder."""
    folders = [path if path.is_dir() else path.parent for path in _paths(tokens, here)]
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


def _paths(tokens: Sequence[str], here: Path) -> list[Path]:
    """The words pytest takes for paths: not options, existing (a node id's file part)."""
    found = []
    for token in tokens:
        if not token.startswith("-"):
            path = _existing(token, here)
            if path is not None:
                found.append(path)
    return found


def _existing(token: str, here: Path) -> Path | None:
    path = Path(os.path.abspath(here / token.split("::")[0]))
    try:
        return path if path.exists() else None
    except OSError:  # a name too long for a path: not one
        return None


def _first_config(starts: Sequence[Path]) -> Path | None:
    """pytest's ``locate_config``: from each start up, the first file with pytest settings;
    else the first pyproject.toml seen (pytest 8.1+ takes it for its rootdir)."""
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
    return pyproject


def _holds_settings(path: Path) -> bool:
    from _pytest.config import findpaths

    return findpaths.load_config_dict_from_file(path) is not None
