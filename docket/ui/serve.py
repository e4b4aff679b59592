"""Serving the console with uvicorn: on its own (``docket ui``) or inside a worker process
(``docket worker --ui-port N``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Generator

import uvicorn

from docket.facade import Docket
from docket.ui.app import create_app

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "serve", "serving_alongside"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787


class _GuestServer(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to its host (the worker's own stop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def serve(
    docket: Docket,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    run_worker: bool = False,
) -> None:
    """Serve the console until interrupted (blocking). The app opens and closes ``docket``."""
    app = create_app(docket, token=token, open_docket=True, run_worker=run_worker)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = _GuestServer(config)

    def stop() -> None:
        server.should_exit = True

    async def main() -> None:
        # our own handlers: uvicorn's would re-raise the signal once it has stopped
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop)
        await server.serve()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def serving_alongside(
    docket: Docket, *, host: str, port: int, token: str | None
) -> AsyncIterator[str]:
    """Serve the console over an already open ``docket`` on the running loop while the
    block runs; yields the console's URL."""
    app = create_app(docket, token=token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = _GuestServer(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start
            raise RuntimeError(f"the console could not listen on {host}:{port}")
        await asyncio.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
