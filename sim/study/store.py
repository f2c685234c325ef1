"""The runs file: one JSON line per finished run, appended (and synced) as runs finish.

A study reads it back on start and skips every key already there, so an interrupted study
resumes where it stopped, and a run never executes twice for the same output folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RUNS_FILE = "runs.jsonl"


class RunStore:
    def __init__(self, out_dir: str | Path, fresh: bool = False):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RUNS_FILE
        if fresh and self.path.exists():
            self.path.unlink()
        self.records: dict[str, dict] = {}
        self.skipped_lines = 0
        if self.path.exists():
            self._load()
        self._file = None

    def _load(self) -> None:
        with self.path.open(encoding="utf-8", errors="replace") as f:  # bad bytes: a bad line
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                    self.records[rec["key"]] = rec
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.skipped_lines += 1  # a line cut short by a crash

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def forget_errors(self) -> int:
        """Drop failed runs so they run again (``--retry-failed``); how many were dropped."""
        failed = [k for k, r in self.records.items() if r.get("status") != "ok"]
        for k in failed:
            del self.records[k]
        return len(failed)

    def append(self, record: dict) -> None:
        """Keep ``record`` and write it through to disk before returning."""
        rec = {k: v for k, v in record.items() if k != "requests"}
        self.records[rec["key"]] = rec
        if self._file is None:
            self._file = self.path.open("a")
        self._file.write(json.dumps(rec, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
