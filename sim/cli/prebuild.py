"""Making the compiled core's build in the background, so that the first run in a fresh
checkout need not wait for it.

numba compiles the core on first use (tens of seconds of CPU) and caches the machine code
(``sim.core.jit``, in ``sim.core.buildcache.build_folder``). A first small ``servesim run`` does
not wait for that: it runs the same core as plain Python (identical results, about 0.5 ms a
request) while a detached ``python -m sim.cli.prebuild`` compiles every entry point and marks the
build ready; later runs load the build. Deciding imports no numba, so it happens before the core
is imported. (The builder runs simulations, so it lives above the loops, not in the core.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sim.core.buildcache import CORE_STAMP, JIT_ENV, build_folder, interpreted, is_ready, mark_used, marker, user_cache

__all__ = ["BACKGROUND_ENV", "INTERPRET_UP_TO", "JIT_ENV", "build", "interpret_this_process", "is_ready",
           "mark_used", "prune_old_builds", "should_interpret_first_run", "start_background_build"]

_ROOT = Path(__file__).resolve().parents[2]
BACKGROUND_ENV = "SERVESIM_BACKGROUND_BUILD"  # "0": a first run compiles in the foreground
INTERPRET_UP_TO = 10_000  # requests: a larger first run compiles first (it would take longer as Python)
LOCK_STALE_S = 600.0
PRUNE_AFTER_S = 30 * 86400.0  # another version's build unused this long is removed


def prune_old_builds(now: float | None = None) -> list[Path]:
    """Remove other versions' builds in the user's cache (``numba-<stamp>`` folders) that no
    run has used for ``PRUNE_AFTER_S``; returns what was removed. NUMBA_CACHE_DIR is left alone."""
    import shutil

    now = time.time() if now is None else now
    removed = []
    for folder in user_cache().parent.glob("numba-*"):
        if folder == user_cache() or not folder.is_dir():
            continue
        last = max([p.stat().st_mtime for p in folder.glob("*.ready")] + [folder.stat().st_mtime])
        if now - last > PRUNE_AFTER_S:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def should_interpret_first_run(loop: str, num_requests: int) -> bool:
    """A small run with ``loop: auto`` in a process that has not loaded the core yet, where
    numba is installed but this core's build is not there (and can be made in the background)."""
    if os.environ.get(BACKGROUND_ENV) == "0" or loop != "auto" or num_requests > INTERPRET_UP_TO:
        return False
    return not ("sim.core.jit" in sys.modules or interpreted() or is_ready())


first_run = False  # this process runs the core as Python only because its build is being made


def interpret_this_process() -> None:
    """From now on this process imports the core as plain Python (its first run)."""
    global first_run
    os.environ[JIT_ENV] = "0"
    first_run = True


def start_background_build() -> bool:
    """Start ``python -m sim.cli.prebuild``, detached, unless one is building already."""
    lock = marker().with_suffix(".building")
    try:
        if lock.exists() and time.time() - lock.stat().st_mtime < LOCK_STALE_S:
            return False
        lock.write_text(str(os.getpid()))
    except OSError:
        return False
    env = {k: v for k, v in os.environ.items() if k != JIT_ENV}
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli.prebuild"], env=env, cwd=str(_ROOT),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    lock.write_text(str(proc.pid))  # the builder's pid
    return True


def build() -> None:
    """Compile every entry point (both loops, roofline and profiled pricing) and mark it ready."""
    import tempfile

    from sim.loops.run import simulate
    from sim.scenario.load import load_scenario

    small = ["workload.num_requests=40", "workload.arrival.rate=20"]
    profile = _ROOT / "calibration" / "profiles"
    variants: list[list[str]] = [[], ["scheduler.policy=chunked-prefill", "replicas=2", "router.policy=power-of-two"],
                                 # KV transfers and pipeline stages: the SimPy loop prices them by their own entries
                                 ["disaggregation.prefill.count=1", "disaggregation.decode.count=1", "hardware.pp=2",
                                  "model=llama-3-70b", "hardware.tp=2"]]
    shipped = sorted(profile.glob("*.json"))
    if shipped:
        variants.append(["cost.model=profile", f"cost.profile={shipped[0]}", "model=llama-2-70b",
                         "hardware.gpu=A100-80GB", "hardware.tp=2"])
    for loop in ("compiled", "simpy"):
        for extra in variants:
            try:
                simulate(load_scenario(None, [*small, *extra, f"simulation.loop={loop}"]))
            except Exception:  # a variant this checkout cannot run still leaves the others built
                continue
    if build_folder() is None:
        return
    with tempfile.NamedTemporaryFile("w", dir=marker().parent, delete=False) as f:
        f.write(CORE_STAMP)
    os.replace(f.name, marker())
    prune_old_builds()


def main() -> int:
    lock = marker().with_suffix(".building")
    try:
        build()
        return 0
    finally:
        lock.unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
