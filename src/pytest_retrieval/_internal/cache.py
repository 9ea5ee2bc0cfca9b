"""A small on-disk key -> JSON store in SQLite, shared by judge verdicts and eRAG labels.

SQLite (WAL mode, busy timeout) because several processes write at once — xdist workers,
parallel CI jobs on one cache folder — and a reader must never see half a record. Values
are JSON text, never pickle: a cache file is safe to share and to inspect. Each ``put``
commits on its own, so a run that is killed keeps every answer it had paid for.

A cache file that is not a database (truncated, overwritten) is moved aside to
``<file>.corrupt`` with a :class:`CacheWarning` and a new one is started; a file that breaks
later in the run turns the cache off for the rest of it (with a warning). A cache is a
convenience: it never stops an evaluation.

``claim``/``release`` let processes sharing the file agree who asks the judge about a key,
so a pair needed by two xdist workers is paid for once.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import warning_made_error
from .json import loads

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "at REAL NOT NULL)",
)


class CacheWarning(UserWarning):
    """The cache file could not be used as it was (the run goes on)."""


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot hold a cache (it, or a folder above it, is a file), else None:
    said before a run, not as a FileExistsError on every evaluation."""
    for place in (folder, *folder.parents):
        if place.exists():
            if place.is_dir():
                return None
            under = "" if place == folder else f" is under {place}, which"
            return f"{folder}{under} is a file, not a folder"
    return None


class JsonCache:
    """``get``/``put`` JSON values by key in ``folder/name.sqlite``."""

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.sqlite"
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []  # every thread's, for close()
        self._opening = threading.Lock()
        self.broken: str | None = None  # why the cache is off for the rest of the run
        pid = os.getpid()
        self.owner = f"{socket.gethostname()}:{pid}:{_started(pid)}:{id(self):x}"
        try:
            self._create()
        except sqlite3.DatabaseError as exc:
            self._set_aside(exc)

    def _create(self) -> None:
        db = self._db()
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute("SELECT COUNT(*) FROM entries").fetchone()  # reads a page: finds garbage

    def _set_aside(self, exc: sqlite3.DatabaseError) -> None:
        """Move a file that is not a database to ``<file>.corrupt`` and start anew."""
        self._close()
        aside = self.path.with_name(self.path.name + ".corrupt")
        try:
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                extra = self.path.with_name(self.path.name + suffix)
                if extra.exists():
                    os.replace(extra, aside.with_name(aside.name + suffix))
            self._create()
        except (OSError, sqlite3.DatabaseError) as again:
            self._off(f"cannot use {self.path} ({exc}), nor start a new one ({again})")
            return
        _warn(
            f"pytest-retrieval: the cache {self.path} was not a usable SQLite database "
            f"({exc}); moved it aside to {aside} and started an empty cache "
            "(delete the .corrupt file once you no longer need it)"
        )

    def _off(self, why: str) -> None:
        self.broken = why
        _warn(f"pytest-retrieval: cache off for this run: {why}")

    def _db(self) -> sqlite3.Connection:
        """One connection per thread: a thread uses only its own, so transactions of two
        threads never mix. (Not bound to its thread by sqlite3's check, so that
        :meth:`close` can close them all from the owner's.)"""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(
                self.path, timeout=60, isolation_level=None, check_same_thread=False
            )
            with self._opening:
                self._opened.append(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def _close(self) -> None:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            with self._opening:
                self._opened.remove(db)
            db.close()
            self._local.db = None

    def close(self) -> None:
        """Close every thread's connection (the file and its -wal/-shm stay usable by
        others); a later call opens a fresh one. For long-lived processes (``pytest.main``
        from an IDE or a notebook, pytester) that would otherwise keep three open files per
        cache until the object is collected."""
        with self._opening:
            opened, self._opened = self._opened, []
            self._local = threading.local()
        for db in opened:
            db.close()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``: no other writer can
        slip in between a read and the write that depends on it); rolled back on error."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def get(self, key: str) -> Any:
        if self.broken is not None:
            return None
        try:
            row = self._db().execute("SELECT value FROM entries WHERE key = ?", (key,)).fetchone()
            return None if row is None else loads(row[0])
        except sqlite3.DatabaseError as exc:
            self._off(f"{self.path} broke while reading it ({exc}); delete it to start anew")
        except ValueError:  # a row that is not JSON (or too deep, a key twice): missing
            pass
        return None

    def put(self, key: str, value: Any) -> None:
        self.put_many([(key, value)])

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        """Store several values in one transaction (committed before this returns), and
        drop this object's claims on their keys."""
        if self.broken is not None:
            return
        rows = [(key, json.dumps(v, sort_keys=True, ensure_ascii=False)) for key, v in items]
        if not rows:
            return
        try:
            with self._writing() as db:
                db.executemany("INSERT OR REPLACE INTO entries (key, value) VALUES (?, ?)", rows)
                db.executemany(  # answered: this object's claims on them are done
                    "DELETE FROM claims WHERE key = ? AND owner = ?",
                    [(key, self.owner) for key, _ in rows],
                )
        except sqlite3.DatabaseError as exc:
            self._off(f"{self.path} broke while writing it ({exc}); delete it to start anew")

    def claim(
        self,
        keys: Iterable[str],
        stale_after: float,
        usable: Callable[[str, Any], bool] = lambda key, value: True,
    ) -> set[str]:
        """The ``keys`` this cache object may now ask for: not answered yet (no row, or one
        that is not JSON or not ``usable``: a hand-edited row, another version's, is asked
        again, not waited on), and nobody else holds them, or the holder died (same host,
        process gone) or has held them over ``stale_after`` seconds. Checked and claimed in
        one transaction, so two processes never both ask."""
        wanted = list(keys)
        if self.broken is not None:
            return set(wanted)
        now = time.time()
        mine: set[str] = set()
        try:
            with self._writing() as db:
                for key in wanted:
                    found = db.execute("SELECT value FROM entries WHERE key = ?", (key,))
                    if _answers(key, found.fetchone(), usable):
                        continue  # answered meanwhile: read it, do not ask again
                    row = db.execute(
                        "SELECT owner, at FROM claims WHERE key = ?", (key,)
                    ).fetchone()
                    if row is None or row[0] == self.owner or _stale(row, now, stale_after):
                        mine.add(key)
                db.executemany(
                    "INSERT OR REPLACE INTO claims (key, owner, at) VALUES (?, ?, ?)",
                    [(key, self.owner, now) for key in mine],
                )
        except sqlite3.DatabaseError as exc:
            self._off(f"{self.path} broke while writing it ({exc}); delete it to start anew")
            return set(wanted)
        return mine

    def release(self, keys: Iterable[str]) -> None:
        """Give up this object's claims on ``keys`` (answered or not)."""
        if self.broken is not None:
            return
        rows = [(key, self.owner) for key in keys]
        if not rows:
            return
        try:
            self._db().executemany("DELETE FROM claims WHERE key = ? AND owner = ?", rows)
        except sqlite3.DatabaseError as exc:
            self._off(f"{self.path} broke while writing it ({exc}); delete it to start anew")

    def __len__(self) -> int:
        if self.broken is not None:
            return 0
        return int(self._db().execute("SELECT COUNT(*) FROM entries").fetchone()[0])


