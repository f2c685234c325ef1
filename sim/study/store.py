"""The runs file: one JSON line per finished run, appended (and synced) as runs finish.

A study reads it back on start and skips every key already there, so an interrupted study
resumes where it stopped, and a run never executes twice for the same output folder.

Each line is a record on its own: a JSON object whose first field, ``crc``, is the CRC-32 of the
rest of the line, so a line a crash or a full disk cut short (or left half-written) is known
for what it is, even where it still parses. On start, such lines are reported and the file is
rewritten without them (atomically), so their runs execute once more and the next line appended
starts on a line of its own. An append that fails (a full disk) is cut back off the file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
import zlib
from pathlib import Path

from sim.errors import OutputError

RUNS_FILE = "runs.jsonl"
_HEAD = '{"crc":"'
_FRAME = len(_HEAD) + 8 + 2  # {"crc":"xxxxxxxx",


def frame(record: dict) -> str:
    """``record`` as one checksummed line (without its newline)."""
    body = json.dumps(record, default=str)
    return f'{_HEAD}{zlib.crc32(body.encode()):08x}",{body[1:]}' if body != "{}" else body


def unframe(line: str) -> dict | None:
    """The record of one line, or None where the line is torn (its checksum or JSON is wrong).
    Lines written before the checksum (no ``crc`` field) are taken as they parse."""
    if line.startswith(_HEAD):
        crc, body = line[len(_HEAD):_FRAME - 2], "{" + line[_FRAME:]
        if line[_FRAME - 2:_FRAME] != '",' or f"{zlib.crc32(body.encode()):08x}" != crc:
            return None
    else:
        body = line
    try:
        rec = json.loads(body)
    except json.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("key"), str) else None


def disk_error(path: Path, e: OSError, what: str) -> OutputError:
    """A write that failed, as an error that says why (a full disk by name)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "the disk is full (No space left on device)"
    else:
        why = e.strerror or str(e)
    return OutputError(str(path), "--out", f"could not {what}: {why}; the runs finished so far are saved: "
                       "free some space and run the same command again to resume")


class RunStore:
    def __init__(self, out_dir: str | Path, fresh: bool = False):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RUNS_FILE
        if fresh and self.path.exists():
            self.path.unlink()
        self.records: dict[str, dict] = {}
        self.torn_lines = 0  # lines cut short or damaged, dropped (their runs run again)
        if self.path.exists():
            self._load()
        self._file = None

    @property
    def skipped_lines(self) -> int:
        return self.torn_lines

    @staticmethod
    def read(path: Path) -> tuple[dict[str, dict], list[str], int, bool]:
        """The records of a runs file, its good lines, its torn lines' count, and whether it ends
        mid-line."""
        records: dict[str, dict] = {}
        good: list[str] = []
        torn = 0
        try:
            text = path.read_text(encoding="utf-8", errors="replace")  # bad bytes: a torn line
        except FileNotFoundError:
            return records, good, torn, False
        for line in text.split("\n"):
            line = line.strip()
            if not line:
                continue
            rec = unframe(line)
            if rec is None:
                torn += 1
                continue
            rec.pop("crc", None)
            records[rec["key"]] = rec
            good.append(line)
        return records, good, torn, bool(text) and not text.endswith("\n")

    @classmethod
    def peek(cls, out_dir: str | Path) -> dict[str, dict]:
        """The runs stored in ``out_dir``, read without changing anything."""
        return cls.read(Path(out_dir) / RUNS_FILE)[0]

    def _load(self) -> None:
        self.records, good, self.torn_lines, cut = self.read(self.path)
        if self.torn_lines or cut:
            self._rewrite(good)

    def _rewrite(self, lines: list[str]) -> None:
        """Replace the file by ``lines`` in one rename."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{RUNS_FILE}.", dir=self.dir)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            raise disk_error(self.path, e, "rewrite the runs file without its torn lines") from None

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
        """Keep ``record`` and write it through to disk before returning; a write that fails is
        cut back off the file and raised as an ``OutputError`` that says why."""
        rec = {k: v for k, v in record.items() if k not in ("requests", "crc")}
        line = frame(rec) + "\n"
        start = None
        try:
            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8")
            start = self._file.tell()
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            self._cut_back(start)
            raise disk_error(self.path, e, "record a finished run in the runs file") from None
        self.records[rec["key"]] = rec

    def _cut_back(self, start: int | None) -> None:
        """After a failed append: leave the file as it was before it (best effort)."""
        f, self._file = self._file, None
        if f is None:
            return
        with contextlib.suppress(OSError):  # its buffer could not be flushed either: dropped with it
            f.close()
        if start is not None:
            with contextlib.suppress(OSError):  # a torn line stays: the next start reports and drops it
                os.truncate(self.path, start)

    def close(self) -> None:
        if self._file is not None:
            f, self._file = self._file, None
            f.close()
