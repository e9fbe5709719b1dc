"""The --setup stub of tests/test_crashtest.py: an HTTP provider on 127.0.0.1 that counts
what it carries out, per action.

    POST /keyed   honours the Idempotency-Key header (a repeated key returns the first answer)
    POST /plain   neither keys nor lookups: every POST is carried out
    GET  /count   {"action": deliveries}

It prints PROVIDER_URL=http://127.0.0.1:PORT and `ready` (the --setup contract); on
SIGTERM it appends one JSON line {"action": deliveries} to the file named by its
first argument, so a test sees what each trial's provider carried out."""

import json
import signal
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

deliveries: Counter = Counter()
answers: dict = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Idempotency-Key")
        with lock:
            if self.path == "/keyed" and key in answers:
                answer = answers[key]
            else:
                deliveries[order["action"]] += 1
                answer = {"id": f"{order['action']}-{deliveries[order['action']]}"}
                if self.path == "/keyed":
                    answers[key] = answer
        self._reply(answer)

    def do_GET(self):
        with lock:
            self._reply(dict(deliveries))


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def stop(*_):
        with lock, open(sys.argv[1], "a") as f:
            f.write(json.dumps(dict(deliveries)) + "\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"PROVIDER_URL=http://127.0.0.1:{server.server_address[1]}", flush=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
