"""A server process of the benchmarks (vLLM-CPU, llama-server): started in its own session, ready
when an address answers, stopped with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path
    started_s: float
    command: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: every process it started
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def launch(cmd: list[str], log: Path, url: str, ready: str, timeout_s: float, what: str,
           env: dict[str, str] | None = None, preexec_fn=None) -> Server:
    """Run ``cmd`` (output to ``log``) until ``url + ready`` answers 200; ``what`` names it in errors."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    f = open(log, "w")  # noqa: SIM115 (the server's lifetime)
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env, preexec_fn=preexec_fn)
    server = Server(proc, url, log, 0.0, list(cmd))
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url + ready, timeout=2) as r:
                if r.status == 200:
                    server.started_s = time.perf_counter() - t0
                    return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"{what} did not answer within {timeout_s:.0f} s; see {log}")
