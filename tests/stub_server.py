"""The threaded HTTP server under the tests' stub providers (llm_stub.py,
http_record_stub.py, http_adversarial_stub.py): a ThreadingHTTPServer on a free port of
127.0.0.1, served from a daemon thread between start() and stop()."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class ThreadedStub:
    server: ThreadingHTTPServer
    url: str
    thread: threading.Thread

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        """Bind `handler` to a free port of 127.0.0.1 (`self.url`); start() serves it."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
