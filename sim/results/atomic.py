"""Output folders that never mix two runs: check the folder before any work, write every file
apart, and put them all in place in one step (a swap of folders: ``Staging``) only once every
one was written. A failure, or a kill at any moment, leaves the previous run's files as they were."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
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
    """Files (or folders) for ``folder``, written apart and put in place together by
    :meth:`commit`; :meth:`discard` (or leaving the ``with`` block on an error) removes them and
    touches nothing else.

    Where it can, the new files go into a fresh sibling folder, which receives (as hard links) what
    else ``folder`` holds and then takes its place in one atomic exchange of the two folders
    (``renameat2(RENAME_EXCHANGE)`` on Linux; elsewhere two renames, between which the folder is
    briefly absent): no interruption, ``kill -9`` included, leaves a folder that mixes two runs.
    Where it cannot (the parent folder is not writable, the folder is a mount point, the working
    directory or too large to link), each file is renamed into place in turn.

    >>> with Staging(out) as st:                       # doctest: +SKIP
    ...     frame.to_parquet(st.file("requests.parquet"))
    ...     st.remove("requests.csv")                  # a previous run's other format
    """

    def __init__(self, folder: str | Path, field: str = "--out"):
        self.folder = Path(folder)
        self.field = field
        self.staged: dict[str, Path] = {}  # final name -> where it is written
        self.stale: list[tuple[str, bool]] = []
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(str(self.folder), field, f"cannot create the folder: {e.strerror or e}") \
                from None
        self.beside = _sibling_stage(self.folder)  # the new folder, or None: file by file

    def _where(self, name: str) -> Path:
        if self.beside is not None:
            return self.beside / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.folder)
        os.close(fd)
        return Path(tmp)

    def file(self, name: str) -> Path:
        """A path to write the file ``name`` to."""
        path = self._where(name)
        path.touch()
        self.staged[name] = path
        return path

    def folder_for(self, name: str) -> Path:
        """A folder to fill in place of the folder ``name``."""
        if self.beside is not None:
            tmp = self.beside / name
            tmp.mkdir()
        else:
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
        """Put everything in place; returns final name -> final path."""
        for name, tmp in self.staged.items():
            dest = self.final(name)
            if dest.is_dir() and not tmp.is_dir():
                self.discard()
                raise OutputError(str(dest), self.field, "is a folder where the results need a file; "
                                  "move it away (nothing was replaced)")
        for tmp in self.staged.values():
            os.chmod(tmp, (0o777 if tmp.is_dir() else 0o666) & ~UMASK)
        done = {name: self.final(name) for name in self.staged}
        try:
            if self.beside is None or not self._swap():
                self._to_temporary_names()
                self._rename_each()
        except OSError as e:
            self.discard()
            raise OutputError(str(self.folder), self.field, f"could not put the results in place: "
                              f"{describe(e)}") from None
        self.staged, self.stale = {}, []
        return done

    def _carried(self) -> list[os.DirEntry]:
        """What of the folder's present contents the new folder keeps."""
        gone = {name for name, folder in self.stale}
        folders_gone = {name for name, folder in self.stale if folder}
        keep = []
        for entry in os.scandir(self.folder):
            if entry.name in self.staged:
                continue
            if entry.name in gone and (entry.name in folders_gone or not entry.is_dir(follow_symlinks=False)):
                continue
            keep.append(entry)
        return keep

    def _swap(self) -> bool:
        """Fill the new folder with what the old one keeps and exchange the two; False when the
        contents cannot be linked (then the files go in one by one)."""
        assert self.beside is not None
        if len(self.staged) == 1 and not self.stale:  # one rename is atomic by itself
            return False
        try:
            for entry in self._carried():
                _link_into(Path(entry.path), self.beside / entry.name)
            shutil.copystat(self.folder, self.beside)
        except OSError:
            return False
        exchange(self.beside, self.folder.resolve())  # (a link to the folder stays one)
        shutil.rmtree(self.beside, ignore_errors=True)  # now the previous folder
        self.beside = None
        return True

    def _to_temporary_names(self) -> None:
        """Move what was written into the new folder to temporary names in the folder itself."""
        if self.beside is None:
            return
        for name, path in list(self.staged.items()):
            tmp = self.folder / f".{name}.{secrets.token_hex(6)}.tmp"
            os.rename(path, tmp)
            self.staged[name] = tmp
        shutil.rmtree(self.beside, ignore_errors=True)
        self.beside = None

    def _rename_each(self) -> None:
        for name, tmp in self.staged.items():
            dest = self.final(name)
            if tmp.is_dir():
                _replace_dir(tmp, dest)
            else:
                os.replace(tmp, dest)
                if tmp.exists() or tmp.is_symlink():  # two links to one file: rename does nothing
                    tmp.unlink()
        for name, folder in self.stale:
            old = self.final(name)
            if name in self.staged:
                continue
            if old.is_dir() and not old.is_symlink():
                if folder:
                    shutil.rmtree(old, ignore_errors=True)
            elif old.exists() or old.is_symlink():
                old.unlink()

    def discard(self) -> None:
        for tmp in self.staged.values():
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
        self.staged = {}
        if self.beside is not None:
            shutil.rmtree(self.beside, ignore_errors=True)
            self.beside = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type, exc, _tb) -> None:
        if exc_type is None:
            self.commit()
            return
        self.discard()
        if isinstance(exc, OSError):  # disk full, permissions changed: say so, keep the old files
            raise OutputError(str(self.folder), self.field, f"could not write the results: "
                              f"{describe(exc)}; the folder's earlier files are unchanged") from None


