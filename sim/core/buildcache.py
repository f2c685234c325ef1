"""Where the compiled core's build lives, and whether this process compiles the core at all.

numba caches each compiled core function on disk (``jit``). The build goes in the first folder
of these that can be written: ``NUMBA_CACHE_DIR`` when it is set, the user's cache
(``$XDG_CACHE_HOME`` or ``~/.cache``, ``servesim/numba-<stamp>``), or a private folder under the
system's temporary folder. When the first choice cannot be written (a read-only home in a
container), one line on stderr says which folder is used instead and how to choose one; when none
can, the core runs as plain Python (the same results, slowly), and the line says so. A build can
therefore never stop a run. This module imports no numba, so the choice is made before the core
is imported (``sim.cli.prebuild`` uses it to decide whether a first run waits for a build).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

# The compiled core spans these folders; every file of them stamps every cached function.
_SIM = Path(__file__).resolve().parents[1]
CORE_FILES = frozenset([*(str(p) for d in ("core", "pricing", "loops") for p in (_SIM / d).glob("*.py")),
                        str(_SIM / "scenario" / "specs" / "kv_bytes.py")])  # compiled by sim/pricing/links.py
CORE_STAMP = hashlib.sha256(b"".join(Path(p).read_bytes() for p in sorted(CORE_FILES))
                            + os.environ.get("NUMBA_BOUNDSCHECK", "").encode()).hexdigest()

JIT_ENV = "SERVESIM_JIT"  # "0": run the core as plain Python even where numba is installed
NOTED_ENV = "SERVESIM_BUILD_NOTED"  # the kinds of line already printed (child processes inherit it)


def user_cache() -> Path:
    """The user's build folder for this version of the core."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "servesim" / f"numba-{CORE_STAMP[:16]}"


def temp_cache() -> Path:
    """The fallback: a folder of this user's own under the system's temporary folder."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"servesim-{uid}" / f"numba-{CORE_STAMP[:16]}"


def candidates() -> list[Path]:
    """The build folders to try, in order."""
    first = [Path(os.environ["NUMBA_CACHE_DIR"])] if os.environ.get("NUMBA_CACHE_DIR") else []
    return [*first, user_cache(), temp_cache()]


def writable(folder: Path) -> str | None:
    """None when files can be created in ``folder`` (made if missing), else why not."""
    try:
        if folder == temp_cache():  # a shared place: a private folder, which must be ours
            folder.parent.mkdir(mode=0o700, exist_ok=True)
            if hasattr(os, "getuid") and folder.parent.stat().st_uid != os.getuid():
                return f"{folder.parent} belongs to another user"
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".servesim-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def choose_folder(folders: list[Path]) -> tuple[Path | None, str | None]:
    """The first writable folder of ``folders`` (None if none is), and the line to print when it
    is not the first (None when it is)."""
    problems = []
    for folder in folders:
        why = writable(folder)
        if why is None:
            if not problems:
                return folder, None
            return folder, (f"servesim: cannot write the compiled build to {problems[0]}; using {folder} "
                            "instead (set NUMBA_CACHE_DIR or XDG_CACHE_HOME to a writable folder to choose)")
        problems.append(f"{folder} ({why})")
    return None, (f"servesim: no folder to keep the compiled build in ({'; '.join(problems)}); the core runs "
                  "as plain Python (same results, slower): set NUMBA_CACHE_DIR to a writable folder to compile it")


def note(line: str, kind: str = "folder") -> None:
    """Print ``line`` on stderr, once per process tree for each ``kind`` of line."""
    kinds = os.environ.get(NOTED_ENV, "").split(",")
    if kind in kinds:
        return
    os.environ[NOTED_ENV] = ",".join([*kinds, kind]).strip(",")
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


@functools.cache
def build_folder() -> Path | None:
    """This process's build folder (None: nowhere to write one); says so when it falls back."""
    folder, line = choose_folder(candidates())
    if line:
        note(line)
    return folder


def interpreted() -> bool:
    """Whether this process runs the core as plain Python: numba is missing, or asked to (by
    ``SERVESIM_JIT=0``), or no folder can hold its build."""
    if os.environ.get(JIT_ENV) == "0" or importlib.util.find_spec("numba") is None:
        return True
    return build_folder() is None


def marker() -> Path:
    """Present once every entry point of this version of the core is compiled and cached."""
    return (build_folder() or candidates()[0]) / f"servesim-{CORE_STAMP[:16]}.ready"


def is_ready() -> bool:
    return marker().exists()


def mark_used() -> None:
    """A run loads this build: keep it from being pruned."""
    with contextlib.suppress(OSError):
        os.utime(marker())
