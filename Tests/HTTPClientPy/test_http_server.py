"""An HTTP/1.1 server that no one here wrote (Python's http.server), for the tests of Herald's HTTP client
(Tests/HeraldHTTPClientTests, Tests/HeraldTokenWebhookTests, Tests/HeraldCommandTests).

Serves on 127.0.0.1 (or --host, another loopback address), in clear or over TLS (--cert, --key), keeps connections open (HTTP/1.1), and prints
"PORT <n>" on standard output once it listens. It runs until its standard input closes (the test's end).

    /echo          200 with a JSON object: method, path, headers, the body's length, the connection's number
    /status/N      status N (a Retry-After header when --retry-after is given), a short body
    /bytes/N       200 with N bytes of body (Content-Length)
    /chunked/N     200 with N bytes of body, chunked
    /.../messages:send   200 with an FCM answer ({"name": ...}) and the Authorization header it got
    /slow          answers after 30 s

With --record FILE, every request is also appended to FILE as one JSON line (method, path, headers, body), for
tests that check what a daemon sent.
"""
import argparse
import http.server
import itertools
import json
import socketserver
import ssl
import sys
import threading

connection_numbers = itertools.count(1)
record_file = None
record_lock = threading.Lock()
# Set when the server stops: a /slow answer waits on it (at most 30 s), so that no handler outlives the server.
stopping = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection_number = next(connection_numbers)

    def log_message(self, format, *args):
        pass

    def answer(self, status, body, content_type="application/json", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0]
        if record_file:
            line = {
                "method": self.command,
                "path": self.path,
                "headers": {name.lower(): value for name, value in self.headers.items()},
                "body": body.decode("utf-8", "replace"),
            }
            with record_lock, open(record_file, "a") as f:
                f.write(json.dumps(line) + "\n")
        if path == "/echo":
            seen = {
                "method": self.command,
                "path": self.path,
                "headers": {name.lower(): value for name, value in self.headers.items()},
                "bodyLength": len(body),
                "body": body.decode("utf-8", "replace"),
                "connection": self.connection_number,
            }
            self.answer(200, json.dumps(seen).encode())
        elif path.startswith("/status/"):
            self.answer(int(path.split("/")[2]), b'{"status": "scripted"}', headers=[("Retry-After", "0")])
        elif path.startswith("/bytes/"):
            self.answer(200, b"x" * int(path.split("/")[2]), "application/octet-stream")
        elif path.startswith("/chunked/"):
            count = int(path.split("/")[2])
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            while sent < count:
                piece = min(4096, count - sent)
                self.wfile.write(b"%x\r\n" % piece + b"y" * piece + b"\r\n")
                sent += piece
            self.wfile.write(b"0\r\n\r\n")
        elif path.endswith("/messages:send"):
            self.answer(200, json.dumps({"name": "projects/demo/messages/42", "bearer": self.headers.get("Authorization")}).encode())
        elif path == "/slow":
            # A server that answers late, not a wait: the client's timeout must end the exchange first.
            stopping.wait(30)
            self.answer(200, b"{}")
        else:
            self.answer(404, b'{"error": "no such path"}')

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        pass  # a client that hangs up (a cancelled or timed-out request) is part of the tests


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--record")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    global record_file
    record_file = args.record
    server = Server((args.host, 0), Handler)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    # A short poll interval: shutdown() waits for it, and the tests wait for the exit.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdin.read()
    stopping.set()
    server.shutdown()


if __name__ == "__main__":
    main()
