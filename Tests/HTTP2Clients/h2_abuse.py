"""HTTP/2 abuse against a server in clear (prior knowledge) or over TLS (ALPN `h2`), frame by frame.

    python h2_abuse.py --port PORT --case CASE [CASE ...] [--secret SECRET] [--tls CAFILE [--alongside PATH]]

Cases: rapid-reset (HEADERS then RST_STREAM, over and over: CVE-2023-44487), continuation-flood (one header block
in endless CONTINUATION frames: CVE-2024-27316's class), settings-flood (SETTINGS frames sent without reading the
acknowledgements), too-many-streams (one stream past SETTINGS_MAX_CONCURRENT_STREAMS), hpack-bomb (one large
dynamic table entry referenced a thousand times), large-headers (a header list a little over the limit); and
wait-goaway (one request, then the GOAWAY of a server that stops), slow-answer (one request answered late),
slow-request (a body that never comes),
split-preface (the preface in two writes), idle (a connection with no stream, left to the idle timeout).

Frames are made with hyperframe and hpack (h2's own dependencies), not h2's connection, which would refuse to send
most of them. Prints one JSON object per case, each on a connection of its own: the GOAWAY's error code (null when
none came), whether the server closed the connection, the RST_STREAM codes and :status answers per stream, and the
frames read.

With --tls, each connection is TLS with ALPN `h2` (the server's certificate checked against CAFILE). With
--alongside, a well-behaved client (httpx over HTTP/2 on one TLS connection) GETs PATH over and over while the
cases run, and each case ends only once it has been answered after the case began; a last JSON object says how many
of its requests were answered 200, how many otherwise, and the errors it met.
"""

import argparse
import json
import socket
import ssl
import threading
import time

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# The path too-many-streams opens its streams on: one whose route waits for the body (--stream-path).
STREAM_PATH = "/streams"


class Client:
    def __init__(self, port, secret, split_preface=False, ca_file=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.scheme = "http"
        if ca_file is not None:
            context = ssl.create_default_context(cafile=ca_file)
            context.set_alpn_protocols(["h2"])
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")
            assert self.sock.selected_alpn_protocol() == "h2", self.sock.selected_alpn_protocol()
            self.scheme = "https"
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 30
        self.buffer = b""
        self.authority = "127.0.0.1:%d" % port
        self.secret = secret
        self.goaway = None
        # The server closed the connection (end of file or reset, on reading or writing).
        self.closed = False
        self.ended = False
        self.resets = {}
        self.statuses = {}
        self.frames = 0
        if split_preface:
            # A client that writes the preface in pieces: the server waits for the rest before it picks HTTP/2.
            self.send(PREFACE[:10])
            time.sleep(0.2)
            self.send(PREFACE[10:] + SettingsFrame(0).serialize())
        else:
            self.send(PREFACE + SettingsFrame(0).serialize())

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.closed = True

    def request_headers(self, path, method="GET", extra=()):
        headers = [(":method", method), (":scheme", self.scheme), (":authority", self.authority), (":path", path)]
        if self.secret:
            headers.append(("authorization", "Bearer " + self.secret))
        return headers + list(extra)

    def headers(self, stream_id, headers, end_stream=True):
        frame = HeadersFrame(stream_id)
        frame.data = self.encoder.encode(headers)
        frame.flags.add("END_HEADERS")
        if end_stream:
            frame.flags.add("END_STREAM")
        return frame.serialize()

    def read_frames(self, seconds, until=None):
        """Reads frames for up to `seconds`, or until the connection ends or `until()` holds."""
        deadline = time.monotonic() + seconds
        while not self.ended and time.monotonic() < deadline and not (until and until()):
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, ssl.SSLError):
                self.closed = self.ended = True
                break
            if not data:
                self.closed = self.ended = True
                break
            self.buffer += data
            self.parse()

    def parse(self):
        while len(self.buffer) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(self.buffer[:9]))
            if len(self.buffer) < 9 + length:
                return
            frame.parse_body(memoryview(self.buffer[9 : 9 + length]))
            self.buffer = self.buffer[9 + length :]
            self.frames += 1
            if isinstance(frame, GoAwayFrame):
                self.goaway = frame.error_code
            elif isinstance(frame, RstStreamFrame):
                self.resets[frame.stream_id] = frame.error_code
            elif isinstance(frame, HeadersFrame):
                for name, value in self.decoder.decode(frame.data):
                    if name in (b":status", ":status"):
                        self.statuses[frame.stream_id] = int(value)
            elif isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                self.send(SettingsFrame(0, flags=["ACK"]).serialize())

    def result(self):
        return {
            "goaway": self.goaway,
            "closed": self.closed,
            "resets": {str(k): v for k, v in self.resets.items()},
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "frames": self.frames,
        }


