"""Where runs execute: in this process, a local process pool, or Ray.

Every runner takes run specs with ``submit`` and hands back finished records, one at a
time and in any order, with ``next_done``. A run's result depends only on its spec, so the
runners agree: same seeds, same results.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from sim.study.lifetime import die_with, start_pool_helpers
from sim.study.plan import RunSpec
from sim.study.worker import execute_run

RunFn = Callable[[RunSpec], dict]


class Runner:
    workers = 1

    def submit(self, spec: RunSpec) -> None:
        raise NotImplementedError

    def next_done(self) -> tuple[RunSpec, dict]:
        """Block until some submitted run finishes; its spec and record."""
        raise NotImplementedError

    @property
    def in_flight(self) -> int:
        raise NotImplementedError

    def close(self, cancel: bool = False) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *_):
        self.close(cancel=exc_type is not None)


class SerialRunner(Runner):
    """Runs in this process, one at a time (``--jobs 1``): simplest to debug."""

    def __init__(self, fn: RunFn = execute_run):
        self.fn = fn
        self.queue: deque[RunSpec] = deque()

    def submit(self, spec: RunSpec) -> None:
        self.queue.append(spec)

    def next_done(self) -> tuple[RunSpec, dict]:
        spec = self.queue.popleft()
        return spec, self.fn(spec)

    @property
    def in_flight(self) -> int:
        return len(self.queue)


def _init_worker(study_pid: int) -> None:
    """Workers leave Ctrl-C to the parent, which stops them and keeps the finished runs, and
    die with it however it ends (``lifetime``).

    A terminal sends SIGINT to the whole process group; an idle worker would otherwise die
    printing a KeyboardInterrupt traceback from inside the pool's queue.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with(study_pid)


def _crashed(spec: RunSpec, why: str) -> dict:
    return {"key": spec.key, "status": "error", "error": why, "summary": {}, "warnings": [],
            "wall_s": 0.0}


class PoolRunner(Runner):
    """A pool of worker processes on this machine (all cores by default).

    At most one run per worker is handed to the pool at a time. A worker that dies (killed,
    out of memory, a crash in native code) breaks the pool: the runs it held are then run
    again one at a time in a fresh pool, so the one that kills its worker alone is recorded
    as failed and the others finish normally.
    """

    def __init__(self, workers: int | None = None, fn: RunFn = execute_run):
        self.workers = workers or os.cpu_count() or 1
        self.fn = fn
        self.futures: dict[Future, RunSpec] = {}
        self.backlog: deque[RunSpec] = deque()
        self.suspects: deque[RunSpec] = deque()
        self.alone: RunSpec | None = None  # a suspect, running by itself
        self.ready: deque[tuple[RunSpec, dict]] = deque()
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["sim.study.worker"])
        start_pool_helpers(method)  # without the caller's stdout and stderr
        return ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker,
                                   initargs=(os.getpid(),))

    def submit(self, spec: RunSpec) -> None:
        self.backlog.append(spec)

    @property
    def in_flight(self) -> int:
        return len(self.futures) + len(self.backlog) + len(self.suspects) + len(self.ready)

    def _fill(self) -> None:
        if self.alone is None and self.suspects:
            spec = self.suspects.popleft()
            if not self._hand_over(spec):
                self.suspects.appendleft(spec)
                return
            self.alone = spec
        if self.alone is None:
            while self.backlog and len(self.futures) < self.workers:
                spec = self.backlog.popleft()
                if not self._hand_over(spec):
                    self.backlog.appendleft(spec)
                    return

    def _hand_over(self, spec: RunSpec) -> bool:
        """Give one run to the pool; False when the pool broke since we last looked.

        A worker can die between ``wait`` returning and the next submit. The runs it held
        are still among our futures and will report ``BrokenProcessPool``; this one waits.
        """
        try:
            self.futures[self.pool.submit(self.fn, spec)] = spec
        except BrokenProcessPool:
            if not self.futures:  # nothing left to report the break: start over now
                self._recover([])
            return False
        return True

    def next_done(self) -> tuple[RunSpec, dict]:
        while not self.ready:
            self._fill()
            done, _ = wait(list(self.futures), return_when=FIRST_COMPLETED)
            broken = []
            for fut in done:
                spec = self.futures.pop(fut)
                try:
                    rec = fut.result()
                except BrokenProcessPool:
                    broken.append(spec)
                    continue
                except Exception as e:  # the function failed outside its own guard
                    rec = _crashed(spec, f"{type(e).__name__}: {e}")
                self.ready.append((spec, rec))
                if spec is self.alone:
                    self.alone = None
            if broken:
                self._recover(broken)
        return self.ready.popleft()

    def _recover(self, broken: list[RunSpec]) -> None:
        held = broken + list(self.futures.values())
        self.futures.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()
        if self.alone is not None:  # it ran by itself: it is the one that kills its worker
            self.ready.append((self.alone, _crashed(
                self.alone, "the worker process died while running it")))
            self.alone = None
        else:
            self.suspects.extend(held)

    def close(self, cancel: bool = False) -> None:
        if cancel:
            procs = getattr(self.pool, "_processes", None) or {}
            for proc in list(procs.values()):
                proc.terminate()  # interrupted: stop the runs in progress now
        self.pool.shutdown(wait=not cancel, cancel_futures=True)


