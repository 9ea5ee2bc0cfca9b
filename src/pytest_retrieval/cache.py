"""A small on-disk key -> JSON store in SQLite, shared by judge verdicts and eRAG labels.

SQLite (WAL mode, busy timeout) because several processes write at once — xdist workers,
parallel CI jobs on one cache folder — and a reader must never see half a record. Values
are JSON text, never pickle: a cache file is safe to share and to inspect.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


class JsonCache:
    """``get``/``put`` JSON values by key in ``folder/name.sqlite``."""

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}.sqlite"
        self._local = threading.local()
        self._db().execute(
            "CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )

    def _db(self) -> sqlite3.Connection:
        """One connection per thread (sqlite3 connections must not cross threads)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def get(self, key: str) -> Any:
        row = self._db().execute("SELECT value FROM entries WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
        self._db().execute("INSERT OR REPLACE INTO entries (key, value) VALUES (?, ?)", (key, text))

    def put_many(self, items: list[tuple[str, Any]]) -> None:
        rows = [(key, json.dumps(v, sort_keys=True, ensure_ascii=False)) for key, v in items]
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO entries (key, value) VALUES (?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def __len__(self) -> int:
        return int(self._db().execute("SELECT COUNT(*) FROM entries").fetchone()[0])