def rapid_reset(client):
    batch = b""
    for index in range(5000):
        stream_id = 1 + 2 * index
        batch += client.headers(stream_id, client.request_headers("/healthz"))
        batch += RstStreamFrame(stream_id, error_code=8).serialize()  # CANCEL
        if index % 100 == 99:
            client.send(batch)
            batch = b""
            client.read_frames(0.001)
            if client.closed or client.goaway is not None:
                break
    client.read_frames(5, until=lambda: client.goaway is not None)


def continuation_flood(client):
    block = client.encoder.encode(client.request_headers("/healthz") + [("x-filler-%d" % i, "v" * 20) for i in range(2000)])
    pieces = [block[i : i + 16] for i in range(0, len(block), 16)]
    first = HeadersFrame(1)
    first.data = pieces[0]
    first.flags.add("END_STREAM")
    client.send(first.serialize())
    for piece in pieces[1:]:
        frame = ContinuationFrame(1)
        frame.data = piece
        client.send(frame.serialize())
        if client.closed:
            break
    client.read_frames(5, until=lambda: client.goaway is not None)


def settings_flood(client):
    # Sent without reading what comes back, as a flood would.
    frames = SettingsFrame(0, settings={SettingsFrame.ENABLE_PUSH: 0}).serialize() * 500
    for _ in range(40):
        client.send(frames)
        if client.closed:
            break
    client.read_frames(5, until=lambda: client.goaway is not None)


def too_many_streams(client):
    # The server's SETTINGS (with its MAX_CONCURRENT_STREAMS) acknowledged first: past it is then a violation.
    client.read_frames(2, until=lambda: client.frames >= 2)
    batch = b""
    for index in range(101):
        stream_id = 1 + 2 * index
        batch += client.headers(stream_id, client.request_headers(STREAM_PATH, method="POST"), end_stream=False)
    client.send(batch)
    client.read_frames(3, until=lambda: 201 in client.resets or client.goaway is not None)


def hpack_bomb(client):
    # One 4,000-byte header in HPACK's dynamic table, then a header block that names it 2,000 times (a byte each):
    # 8 MB of header list from 2 KB on the wire. The references come first: the request's own fields would take
    # the entry's place in the table.
    big = ("x-bomb", "b" * 4000)
    block = client.encoder.encode(client.request_headers("/healthz") + [big])
    frame = HeadersFrame(1)
    frame.data = block
    frame.flags.add("END_HEADERS")
    frame.flags.add("END_STREAM")
    client.send(frame.serialize())
    index = bytes([0x80 | 62])  # indexed field: the newest dynamic table entry
    block = index * 2000 + client.encoder.encode(client.request_headers("/healthz"))
    frame = HeadersFrame(3)
    frame.data = block
    frame.flags.add("END_HEADERS")
    frame.flags.add("END_STREAM")
    client.send(frame.serialize())
    client.read_frames(5, until=lambda: client.goaway is not None)


def large_headers(client):
    extra = [("x-large-%d" % i, "v" * 100) for i in range(200)]  # about 26 KB, over the 16 KiB default
    block = client.encoder.encode(client.request_headers("/healthz", extra=extra))
    first = HeadersFrame(1)
    first.data = block[:10000]
    first.flags.add("END_STREAM")
    rest = ContinuationFrame(1)
    rest.data = block[10000:]
    rest.flags.add("END_HEADERS")
    client.send(first.serialize() + rest.serialize())
    client.send(client.headers(3, client.request_headers("/healthz")))
    client.read_frames(5, until=lambda: 1 in client.statuses and 3 in client.statuses)


def slow_request(client):
    # Not abuse: a request whose body never comes, answered 408 after the request timeout; the connection goes on.
    client.send(client.headers(1, client.request_headers("/upload", method="POST"), end_stream=False))
    client.read_frames(10, until=lambda: 1 in client.statuses)
    client.send(client.headers(3, client.request_headers("/after")))
    client.read_frames(5, until=lambda: 3 in client.statuses)