class RayRunner(Runner):
    """Ray tasks: ``address`` joins a running cluster, otherwise a local Ray instance starts.

    Cluster nodes need servesim installed (the same version), and any trace files at the same
    paths, as the runs read them where they execute.
    """

    def __init__(self, address: str | None = None, workers: int | None = None,
                 fn: RunFn = execute_run, timeout: float = 30.0):
        from sim.study.schema import StudyError

        try:
            import ray
        except ImportError:
            raise StudyError("--runner ray", None, "Ray is not installed; "
                             "pip install 'ray>=2.9' (or use the local runner)") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            # No address: always a fresh local instance ("local"), never a cluster that
            # happens to run on this machine.
            kwargs = {"address": address} if address else {
                "address": "local", "num_cpus": workers or os.cpu_count()}
            kwargs |= {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True,
                       "logging_level": "warning",
                       "runtime_env": {"env_vars": passed_env()} if passed_env() else None}
            try:
                if address:
                    check_reachable(address, timeout)
                    join_within(ray, kwargs, address, timeout)
                else:
                    ray.init(**kwargs)
            except StudyError:
                raise
            except Exception as e:  # a bad address, no cluster there, Ray failing to start
                raise StudyError("--address" if address else "--runner ray", address,
                                 f"cannot start or join Ray: {type(e).__name__}: {e}") from None
        self.workers = int(ray.cluster_resources().get("CPU", 1))
        self.remote = ray.remote(num_cpus=1, max_retries=1)(fn)
        self.refs: dict = {}

    def submit(self, spec: RunSpec) -> None:
        self.refs[self.remote.remote(spec)] = spec

    @property
    def in_flight(self) -> int:
        return len(self.refs)

    def next_done(self) -> tuple[RunSpec, dict]:
        [ref], _ = self.ray.wait(list(self.refs), num_returns=1)
        spec = self.refs.pop(ref)
        try:
            return spec, self.ray.get(ref)
        except Exception as e:  # task or worker failure (after Ray's own retry)
            return spec, _crashed(spec, f"ray: {type(e).__name__}: {e}")

    def close(self, cancel: bool = False) -> None:
        if cancel:
            for ref in self.refs:
                self.ray.cancel(ref, force=True)
        self.refs.clear()
        if self.started:
            self.ray.shutdown()


RAY_PORTS = {"ray": 10001, "": 6379}  # Ray Client's port, the head's GCS port


def check_reachable(address: str, timeout: float) -> None:
    """Refuse (``StudyError``, exit 2) an explicit Ray address that does not accept a connection
    within ``timeout`` seconds; Ray itself would wait for it indefinitely."""
    import socket

    from sim.study.schema import StudyError

    if address in ("auto", "local"):
        return
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon:
        host, port = rest.rstrip("/"), str(RAY_PORTS.get(scheme, 6379))
    if not host or not port.isdigit():
        return  # a form Ray may know; it says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise StudyError("--address", address, f"cannot reach Ray at {host}:{port} ({why}, waited up to "
                         f"{timeout:g} s): check that the cluster is up and this is its address (a Ray "
                         "Client address looks like ray://head:10001), or leave --address out to start a "
                         "local Ray instance; --connect-timeout sets the wait") from None


def join_within(ray, kwargs: dict, address: str, timeout: float) -> None:
    """``ray.init(**kwargs)`` for a cluster at ``address``, refused (``StudyError``) when it has not
    answered within ``timeout`` seconds: something that accepts connections there but never
    answers (not Ray, or a Ray that hangs) would keep Ray waiting indefinitely. It waits on a
    thread of its own, so that the study can give up on it."""
    import threading

    from sim.study.schema import StudyError

    outcome: list[BaseException | None] = []

    def join() -> None:
        try:
            ray.init(**{**kwargs, "logging_level": "error"})  # (not the main thread: Ray warns that it sets no handler)
            outcome.append(None)
        except Exception as e:
            outcome.append(e)

    waiter = threading.Thread(target=join, name="servesim-ray-join", daemon=True)
    waiter.start()
    waiter.join(timeout)
    if not outcome:
        raise StudyError("--address", address, f"Ray there did not answer within {timeout:g} s: check that this is "
                         "a Ray cluster's address and that it is up; --connect-timeout sets the wait")
    if outcome[0] is not None:
        raise outcome[0]


def passed_env() -> dict[str, str]:
    """Settings of this process that runs elsewhere must share (e.g. --allow-profile-mismatch)."""
    from sim.pricing.profile_checks import ALLOW_ENV

    return {k: os.environ[k] for k in (ALLOW_ENV,) if k in os.environ}


def make_runner(kind: str, jobs: int | None = None, address: str | None = None,
                  fn: RunFn = execute_run, timeout: float = 30.0) -> Runner:
    """``timeout``: seconds to wait for a Ray cluster at ``address`` (the CLI's --connect-timeout)."""
    if kind == "ray":
        return RayRunner(address, jobs, fn, timeout)
    if kind == "serial" or jobs == 1:
        return SerialRunner(fn)
    return PoolRunner(jobs, fn)
