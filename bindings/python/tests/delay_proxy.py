"""A slow link for the fleet pacer's tests: a TCP proxy on loopback in
front of a real redis-server that holds each chunk the server sends for
``delay_s`` before passing it on (one chunk after another, so a reply that
comes as two chunks takes two delays). What the client sends goes through
at once. It runs its own event loop in a thread of its own; ``stop`` (or
leaving the ``with``) closes every connection and joins the thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class DelayProxy:
    """``port`` is where clients connect; ``delay_s`` may be changed while
    it runs (the next chunk uses it). ``held`` counts the chunks of replies
    being held now, ``passed`` those passed on."""

    def __init__(self, target_port: int, delay_s: float = 0.0) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = 0
        self.held = 0
        self.passed = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._links: set[asyncio.Task[Any]] = set()

    def start(self) -> DelayProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delaying proxy did not start within 10 s")
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ in the proxy's thread

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._link, "127.0.0.1", 0))
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            link.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)
        await self._server.wait_closed()

    async def _link(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        link = asyncio.current_task()
        assert link is not None
        self._links.add(link)
        server_writer = None
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            pumps = {asyncio.ensure_future(self._pump(client_reader, server_writer, delayed=False)),
                     asyncio.ensure_future(self._pump(server_reader, client_writer, delayed=True))}
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        except OSError:
            pass
        finally:
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()
            self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool) -> None:
        while data := await reader.read(65536):
            if delayed:
                self.held += 1
                try:
                    await asyncio.sleep(self.delay_s)
                finally:
                    self.held -= 1
                self.passed += 1
            writer.write(data)
            await writer.drain()