def _warn(message: str) -> None:
    """A :class:`CacheWarning`; where the warning filters make it an error, a ConfigError
    with its fix (a failed evaluation in its words, not a traceback into this module)."""
    with warning_made_error(message, "pytest_retrieval._internal.cache.CacheWarning"):
        warnings.warn(CacheWarning(message), stacklevel=4)


def _answers(key: str, row: tuple[str] | None, usable: Callable[[str, Any], bool]) -> bool:
    """Whether an entries row holds a usable answer for ``key``."""
    if row is None:
        return False
    try:
        value = loads(row[0])
    except ValueError:  # JsonProblem is one: a bad row is a miss
        return False
    return usable(key, value)


def _stale(claim: tuple[str, float], now: float, stale_after: float) -> bool:
    """A claim whose holder is gone: held too long, made on another host (a cache restored
    from an earlier CI job), or its process died (or its pid now names another process)."""
    owner, at = claim
    if now - at > stale_after:
        return True
    host, pid, started, _ = [*owner.split(":", 3), "", "", ""][:4]
    if host != socket.gethostname():
        return True  # SQLite's WAL mode works on one host only: another host's run is over
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, another user's
        pass
    # the pid lives, but is it the same process? (containers reuse pids and hostnames)
    return bool(started) and started != _started(int(pid))


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc), "" where unknown:
    a pid and its start time name one process, even across containers that reuse pids."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return ""
    return fields[19] if len(fields) > 19 else ""
