import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop

/// An echo server: every byte read is written back; end of file from the peer closes after flushing.
func startEchoServer(on loop: EventLoop, at address: SocketAddress) async throws -> StreamServer {
    try await StreamServer.listen(on: loop, at: address) { connection in
        connection.onRead = { bytes in connection.write(bytes) }
        connection.onEnd = { connection.shutdownWriting { _ in connection.close() } }
        connection.startReading()
    }
}

/// Bytes waiting in a socket's receive buffer (FIONREAD).
func bytesWaiting(_ fd: Int32) -> Int {
    var count: Int32 = 0
    _ = ioctl(fd, UInt(FIONREAD), &count)
    return Int(count)
}

@Suite("Stream servers and connections over TCP and Unix sockets")
struct StreamTests {
    static let addresses: [String] = ["tcp", "unix"]

    static func address(_ kind: String) -> SocketAddress {
        kind == "tcp" ? .tcp(host: "127.0.0.1", port: 0) : .unix(path: temporarySocketPath())
    }

    /// A loop, a server at an address of `kind` whose connection's bytes `collector` collects, and a client connected
    /// to it (`accepted` holds the server's side once it is accepted).
    static func withCollectedConnection(
        _ kind: String,
        _ body: (EventLoop, StreamServer, StreamConnection, Locked<StreamConnection?>, ByteCollector) async throws -> Void
    ) async throws {
        try await withRunningLoop { loop in
            let accepted = Locked<StreamConnection?>(nil)
            let collector = ByteCollector()
            let server = try await StreamServer.listen(on: loop, at: address(kind)) { connection in
                accepted.withLock { $0 = connection }
                collector.attach(to: connection)
            }
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            #expect(await eventually { accepted.withLock { $0 } != nil })
            try await body(loop, server, client, accepted, collector)
        }
    }

    @Test("echo round trip", arguments: addresses)
    func echo(kind: String) async throws {
        try await withRunningLoop { loop in
            let server = try await startEchoServer(on: loop, at: Self.address(kind))
            if kind == "tcp" { #expect((server.port ?? 0) > 0) }
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            let collector = ByteCollector()
            try await loop.submit {
                collector.attach(to: client)
                client.write(Array("hello, herald\n".utf8))
            }
            await collector.waitForBytes(14)
            #expect(String(decoding: collector.bytes, as: UTF8.self) == "hello, herald\n")
            try await loop.submit { client.close() }
            await collector.waitForClose()
            #expect(collector.closeError == nil)
            try await loop.submit { server.close() }
        }
    }

    @Test("16 MiB transfer arrives complete and in order", arguments: addresses)
    func largeTransfer(kind: String) async throws {
        try await withRunningLoop { loop in
            let server = try await startEchoServer(on: loop, at: Self.address(kind))
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            let payload = patternBytes(count: 16 * 1024 * 1024)
            let collector = ByteCollector()
            let writeResult = Locked<UVError??>(nil)
            try await loop.submit {
                collector.attach(to: client)
                client.write(payload) { error in writeResult.withLock { $0 = .some(error) } }
                client.shutdownWriting()
            }
            await collector.waitForEnd()
            #expect(collector.bytes.count == payload.count)
            #expect(collector.bytes == payload)
            #expect(writeResult.withLock { $0 } == .some(nil))
            try await loop.submit { client.close() }
        }
    }

    @Test("pause stops delivery, resume delivers what the kernel buffered", arguments: addresses)
    func pauseResume(kind: String) async throws {
        try await withRunningLoop { loop in
            let serverSide = Locked<StreamConnection?>(nil)
            let received = ByteCollector()
            let server = try await StreamServer.listen(on: loop, at: Self.address(kind)) { connection in
                serverSide.withLock { $0 = connection }
                received.attach(to: connection)
                connection.pauseReading()
            }
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            #expect(await eventually { serverSide.withLock { $0 } != nil })
            let connection = try #require(serverSide.withLock { $0 })
            try await loop.submit { client.write(Array(repeating: UInt8(7), count: 1000)) }
            // The bytes are in the server socket's kernel buffer, yet none was delivered while paused.
            let fd = try await loop.submit { connection.fileDescriptor }
            #expect(await eventually { bytesWaiting(fd) == 1000 })
            try await loop.submit {}
            #expect(received.bytes.isEmpty)
            #expect(try await loop.submit { !connection.isReading })
            try await loop.submit { connection.resumeReading() }
            await received.waitForBytes(1000)
            #expect(received.bytes.count == 1000)
            try await loop.submit { client.close() }
            await received.waitForEnd()
            try await loop.submit {
                connection.close()
                server.close()
            }
            await received.waitForClose()
        }
    }

    @Test("a peer that closes mid-write gives the writer a typed error, and the loop keeps running", arguments: addresses)
    func peerClosesMidWrite(kind: String) async throws {
        try await withRunningLoop { loop in
            let server = try await StreamServer.listen(on: loop, at: Self.address(kind)) { connection in
                // Read nothing and close at once, so the writer meets a reset or a broken pipe.
                connection.close()
            }
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            let collector = ByteCollector()
            let errors = Locked<[UVError]>([])
            try await loop.submit {
                collector.attach(to: client)
                let chunk = Array(repeating: UInt8(1), count: 256 * 1024)
                for _ in 0..<64 {
                    client.write(chunk) { error in if let error { errors.withLock { $0.append(error) } } }
                }
            }
            await collector.waitForClose()
            let seen = errors.withLock { $0 } + (collector.closeError.map { [$0] } ?? [])
            let expected: [UVError] = [.brokenPipe, .connectionReset, .cancelled, .endOfFile]
            #expect(!seen.isEmpty || collector.ended)
            #expect(seen.allSatisfy { expected.contains($0) }, "unexpected errors: \(seen)")
            // The loop is still serving.
            #expect(try await loop.submit { loop.inEventLoop })
            try await loop.submit { server.close() }
        }
    }

    @Test("connection refused is a typed error naming the address")
    func connectionRefused() async throws {
        try await withRunningLoop { loop in
            // A port bound but not listening: nothing answers there, and no other test can take it meanwhile (a
            // listener closed first left its port free, and a test running beside this one once listened on it).
            let (fd, port) = try boundLoopbackSocket()
            defer { close(fd) }
            let address = SocketAddress.tcp(host: "127.0.0.1", port: port)
            let error = await #expect(throws: UVError.self) { try await StreamConnection.connect(to: address, on: loop) }
            #expect(error == .connectionRefused)
            #expect(error?.name == "ECONNREFUSED")
            #expect(error?.description.contains("\(address)") == true)
        }
    }

    @Test("connecting to a Unix path with nothing there is ENOENT")
    func unixMissing() async throws {
        try await withRunningLoop { loop in
            let error = await #expect(throws: UVError.self) {
                try await StreamConnection.connect(to: .unix(path: temporarySocketPath("missing")), on: loop)
            }
            #expect(error == .notFound)
        }
    }

