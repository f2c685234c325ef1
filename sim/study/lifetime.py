"""Worker processes that leave nothing behind: they die with the study that started them, even
when it is killed outright (``kill -9``), and never hold the caller's stdout or stderr (a CI step
that waits for those to close would otherwise wait for orphans).

On Linux a worker asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``); a
pool's workers are children of multiprocessing's fork server, which itself exits when the study
does. A watchdog thread checks the study's pid as well (other systems, and in case the server
outlives it). The fork server and the resource tracker are started with /dev/null as stdout and
stderr, so neither they nor the workers forked from them inherit the caller's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

PR_SET_PDEATHSIG = 1
WATCH_EVERY_S = 1.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the pid
        return False
    return True


def kill_on_parent_death() -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux); whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with(pid: int) -> None:
    """End this process when process ``pid`` (the study) ends, however it ends."""
    kill_on_parent_death()
    if not alive(pid):  # it ended before we were watching
        os._exit(1)

    def watch() -> None:
        while alive(pid):
            time.sleep(WATCH_EVERY_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="servesim-die-with-parent", daemon=True).start()


@contextlib.contextmanager
def detached_stdio() -> Iterator[None]:
    """While inside, file descriptors 1 and 2 are /dev/null: processes started here do not
    inherit the caller's stdout and stderr. Python's own streams are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved: list[tuple[int, int]] = []
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:  # not open: nothing to hide
                continue
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


def start_pool_helpers(method: str) -> None:
    """Start multiprocessing's resource tracker and (for ``forkserver``) its fork server now,
    detached from the caller's stdout and stderr; the pool's workers are forked from them."""
    from multiprocessing import resource_tracker

    with detached_stdio():
        resource_tracker.ensure_running()
        if method == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()
