"""The load generator and the fake server on one event loop whose clock is virtual.

:class:`VirtualTimeLoop` is an asyncio loop whose ``time()`` only moves when nothing is left
to do now: when no callback is ready and the sockets have nothing to read or write, it jumps to
the next timer. Client and server share the loop (and so the clock), and bytes written to a
loopback socket are readable at once, so a request takes exactly the server's
``asyncio.sleep``s: the measured times are the server's schedule, whatever the machine's load.

:func:`run_on_fake` serves the fake (``fake_server.make_app``) on a listening socket of its
own and runs :func:`endpoint.loadgen.run_async` against it, with the load generator's clock
(``time.perf_counter`` / ``time.time``) read off the loop.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from types import SimpleNamespace

from aiohttp import web

from tests.endpoint.fake_server import Cost, Faults, make_app

EPOCH = 1.7e9  # the virtual wall clock's start (time.time())


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        if not self._ready and not self._stopping:
            events = self._selector.select(0)
            if events:
                self._process_events(events)
            else:
                due = [h._when for h in self._scheduled if not h._cancelled]
                if due:
                    self._now = max(self._now, min(due))
        super()._run_once()


def virtual_clock(loop: asyncio.AbstractEventLoop) -> SimpleNamespace:
    """A stand-in for the ``time`` module that reads ``loop``'s clock (CPU time stays real)."""
    return SimpleNamespace(perf_counter=loop.time, monotonic=loop.time, time=lambda: EPOCH + loop.time(),
                           process_time=time.process_time, sleep=time.sleep)


def run_on_fake(monkeypatch, requests, cost: Cost | None = None, model: str = "fake", *,
                faults: Faults | None = None, options: dict | None = None, **kw):
    """``run_async(requests, Options(url=<the fake>, model=model, **options), **kw)`` on virtual
    time, the fake hostile as ``faults`` says (``fake_server.FAULTS``)."""
    from endpoint import loadgen

    loop = VirtualTimeLoop()
    monkeypatch.setattr(loadgen, "time", virtual_clock(loop))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def main():
        app, _ = make_app(cost or Cost(), faults=faults)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        try:
            return await loadgen.run_async(requests, loadgen.Options(url=url, model=model, **(options or {})),
                                           **kw)
        finally:
            await runner.cleanup()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
        sock.close()
