"""Output folders that never mix two runs: check the folder before any work, write every file
under a temporary name beside its final one, and rename them all into place only once every
one was written. A failure leaves the previous run's files as they were."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sim.errors import OutputError
from sim.inputs import utf8_name


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()  # temporary files are private; the results get the usual permissions


def check_out_dir(out: str | Path, field: str = "--out", names: Iterable[str] = ()) -> Path:
    """Check that ``out`` is, or can become, a folder we may write in, and that none of the
    ``names`` a run writes there is a folder. Creates nothing that it does not remove."""
    out = Path(out).expanduser()
    utf8_name(out, field, OutputError)
    if out.exists() and not out.is_dir():
        raise OutputError(str(out), field, "exists and is not a folder; expected a folder (or a "
                          "new name) for the results")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise OutputError(str(out), field, f"{existing} is a file, so it cannot hold a folder")
    for name in names:
        if (out / name).is_dir():
            raise OutputError(str(out / name), field, "is a folder where the results need a file; "
                              "move it away or choose another output folder")
    created = []
    try:
        _make_dirs(out, created)
        fd, probe = tempfile.mkstemp(prefix=".servesim-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(str(out), field, f"cannot create or write in this folder: {e.strerror or e}") \
            from None
    finally:
        for d in reversed(created):
            with contextlib.suppress(OSError):  # someone else put something there meanwhile
                d.rmdir()
    return out


def _make_dirs(path: Path, created: list[Path]) -> None:
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        d.mkdir()
        created.append(d)


class Staging:
    """Files (or folders) for ``folder``, written under temporary names and renamed into place
    together by :meth:`commit`; :meth:`discard` (or leaving the ``with`` block on an error)
    removes them and touches nothing else.

    >>> with Staging(out) as st:                       # doctest: +SKIP
    ...     frame.to_parquet(st.file("requests.parquet"))
    ...     st.remove("requests.csv")                  # a previous run's other format
    """

    def __init__(self, folder: str | Path, field: str = "--out"):
        self.folder = Path(folder)
        self.field = field
        self.staged: dict[str, Path] = {}  # final name -> temporary path
        self.stale: list[tuple[str, bool]] = []
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(str(self.folder), field, f"cannot create the folder: {e.strerror or e}") \
                from None

    def file(self, name: str) -> Path:
        """A temporary path to write the file ``name`` to."""
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.folder)
        os.close(fd)
        self.staged[name] = Path(tmp)
        return Path(tmp)

    def folder_for(self, name: str) -> Path:
        """A temporary folder to fill in place of the folder ``name``."""
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=self.folder))
        self.staged[name] = tmp
        return tmp

    def drop(self, name: str) -> None:
        """Forget the staged file or folder ``name`` (deleting it): it will not be put in place."""
        tmp = self.staged.pop(name, None)
        if tmp is not None and tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            tmp.unlink(missing_ok=True)

    def remove(self, name: str, folder: bool = False) -> None:
        """Remove ``name`` on commit: a file (with ``folder``, a folder) an earlier run left that
        this run does not write."""
        self.stale.append((name, folder))

    def final(self, name: str) -> Path:
        return self.folder / name

    def commit(self) -> dict[str, Path]:
        """Rename everything into place; returns final name -> final path."""
        for name, tmp in self.staged.items():
            dest = self.final(name)
            if dest.is_dir() and not tmp.is_dir():
                self.discard()
                raise OutputError(str(dest), self.field, "is a folder where the results need a file; "
                                  "move it away (nothing was replaced)")
        try:
            for name, tmp in self.staged.items():
                dest = self.final(name)
                if tmp.is_dir():
                    os.chmod(tmp, 0o777 & ~UMASK)
                    _replace_dir(tmp, dest)
                else:
                    os.chmod(tmp, 0o666 & ~UMASK)
                    os.replace(tmp, dest)
                    if tmp.exists() or tmp.is_symlink():  # two links to one file: rename does nothing
                        tmp.unlink()
        except OSError as e:
            self.discard()
            raise OutputError(str(self.folder), self.field, f"could not put the results in place: "
                              f"{e.strerror or e}") from None
        for name, folder in self.stale:
            old = self.final(name)
            if name in self.staged:
                continue
            if old.is_dir() and not old.is_symlink():
                if folder:
                    shutil.rmtree(old, ignore_errors=True)
            elif old.exists() or old.is_symlink():
                old.unlink()
        done = {name: self.final(name) for name in self.staged}
        self.staged, self.stale = {}, []
        return done

    def discard(self) -> None:
        for tmp in self.staged.values():
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
        self.staged = {}

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type, exc, _tb) -> None:
        if exc_type is None:
            self.commit()
            return
        self.discard()
        if isinstance(exc, OSError):  # disk full, permissions changed: say so, keep the old files
            raise OutputError(str(self.folder), self.field, f"could not write the results: "
                              f"{exc.strerror or exc}; the folder's earlier files are unchanged") from None


def _replace_dir(new: Path, dest: Path) -> None:
    """Put folder ``new`` at ``dest``, moving any old one aside first and then deleting it."""
    old = None
    if dest.exists() or dest.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / dest.name) if dest.is_dir() else dest.unlink()
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
