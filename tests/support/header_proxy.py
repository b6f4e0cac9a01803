"""A small reverse proxy on 127.0.0.1 that sets fixed headers, as oauth2-proxy does after a login.

It forwards raw TCP to the upstream, rewriting the head of the first request of each connection
(every WebSocket, such as Streamlit's ``/_stcore/stream``, opens its own connection): headers of the
same names that the client sent are dropped, the proxy's are added.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from tests.support.prometheus import free_port


def rewrite_head(head: bytes, headers: Mapping[str, str]) -> bytes:
    """An HTTP/1.1 request head with ``headers`` set (any client values of those names removed)."""
    lines = head.split(b"\r\n")
    names = {name.lower().encode("latin-1") for name in headers}
    kept = [lines[0]] + [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in names]
    added = [f"{name}: {value}".encode("latin-1") for name, value in headers.items()]
    return b"\r\n".join([*kept, *added]) + b"\r\n\r\n"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@contextmanager
def header_proxy(upstream_port: int, headers: Mapping[str, str], *, source: str = "127.0.0.1") -> Iterator[str]:
    """Serve the proxy on a free 127.0.0.1 port while the block runs; yields its base URL. Its connections to
    the upstream come from ``source`` (another loopback address, such as 127.0.0.2, is another peer)."""
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            head = await client_r.readuntil(b"\r\n\r\n")
            up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream_port, local_addr=(source, 0))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            client_w.close()
            return
        up_w.write(rewrite_head(head[:-4], headers))
        await up_w.drain()
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))

    async def serve() -> asyncio.base_events.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        ready.set()
        return server

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(serve())
        loop.run_forever()
        server.close()
        # connections still open end here, on the running loop: a pipe left pending would be finalised
        # after the loop is gone, closing its writer on a closed loop
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(server.wait_closed())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
