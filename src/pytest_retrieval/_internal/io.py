"""File and environment plumbing shared by the writers (baseline, reports, ``convert``).

A leaf: it imports nothing from the package, so any module may use it without import cycles
or heavy dependencies.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import RetrievalError

STRAY_AFTER_S = 60  # a writer's temp file this old is left over from a killed process


class LockError(RetrievalError, OSError):
    """The lock for writing a file cannot be had: the message says which folder and the fix
    (an ``OSError``, so every writer's "cannot write" handling reports it)."""


def lock_folder() -> Path:
    """This user's folder of locks in the temp dir (``pytest-retrieval-locks-<uid>``, mode
    0700): one folder shared by every user of a host blocks all but its creator, and one that
    another user made (or a link they planted) is refused, never used."""
    uid = os.getuid() if hasattr(os, "getuid") else None  # Windows: the temp dir is the user's
    folder = Path(tempfile.gettempdir()) / (
        "pytest-retrieval-locks" if uid is None else f"pytest-retrieval-locks-{uid}"
    )
    fix = f"remove it (rm -r {folder}) or set TMPDIR to a folder of your own"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError as exc:
        raise LockError(
            f"cannot create the lock folder {folder} ({exc.strerror or exc}); {fix}"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a folder"
        raise LockError(f"the lock folder {folder} is {what}: it is not used; {fix}")
    if uid is not None:
        if info.st_uid != uid:
            raise LockError(
                f"the lock folder {folder} belongs to uid {info.st_uid}, not to you (uid {uid}): "
                f"it is not used; {fix}"
            )
        if stat.S_IMODE(info.st_mode) & 0o077:  # ours, but open to others: closed
            try:
                folder.chmod(0o700)
            except OSError as exc:
                raise LockError(
                    f"cannot make the lock folder {folder} private ({exc.strerror or exc}); {fix}"
                ) from None
    return folder


def lock_path(path: Path) -> Path:
    """The lock for writing ``path``: in this user's lock folder (:func:`lock_folder`), so no
    ``.lock`` file litters the user's repository; keyed by the absolute path, so every
    process agrees on it."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    return lock_folder() / f"{digest}.lock"


@contextmanager
def locked(path: Path, timeout: float = -1) -> Iterator[None]:
    """Hold the lock for writing ``path`` (``timeout`` seconds at most; -1: wait); a lock
    that cannot be had is a :class:`LockError` naming the file, the lock and the fix."""
    from filelock import FileLock, Timeout

    lock = lock_path(path)
    try:
        with FileLock(str(lock), timeout=timeout):
            yield
    except Timeout:
        raise LockError(
            f"{path} is being written by another process (its lock {lock} was held for "
            f"{timeout:g} s); wait for it to finish, or if none runs, remove the lock file"
        ) from None
    except LockError:
        raise
    except OSError as exc:
        if exc.filename is None or Path(exc.filename) != lock:
            raise  # not the lock's: the write's own error, said by its caller
        raise LockError(
            f"cannot take the lock {lock} for writing {path} ({exc.strerror or exc}); remove "
            f"it, or set TMPDIR to a folder of your own"
        ) from None


class OutsideLinkError(RetrievalError, OSError):
    """Writing a file would go through a symlink to a place outside the project; the message
    names the link, its target and the fix (an ``OSError``: writers say "NOT written")."""


@dataclass
class LinkPolicy:
    """Where the project is, for the refusal to write through a symlink out of it: pytest's
    rootdir in a test session, the working directory for the command line (None: the
    working directory when a file is written). ``allowed``: the user opted in (``option``)."""

    root: Path | None = None
    allowed: bool = False
    option: str = "--retrieval-allow-outside-links"


#: the process's policy: set once by the plugin (at configure) or by the command line
LINKS = LinkPolicy()


def set_link_policy(root: Path | None, allowed: bool, option: str) -> None:
    """Set :data:`LINKS` (one project per process: a pytest session or one command)."""
    LINKS.root, LINKS.allowed, LINKS.option = root, allowed, option


def link_problem(name: str, path: Path) -> str | None:
    """What is wrong with writing ``path`` (called ``name``, as the user gave it) through a
    symlink, else None.

    The rule: a path named inside the project must land inside it (a link in the project,
    at the file or a folder on its way, may lead elsewhere in it, not out of it: a link
    committed to a repository would make CI overwrite ``~/.bashrc``). A path named outside
    it may not go through a link of another user (one planted in a shared folder such as
    /tmp); the user's own links and root's (``/dev/stdout``, macOS's ``/tmp``) are theirs to
    follow."""
    if LINKS.allowed:
        return None
    root = (LINKS.root or Path.cwd()).resolve()
    named = Path(os.path.abspath(path))
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a link loop: written through nothing
        return None
    if target == root or root in target.parents:
        return None
    lexical = Path(os.path.abspath(LINKS.root or "."))
    base = next((r for r in (root, lexical) if _under(named, r)), None)
    link = _first_link(named, base)
    if link is None:
        return None
    where = relative(link)
    where = str(link) if leads_out(where) else where
    return (
        f"{name} {_shown(path)} would be written through the symlink {where} to {target}, "
        f"outside the project ({root}): nothing is written; remove the link, write the output "
        f"inside the project, or pass {LINKS.option} if the link is meant"
    )


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _first_link(named: Path, base: Path | None) -> Path | None:
    """The symlink that leads ``named`` (absolute, no ``..``) out: for a path in the
    project (``base``: its root, as ``named`` spells it), the first link below the root
    (else ``named``: a ``..`` after a link went elsewhere); for a path outside it, the
    first link on its way owned by neither this user nor root (a planted one)."""
    steps = [*reversed(named.parents), named]
    if base is not None:
        for step in steps:
            if base in step.parents and step.is_symlink():
                return step
        return named
    me = os.getuid() if hasattr(os, "getuid") else None
    for step in steps:
        try:
            info = step.lstat()
        except OSError:
            break
        if stat.S_ISLNK(info.st_mode) and (me is None or info.st_uid not in (me, 0)):
            return step
    return None


#: the SQLite files a cache folder holds (:mod:`.cache`: the judge's, the downstream labels')
CACHE_FILES = tuple(
    f"{name}.sqlite{side}" for name in ("judge", "downstream") for side in ("", "-wal", "-shm")
)


def cache_outputs(name: str, folder: Path) -> list[tuple[str, Path]]:
    """A cache folder and the files SQLite writes in it, as outputs named ``name``: a link
    planted in the folder is followed by SQLite, never by :func:`atomic_write`."""
    return [(name, folder), *((name, folder / file) for file in CACHE_FILES)]


def atomic_write(path: Path, text: str | Iterable[str]) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``. ``text``
    may come in pieces (a large report, never whole in memory).

    The new file gets the old one's permissions, or the usual umask-based ones for a new
    file (mkstemp alone would leave it readable by its owner only). Temp files of this
    target left by a writer killed before its rename are removed first. A symlink is
    written through (its target replaced, the link kept) when its target is in the project,
    else refused (:func:`link_problem`: an :class:`OutsideLinkError`); a path that is not a
    regular file (``/dev/null``, a named pipe) is written to as it is: a rename would replace
    it.
    """
    problem = link_problem("the output", path)
    if problem is not None:
        raise OutsideLinkError(problem)
    path = path.resolve() if path.is_symlink() else path
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="") as stream:
            stream.writelines([text] if isinstance(text, str) else text)
        return
    _remove_stray_temp_files(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_stray_temp_files(path: Path) -> None:
    """Delete ``.NAME.XXXXXXXX.tmp`` files (mkstemp's pattern in :func:`atomic_write`) of
    ``path`` older than a minute: a live writer renames its file within seconds."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    cutoff = time.time() - STRAY_AFTER_S
    try:
        candidates = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return
    for candidate in candidates:
        try:
            if candidate.is_file() and candidate.stat().st_mtime < cutoff:
                candidate.unlink()
        except OSError:  # gone already, or not ours to remove: the write goes on
            continue


def git_info(folder: Path) -> dict[str, Any]:
    """Commit and dirty flag of the repository holding ``folder``, when there is one."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return {}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def now() -> str:
    """The current UTC time as ISO 8601 to the second, as baselines and reports record it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def overwrite_problem(
    outputs: Iterable[tuple[str, Path | None]],
    inputs: Iterable[tuple[str, Path | None]],
    records: Iterable[Path | None] = (),
) -> str | None:
    """What is wrong when an output would overwrite an input (a golden set, a run file, a
    baseline, a shard's report), a file of the project, a baseline file other than those
    this run ``records``, or another output, else None. Outputs and inputs are (what the
    user called it, path) pairs; a path is compared resolved (a symlink, ``./``)."""
    recorded = {path.resolve() for path in records if path is not None}
    read: dict[Path, str] = {}
    for name, path in inputs:
        if path is not None:
            read.setdefault(path.resolve(), name)
    written: dict[Path, str] = {}
    for name, path in outputs:
        if path is None:
            continue
        linked = link_problem(name, path)
        if linked is not None:
            return linked
        where, shown = path.resolve(), _shown(path)
        if where not in read and where not in recorded and _is_baseline_file(where):
            return (
                f"{name} {shown} is a baseline file (another golden set's, or one this run "
                "does not record): writing it would overwrite that file; write the output "
                "to another path"
            )
        if where not in read and is_project_file(where):
            return (
                f"{name} {shown} is a file of the project (its Python source or "
                "configuration): writing it would overwrite that file; write the output to "
                "another path"
            )
        if where in read:
            return (
                f"{name} {shown} is {read[where]}: writing it would overwrite that file; "
                "write the output to another path"
            )
        if where in written:
            return (
                f"{written[where]} and {name} are both {shown}: one would overwrite the "
                "other; give each output its own path"
            )
        written[where] = name
    return None


#: configuration files by the names pytest reads them under (and other tools too)
CONFIGURATION = frozenset({"pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"})


#: how a baseline file's name ends (``<golden>.baseline.json``, the default beside its set)
BASELINE_SUFFIX = ".baseline.json"


def _is_baseline_file(path: Path) -> bool:
    """An existing file named as baselines are (``<golden>.baseline.json``)."""
    return path.name.endswith(BASELINE_SUFFIX) and path.is_file()


def is_project_file(path: Path) -> bool:
    """Whether ``path`` is an existing Python file or a configuration file by pytest's
    names: never an output's place, whatever pytest read (``combine`` and ``eval`` run
    without pytest and cannot know its ini file)."""
    return (path.suffix == ".py" or path.name in CONFIGURATION) and path.is_file()


def relative(path: str | os.PathLike[str], start: str | os.PathLike[str] | None = None) -> str:
    """``os.path.relpath``, but absolute where there is no relative path (Windows: another
    drive, where ``relpath`` raises): every message and node id that names a file uses it,
    so a golden set on ``D:`` is named, not an INTERNALERROR."""
    try:
        return os.path.relpath(path, start)
    except ValueError:
        return os.path.abspath(path)


def leads_out(relative_path: str) -> bool:
    """Whether a path from :func:`relative` is outside its start: ``..`` or ``../x``, or an
    absolute path (another drive). ``..data/x`` is inside: a folder may be named so."""
    first = relative_path.replace(os.sep, "/").split("/", 1)[0]
    return first == os.pardir or os.path.isabs(relative_path)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    shown = relative(path)
    return str(path) if leads_out(shown) else shown


def counted(n: int, noun: str) -> str:
    """``1 label``, ``2 labels``, ``1 query``, ``0 queries``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


def text_lines(text: str) -> list[str]:
    """``text`` split at line ends ("\\n", "\\r\\n", a lone "\\r") only: ``str.splitlines``
    also splits at U+2028, U+2029, U+0085 and other characters that a JSON string may hold
    unescaped (``json.dumps(..., ensure_ascii=False)`` writes them so)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n")
