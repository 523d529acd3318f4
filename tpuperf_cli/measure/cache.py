"""The measurement cache: one sqlite3 file, one row per (fingerprint, target).

Each measurement is committed as soon as it is made, so an interrupted run
keeps everything it finished and the next run resumes where it stopped.
Failures are cached too (a compile error does not go away by compiling
again); `retry_errors` ignores cached failures.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time

from tpuperf_cli.errors import TpuperfError

FILENAME = "measurements.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurement (
    fingerprint TEXT NOT NULL,
    target_key  TEXT NOT NULL,
    runtime_ns  REAL,
    runs        TEXT,
    error       TEXT,
    error_kind  TEXT,
    target      TEXT NOT NULL,
    min_time    REAL,
    measured_at REAL NOT NULL,
    noise       REAL,
    PRIMARY KEY (fingerprint, target_key)
)
"""


def default_cache_dir() -> str:
    """$XDG_CACHE_HOME/tpuperf, or ~/.cache/tpuperf."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tpuperf")


class Cache:
    """get/put measurements keyed by (fingerprint, target key)."""

    def __init__(self, directory=None):
        directory = directory or default_cache_dir()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise TpuperfError(f"cache directory {directory}: {e.strerror}") from None
        self.path = os.path.join(directory, FILENAME)
        deadline = time.monotonic() + 60
        while True:
            db = None
            try:
                db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
                # WAL stays set in the file: only its first user switches it,
                # which takes the database alone (and is refused at once, not
                # after the busy timeout, while another process has it open)
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute(_SCHEMA)
                columns = {row[1] for row in db.execute("PRAGMA table_info(measurement)")}
                if "noise" not in columns:  # a cache written before noise was kept
                    db.execute("ALTER TABLE measurement ADD COLUMN noise REAL")
                self._db = db
                return
            except sqlite3.Error as e:
                if db is not None:
                    db.close()
                # processes opening a new cache together: wait for the first to set it up
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise TpuperfError(f"cache {self.path}: {e}") from None
                time.sleep(0.1)

    def get(self, fingerprint: str, key: str) -> dict | None:
        """The cached entry as a dict (runtime_ns, runs, noise, error,
        error_kind, target), or None."""
        row = self._db.execute(
            "SELECT runtime_ns, runs, noise, error, error_kind, target FROM measurement "
            "WHERE fingerprint = ? AND target_key = ?", (fingerprint, key)).fetchone()
        if row is None:
            return None
        runtime_ns, runs, noise, error, error_kind, target = row
        return {"runtime_ns": runtime_ns, "runs": json.loads(runs) if runs else None,
                "noise": noise, "error": error, "error_kind": error_kind,
                "target": json.loads(target)}

    def put(self, fingerprint: str, key: str, target: dict, runtime_ns: float | None = None,
            runs: list | None = None, error: str | None = None, error_kind: str | None = None,
            min_time: float | None = None, noise: float | None = None) -> None:
        """Store one measurement (or failure) and commit it."""
        self._db.execute(
            "INSERT OR REPLACE INTO measurement (fingerprint, target_key, runtime_ns, runs, "
            "error, error_kind, target, min_time, measured_at, noise) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fingerprint, key, runtime_ns, json.dumps(runs) if runs is not None else None,
             error, error_kind, json.dumps(target, sort_keys=True), min_time, time.time(), noise))

    def __len__(self):
        return self._db.execute("SELECT COUNT(*) FROM measurement").fetchone()[0]

    def close(self) -> None:
        self._db.close()
