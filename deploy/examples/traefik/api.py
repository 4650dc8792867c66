#!/usr/bin/env python3
"""A stand-in for the API behind Traefik: `python3 api.py [PORT]` (default 9000, on 127.0.0.1).

Answers `ok` to every request. Traefik's ForwardAuth can pass sluice's RateLimit headers on to
the API (authResponseHeaders) but not to the client, so this API echoes the one it was sent as
`X-Api-Saw-RateLimit`: what an API that wants its clients to see them would do.
"""

import http.server
import sys


class Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Traefik's connections to an API are
    # Headers and body go out in two writes: without TCP_NODELAY each answer on a kept-alive
    # connection waits ~40 ms for the delayed ACK of the first.
    disable_nagle_algorithm = True

    def do_GET(self):
        # A body is read and dropped, so the next request on the connection starts clean.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        saw = self.headers.get("RateLimit")
        if saw is not None:
            self.send_header("X-Api-Saw-RateLimit", saw)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "3")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"ok\n")

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def log_message(self, *args):
        pass  # quiet: one line a request would drown Traefik's own log


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9000
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Api).serve_forever()