def idle(client):
    # Not abuse: a connection that opens no stream, ended by the server's idle timeout with a GOAWAY.
    client.read_frames(10, until=lambda: client.goaway is not None and client.ended)


def split_preface(client):
    client.send(client.headers(1, client.request_headers("/split")))
    client.read_frames(5, until=lambda: 1 in client.statuses)


def wait_goaway(client):
    # Not abuse: one request (to a path the test server answers when told), then the server's GOAWAY and the
    # answer awaited (the server is stopping gracefully).
    client.send(client.headers(1, client.request_headers("/slow")))
    # Long enough for a loaded machine: the answer waits for the test, which may itself wait for a thread.
    client.read_frames(90, until=lambda: client.goaway is not None and 1 in client.statuses)


def slow_answer(client):
    # Not abuse: one whole request to a path the test server answers when told (after the request timeout), and its
    # answer awaited.
    client.send(client.headers(1, client.request_headers("/slow")))
    client.read_frames(90, until=lambda: 1 in client.statuses)


CASES = {
    "rapid-reset": rapid_reset,
    "continuation-flood": continuation_flood,
    "settings-flood": settings_flood,
    "too-many-streams": too_many_streams,
    "hpack-bomb": hpack_bomb,
    "large-headers": large_headers,
    "wait-goaway": wait_goaway,
    "slow-answer": slow_answer,
    "slow-request": slow_request,
    "split-preface": split_preface,
    "idle": idle,
}


class WellBehaved(threading.Thread):
    """httpx over HTTP/2, one TLS connection, GETting `path` until told to stop."""

    def __init__(self, port, ca_file, path):
        super().__init__(daemon=True)
        self.url = "https://127.0.0.1:%d%s" % (port, path)
        self.ca_file = ca_file
        self.ok = 0
        self.other = 0
        self.errors = []
        self.stopping = threading.Event()
        self.answered = threading.Condition()

    def run(self):
        import httpx

        context = ssl.create_default_context(cafile=self.ca_file)
        with httpx.Client(http1=False, http2=True, verify=context, timeout=10) as client:
            while not self.stopping.is_set():
                try:
                    response = client.get(self.url)
                    good = response.status_code == 200 and response.http_version == "HTTP/2"
                except httpx.HTTPError as error:
                    good = False
                    self.errors.append(repr(error))
                with self.answered:
                    if good:
                        self.ok += 1
                    else:
                        self.other += 1
                    self.answered.notify_all()

    def answered_since(self, count, seconds):
        """Waits until more than `count` requests have been answered 200 (at most `seconds`)."""
        with self.answered:
            return self.answered.wait_for(lambda: self.ok > count or not self.is_alive(), timeout=seconds) and self.ok > count


def main():
    global STREAM_PATH
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--case", choices=sorted(CASES), required=True, nargs="+")
    parser.add_argument("--secret", default="")
    parser.add_argument("--tls", metavar="CAFILE", help="TLS with ALPN h2, the server's certificate checked against CAFILE")
    parser.add_argument("--alongside", metavar="PATH", help="a well-behaved httpx client GETs PATH meanwhile (with --tls)")
    parser.add_argument("--stream-path", default=STREAM_PATH, help="where too-many-streams opens its streams")
    arguments = parser.parse_args()
    STREAM_PATH = arguments.stream_path
    neighbour = None
    if arguments.alongside:
        neighbour = WellBehaved(arguments.port, arguments.tls, arguments.alongside)
        neighbour.start()
        neighbour.answered_since(0, 10)
    for case in arguments.case:
        before = neighbour.ok if neighbour else 0
        client = Client(arguments.port, arguments.secret, split_preface=case == "split-preface", ca_file=arguments.tls)
        CASES[case](client)
        result = client.result()
        if neighbour:
            # The neighbour was answered while this case's connection was open, or right after.
            result["neighbourAnswered"] = neighbour.answered_since(before, 10)
        print(json.dumps(result), flush=True)
    if neighbour:
        neighbour.stopping.set()
        neighbour.join(15)
        print(json.dumps({"ok": neighbour.ok, "other": neighbour.other, "errors": neighbour.errors[:5]}), flush=True)


if __name__ == "__main__":
    main()
