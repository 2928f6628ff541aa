"""An HTTP/2 server over TLS (ALPN h2) on the h2 library (python-hyper), for the HTTP client's HTTP/2 test
(Tests/HeraldHTTPClientTests).

Listens on 127.0.0.1 with --cert and --key, prints "PORT <n>" once it listens, and answers every request with
200 and a JSON object: the method, the path, the connection's number and the stream's ID. It runs until its
standard input closes.
"""
import argparse
import asyncio
import itertools
import json
import ssl
import sys

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, StreamEnded

connection_numbers = itertools.count(1)


class H2Protocol(asyncio.Protocol):
    def __init__(self):
        self.connection = H2Connection(config=H2Configuration(client_side=False, header_encoding="utf-8"))
        self.number = next(connection_numbers)
        self.requests = {}
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.connection.initiate_connection()
        self.transport.write(self.connection.data_to_send())

    def data_received(self, data):
        for event in self.connection.receive_data(data):
            if isinstance(event, RequestReceived):
                self.requests[event.stream_id] = dict(event.headers)
            elif isinstance(event, DataReceived):
                self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                self.respond(event.stream_id)
        self.transport.write(self.connection.data_to_send())

    def respond(self, stream_id):
        headers = self.requests.pop(stream_id, {})
        body = json.dumps({
            "method": headers.get(":method"),
            "path": headers.get(":path"),
            "connection": self.number,
            "stream": stream_id,
        }).encode()
        self.connection.send_headers(stream_id, [
            (":status", "200"), ("content-type", "application/json"), ("content-length", str(len(body))),
        ])
        self.connection.send_data(stream_id, body, end_stream=True)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    loop = asyncio.get_running_loop()
    server = await loop.create_server(H2Protocol, "127.0.0.1", 0, ssl=context)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