    @Test("listening on a Unix path that already exists is EADDRINUSE and leaves the file alone")
    func unixPathExists() async throws {
        try await withRunningLoop { loop in
            let path = temporarySocketPath("exists")
            #expect(FileManager.default.createFile(atPath: path, contents: Data("keep me".utf8)))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let error = await #expect(throws: UVError.self) {
                try await StreamServer.listen(on: loop, at: .unix(path: path)) { _ in }
            }
            #expect(error == .addressInUse)
            #expect(FileManager.default.contents(atPath: path) == Data("keep me".utf8))
        }
    }

    @Test("a second listener on a live Unix socket path is EADDRINUSE; closing removes the path")
    func unixPathInUse() async throws {
        try await withRunningLoop { loop in
            let path = temporarySocketPath("busy")
            let first = try await StreamServer.listen(on: loop, at: .unix(path: path)) { _ in }
            await #expect(throws: UVError.addressInUse) {
                try await StreamServer.listen(on: loop, at: .unix(path: path)) { _ in }
            }
            #expect(FileManager.default.fileExists(atPath: path))
            let closed = ByteCollector()
            try await loop.submit {
                first.onClose = { closed.markClosed(nil) }
                first.close()
            }
            await closed.waitForClose()
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    @Test("a TCP port in use is EADDRINUSE")
    func tcpPortInUse() async throws {
        try await withRunningLoop { loop in
            let first = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { _ in }
            await #expect(throws: UVError.addressInUse) {
                try await StreamServer.listen(on: loop, at: first.localAddress) { _ in }
            }
            try await loop.submit { first.close() }
        }
    }

    @Test("bad addresses are refused with clear errors")
    func badAddresses() async throws {
        try await withRunningLoop { loop in
            let longPath = "/tmp/" + String(repeating: "x", count: 200)
            let tooLong = await #expect(throws: UVError.self) {
                try await StreamServer.listen(on: loop, at: .unix(path: longPath)) { _ in }
            }
            #expect(tooLong?.name == "ENAMETOOLONG")
            await #expect(throws: UVError.invalidArgument) {
                try await StreamServer.listen(on: loop, at: .tcp(host: "not-an-address", port: 0)) { _ in }
            }
            await #expect(throws: UVError.invalidArgument) {
                try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 70_000)) { _ in }
            }
        }
    }

    @Test("half-close: the server sees end of file and can still answer")
    func halfClose() async throws {
        try await withRunningLoop { loop in
            let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
                var total = 0
                connection.onRead = { total += $0.count }
                connection.onEnd = {
                    connection.write(Array("got \(total)".utf8)) { _ in connection.close() }
                }
                connection.startReading()
            }
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            let collector = ByteCollector()
            try await loop.submit {
                collector.attach(to: client)
                client.write(Array(repeating: UInt8(0), count: 5000))
                client.shutdownWriting()
            }
            await collector.waitForEnd()
            #expect(String(decoding: collector.bytes, as: UTF8.self) == "got 5000")
            try await loop.submit {
                client.close()
                server.close()
            }
        }
    }

    @Test(
        "writes of one turn of the loop are gathered: nothing is sent until the turn ends, then all of it in order; each completion runs once",
        arguments: addresses)
    func writesOfOneTurnAreGathered(kind: String) async throws {
        try await Self.withCollectedConnection(kind) { loop, server, client, accepted, collector in
            let completions = Locked<[UVError?]>([])
            let during: (queued: Int, arrived: Int) = try await loop.submit {
                for line in 0..<100 {
                    client.write(Array("line \(line)\n".utf8)) { error in completions.withLock { $0.append(error) } }
                }
                // A write built in place, as receivers write their answers.
                client.write { $0.append(contentsOf: "last\n".utf8) }
                // Still in the same turn: the bytes wait in the connection, none reached the peer.
                return (client.writeQueueSize, accepted.withLock { bytesWaiting($0!.fileDescriptor) })
            }
            let expected = (0..<100).map { "line \($0)\n" }.joined() + "last\n"
            #expect(during.queued == expected.utf8.count)
            #expect(during.arrived == 0)
            await collector.waitForBytes(expected.utf8.count)
            #expect(String(decoding: collector.bytes, as: UTF8.self) == expected)
            #expect(await eventually { completions.withLock { $0.count } == 100 })
            #expect(completions.withLock { $0.allSatisfy { $0 == nil } })
            try await loop.submit {
                client.close()
                server.close()
            }
        }
    }

    @Test(
        "a write's completion that writes again is flushed at once, and bytes written just before close() or shutdownWriting() still go out",
        arguments: addresses)
    func gatheredWritesAroundCompletionsAndClosing(kind: String) async throws {
        try await withRunningLoop { loop in
            let collector = ByteCollector()
            let server = try await StreamServer.listen(on: loop, at: Self.address(kind)) { connection in
                collector.attach(to: connection)
            }
            // The completion's write must reach the peer although nothing else happens on the loop after it.
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            try await loop.submit {
                client.write(Array("first\n".utf8)) { _ in client.write(Array("second\n".utf8)) }
            }
            await collector.waitForBytes(13)
            #expect(String(decoding: collector.bytes, as: UTF8.self) == "first\nsecond\n")
            // Written, then half-closed in the same turn: the peer reads the bytes, then end of file.
            try await loop.submit {
                client.write(Array("before shutdown\n".utf8))
                client.shutdownWriting()
            }
            await collector.waitForEnd()
            #expect(String(decoding: collector.bytes, as: UTF8.self) == "first\nsecond\nbefore shutdown\n")
            try await loop.submit { client.close() }

            // Written, then closed in the same turn: the bytes leave before the close.
            let second = ByteCollector()
            let server2 = try await StreamServer.listen(on: loop, at: Self.address(kind)) { connection in
                second.attach(to: connection)
            }
            let client2 = try await StreamConnection.connect(to: server2.localAddress, on: loop)
            try await loop.submit {
                client2.write(Array("goodbye\n".utf8))
                client2.close()
            }
            await second.waitForEnd()
            #expect(String(decoding: second.bytes, as: UTF8.self) == "goodbye\n")
            try await loop.submit {
                server.close()
                server2.close()
            }
        }
    }

    @Test("a write made from inside a write's body follows the body's bytes; both completions run", arguments: addresses)
    func writeInsideWrite(kind: String) async throws {
        try await Self.withCollectedConnection(kind) { loop, server, client, accepted, collector in
            let completions = Locked<[String]>([])
            try await loop.submit {
                client.write(Array("first\n".utf8))
                client.write(completion: { _ in completions.withLock { $0.append("outer") } }) { bytes in
                    bytes.append(contentsOf: "outer ".utf8)
                    client.write(completion: { _ in completions.withLock { $0.append("inner") } }) {
                        $0.append(contentsOf: "inner\n".utf8)
                    }
                    bytes.append(contentsOf: "body\n".utf8)
                }
            }
            let expected = "first\nouter body\ninner\n"
            await collector.waitForBytes(expected.utf8.count)
            #expect(String(decoding: collector.bytes, as: UTF8.self) == expected)
            #expect(await eventually { completions.withLock { $0.count } == 2 })
            try await loop.submit {
                client.close()
                server.close()
            }
        }
    }

    @Test("writing to a closed connection completes with ECANCELED")
    func writeAfterClose() async throws {
        try await withRunningLoop { loop in
            let server = try await startEchoServer(on: loop, at: .tcp(host: "127.0.0.1", port: 0))
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            let error: UVError? = try await loop.submit {
                client.close()
                var result: UVError?
                client.write(Array("late".utf8)) { result = $0 }
                return result
            }
            #expect(error == .cancelled)
            try await loop.submit { server.close() }
        }
    }
}
