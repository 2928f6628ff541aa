"""Half-open TLS handshakes from a process of their own: opens --count connections to 127.0.0.1:--port, sends each
the ClientHello in --hello (a real client's first flight, caught by the test) and nothing more, prints
`ready COUNT`, then `answered COUNT` once the server has answered (its first flight) or closed every one of them,
then waits for the server to close every one (end of file or reset) and prints `closed COUNT`, or `closed N of
COUNT` when --wait seconds pass first (`answered` is then printed before it if it was not yet).

Tests/HeraldTLSTests (TLSBadInputTests.manyHalfOpen) runs it so that the clients' descriptors are this process's,
not the test process's: its soft RLIMIT_NOFILE is raised to the hard limit first.
"""
import argparse
import resource
import select
import socket
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--hello", required=True, help="a file holding the ClientHello record")
    parser.add_argument("--wait", type=float, default=60)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(args.hello, "rb") as file:
        hello = file.read()
    sockets = []
    for _ in range(args.count):
        client = socket.create_connection(("127.0.0.1", args.port), timeout=10)
        client.sendall(hello)
        sockets.append(client)
    print(f"ready {len(sockets)}", flush=True)
    poller = select.poll()
    open_ones = {}
    for client in sockets:
        poller.register(client.fileno(), select.POLLIN)
        open_ones[client.fileno()] = client
    answered = set()
    told = False
    deadline = time.monotonic() + args.wait
    while open_ones and time.monotonic() < deadline:
        for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
            client = open_ones.get(fd)
            if client is None:
                continue
            try:
                data = client.recv(65536)
            except (ConnectionResetError, OSError):
                data = b""
            answered.add(fd)
            if not data:
                poller.unregister(fd)
                del open_ones[fd]
                client.close()
        if not told and len(answered) == len(sockets):
            print(f"answered {len(answered)}", flush=True)
            told = True
    if not told:
        print(f"answered {len(answered)} of {len(sockets)}", flush=True)
    closed = len(sockets) - len(open_ones)
    print(f"closed {closed}" if not open_ones else f"closed {closed} of {len(sockets)}", flush=True)
    sys.exit(0 if not open_ones else 1)


if __name__ == "__main__":
    main()