def describe(e: OSError) -> str:
    """An OS error's text, saying so in words when the disk is full."""
    text = e.strerror or str(e)
    return f"{text} (the disk is full)" if e.errno in (errno.ENOSPC, errno.EDQUOT) else text


STAGE_TAG = ".servesim-"
LINK_AT_MOST = 1_000  # entries of a folder's other contents carried over by hard links


def _sibling_stage(folder: Path) -> Path | None:
    """A fresh folder beside ``folder`` to build its next contents in, or None where swapping
    the two is not possible or not wise (see ``Staging``). Removes what interrupted runs left."""
    try:
        real = folder.resolve()
        cwd = Path.cwd().resolve()
        if real == cwd or real in cwd.parents or os.path.ismount(real) or real.parent == real:
            return None
        if hasattr(os, "geteuid") and real.stat().st_uid != os.geteuid():
            return None
        if _count_entries(real, LINK_AT_MOST) > LINK_AT_MOST:
            return None
        _remove_leftovers(real)
        return Path(tempfile.mkdtemp(prefix=f".{real.name}{STAGE_TAG}{os.getpid()}-", dir=real.parent))
    except OSError:
        return None


def _count_entries(folder: Path, limit: int) -> int:
    n = 0
    for _root, dirs, files in os.walk(folder):
        n += len(dirs) + len(files)
        if n > limit:
            break
    return n


def _remove_leftovers(real: Path) -> None:
    """Remove staging folders beside ``real`` whose process is gone (killed mid-write)."""
    prefix = f".{real.name}{STAGE_TAG}"
    for path in real.parent.glob(f"{glob_escape(prefix)}*"):
        pid = path.name[len(prefix):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def glob_escape(text: str) -> str:
    import glob

    return glob.escape(text)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _link_into(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` as hard links (a folder: its tree of links; a symlink: a copy of it)."""
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    else:
        os.link(src, dst, follow_symlinks=False)


RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swap folders ``a`` and ``b`` atomically where the system can (Linux's renameat2); else
    move ``b`` aside, ``a`` into its place, and the old ``b`` to ``a``."""
    if _renameat2(a, b):
        return
    aside = b.parent / f".{b.name}{STAGE_TAG}{os.getpid()}-old-{secrets.token_hex(6)}"
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _renameat2(a: Path, b: Path) -> bool:
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False  # this file system cannot exchange: two renames
    raise OSError(err, os.strerror(err), str(b))


def _replace_dir(new: Path, dest: Path) -> None:
    """Put folder ``new`` at ``dest``, moving any old one aside first and then deleting it."""
    old = None
    if dest.exists() or dest.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / dest.name) if dest.is_dir() else dest.unlink()
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
