import Foundation
import Herald
import HeraldSocketReceiver
import HeraldTesting
import Testing

final class Collector: MessageHandler, Sendable {
    let messages = Locked<[RemoteMessage]>([])
    func didReceive(_ message: RemoteMessage) async throws { messages.withLock { $0.append(message) } }
}

func withSocketHerald(
    options: (SocketAddress) -> SocketReceiver.Options = { SocketReceiver.Options(addresses: [$0]) },
    address: SocketAddress,
    logs: LogCollector? = nil,
    _ body: (Herald, SocketReceiver, Collector, SocketAddress) async throws -> Void
) async throws {
    var configuration = Herald.Configuration(senderID: "1234567890")
    configuration.projectID = "demo"
    let herald =
        logs.map { Herald(configuration: patientShutdown(configuration), logger: $0.logger()) }
        ?? Herald(configuration: patientShutdown(configuration))
    let receiver = SocketReceiver(options: options(address))
    let collector = Collector()
    try herald.register(receiver)
    try herald.register(collector)
    try await herald.start()
    let bound = try await receiver.listeningAddresses().first ?? address
    do {
        try await body(herald, receiver, collector, bound)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
    #expect(herald.loop.statistics.liveHandles == 0)
}

func socketPath() -> String { "/tmp/herald-sock-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

@Suite("SocketReceiver: JSON lines over Unix and TCP sockets", .serialized)
struct SocketReceiverTests {
    @Test("messages are answered in order with FCM names and Google-shaped errors", arguments: ["unix", "tcp"])
    func answersInOrder(kind: String) async throws {
        let address: SocketAddress = kind == "unix" ? .unix(path: socketPath()) : .tcp(host: "127.0.0.1", port: 0)
        try await withSocketHerald(address: address) { herald, _, collector, bound in
            let token = try await herald.token()
            let client = try TestSocketClient(bound)
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n")
            client.send(#"{"message": {"token": "someone-else", "data": {"n": "2"}}}"# + "\r\n")
            client.send("not json\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "4"}}, "validate_only": true}"# + "\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "5"}}}"# + "\n")
            let lines = client.readLines(5)
            #expect(lines.count == 5)
            let answers = lines.compactMap { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers[0]["name"]?.stringValue?.hasPrefix("projects/demo/messages/") == true)
            #expect(answers[1]["error"]?["code"] == 404)
            #expect(answers[1]["error"]?["status"] == "NOT_FOUND")
            #expect(answers[1]["error"]?["details"]?.arrayValue?.first?["errorCode"] == "UNREGISTERED")
            #expect(answers[2]["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(answers[3]["name"] != nil)
            #expect(answers[4]["name"] != nil)
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.map { $0.data["n"] } } == ["1", "5"])
        }
    }

    @Test(
        "a 40 KB line (refused: past FCM's payload limit) between small ones: each answered, the next lines read whole, the line storage back to at most 8 KB"
    )
    func largeLineThenSmall() async throws {
        try await withSocketHerald(address: .unix(path: socketPath())) { herald, receiver, collector, bound in
            let token = try await herald.token()
            let client = try TestSocketClient(bound)
            let large = String(repeating: "x", count: 40_000)
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "\#(large)"}}}"# + "\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "3"}}}"# + "\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "4"}}}"# + "\n")
            let answers = client.readLines(4).compactMap { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers.count == 4)
            #expect(answers.map { $0["name"] != nil } == [true, false, true, true])
            #expect(answers[1]["error"]?["status"] == "INVALID_ARGUMENT")
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.map { $0.data["n"] } } == ["1", "3", "4"])
            // The connection is still open, and what it keeps for its next line is not the large line's room.
            let rooms = try await receiver.lineStorageRooms()
            #expect(rooms.count == 1 && rooms.allSatisfy { $0 <= KeptStorage.limit }, "\(rooms)")
        }
    }

    @Test("a half-closed client gets its answers, then end of file")
    func halfClosedClient() async throws {
        try await withSocketHerald(address: .unix(path: socketPath())) { herald, _, _, bound in
            let token = try await herald.token()
            let client = try TestSocketClient(bound)
            client.send(
                #"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n"
                    + #"{"message": {"token": "\#(token)", "data": {"n": "2"}}}"#)
            client.halfClose()
            let lines = client.readLines(2)
            #expect(lines.count == 1, "the last line had no newline, so it is not a message")
            #expect(client.readsEndOfFile())
        }
    }

    @Test("an oversized line is refused with INVALID_ARGUMENT and the connection closed; the receiver goes on")
    func oversizedLine() async throws {
        let options: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.maximumLineBytes = 1024
            return options
        }
        try await withSocketHerald(options: options, address: .unix(path: socketPath())) { herald, _, collector, bound in
            let token = try await herald.token()
            let big = try TestSocketClient(bound)
            big.send(String(repeating: "x", count: 5000))
            let lines = big.readLines(1)
            #expect(lines.first.flatMap { try? JSONParser.parse(Array($0.utf8)) }?["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(big.readsEndOfFile())
            let next = try TestSocketClient(bound)
            next.send(#"{"message": {"token": "\#(token)", "data": {"n": "ok"}}}"# + "\n")
            #expect(next.readLines(1).first?.contains("projects/") == true)
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.count } == 1)
        }
    }

    @Test("a silent client is closed after the idle timeout")
    func idleClient() async throws {
        let options: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.idleTimeout = .milliseconds(100)
            return options
        }
        try await withSocketHerald(options: options, address: .unix(path: socketPath())) { _, _, _, bound in
            let client = try TestSocketClient(bound)
            #expect(client.readsEndOfFile())
        }
    }

    @Test("a Unix socket path that already exists stops the start with EADDRINUSE")
    func pathExists() async throws {
        let path = socketPath()
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let herald = Herald()
        try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: path)])))
        await #expect(throws: HeraldError.self) { try await herald.start() }
        await herald.shutdown()
    }

    @Test("a TCP address beyond loopback is refused at start unless allowUnauthenticatedNetwork; loopback and Unix sockets need nothing")
    func networkAddressNeedsPermission() async throws {
        for host in ["0.0.0.0", "::", "192.0.2.1"] {
            let herald = Herald()
            try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: socketPath()), .tcp(host: host, port: 0)])))
            let error = await #expect(throws: HeraldError.self) { try await herald.start() }
            #expect("\(String(describing: error))".contains("no authentication"), "\(String(describing: error))")
            await herald.shutdown()
        }
        #expect(SocketAddress.tcp(host: "127.0.0.2", port: 1).isLoopback && SocketAddress.tcp(host: "::1", port: 1).isLoopback)
        #expect(SocketAddress.tcp(host: "localhost", port: 1).isLoopback && SocketAddress.unix(path: "/x").isLoopback)
        #expect(
            !SocketAddress.tcp(host: "127.0.0.1.5", port: 1).isLoopback && !SocketAddress.tcp(host: "::ffff:10.0.0.1", port: 1).isLoopback)
        try await withSocketHerald(address: .tcp(host: "localhost", port: 0)) { _, _, _, bound in
            #expect(bound.port != 0)
        }
        let allowed: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.allowUnauthenticatedNetwork = true
            return options
        }
        try await withSocketHerald(options: allowed, address: .tcp(host: "0.0.0.0", port: 0)) { _, _, _, bound in
            #expect(bound.port != 0)
        }
    }

    @Test("connections past the limit are closed at accept with one warning for the whole storm and a notice when below the limit again")
    func connectionLimitLogsOnce() async throws {
        let logs = LogCollector()
        let limited: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.maximumConnections = 2
            return options
        }
        try await withSocketHerald(options: limited, address: .unix(path: socketPath()), logs: logs) { herald, receiver, _, address in
            var kept = try (0..<2).map { _ in try TestSocketClient(address) }
            #expect(try await eventually { try await herald.loop.submit { receiver.openConnections } == 2 })
            for _ in 0..<10 {
                let refused = try TestSocketClient(address)
                #expect(refused.read { _ in false }.isEmpty, "closed, nothing written")
            }
            #expect(logs.all.filter { $0.message.hasPrefix("too many connections") }.count == 1)
            kept.removeFirst()  // its socket closes
            #expect(
                await eventually {
                    logs.all.contains { $0.message == "below the connection limit again" && $0.metadata["refused"] == "10" }
                })
            _ = kept
        }
    }

    @Test("a Unix socket file is 0600 by default and takes the configured mode")
    func socketFileMode() async throws {
        try await withSocketHerald(address: .unix(path: socketPath())) { _, _, _, bound in
            guard case .unix(let path) = bound else {
                Issue.record("not a Unix socket")
                return
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.uint16Value == 0o600)
        }
        let groupShared: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.unixSocketMode = 0o660
            return options
        }
        try await withSocketHerald(options: groupShared, address: .unix(path: socketPath())) { _, _, _, bound in
            guard case .unix(let path) = bound else {
                Issue.record("not a Unix socket")
                return
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.posixPermissions] as? NSNumber)?.uint16Value == 0o660)
        }
    }

    @Test("bad lines each get their own INVALID_ARGUMENT answer naming the problem; good lines around them go through")
    func badLines() async throws {
        try await withSocketHerald(address: .unix(path: socketPath())) { herald, _, collector, bound in
            let token = try await herald.token()
            let client = try TestSocketClient(bound)
            let good = #"{"message": {"token": "\#(token)", "data": {"n": "ok"}}}"#
            var lines: [[UInt8]] = [
                Array(good.utf8),
                Array(#"{"message": {"token": "\#(token)", "data": {"n": "#.utf8),  // truncated
                Array(#"{"message": {"token": 42}}"#.utf8),  // wrong type
                Array(#"{"message": {"token": "\#(token)", "data": {"n": 1}}}"#.utf8),  // data values are strings
                Array(#"{"message": {"token": "\#(token)", "colour": "red"}}"#.utf8),  // unknown field
                Array(#"[1, 2, 3]"#.utf8),  // not an object
            ]
            // invalid UTF-8
            lines.append(Array(#"{"message": {"token": "\#(token)", "data": {"n": "\#u{1}"#.utf8) + [0xC3, 0x28] + Array(#""}}}"#.utf8))
            lines.append(Array(good.utf8))
            var bytes: [UInt8] = []
            for line in lines { bytes += line + [UInt8(ascii: "\n")] }
            bytes.withUnsafeBytes { _ = Glibc.send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            let answers = client.readLines(lines.count).map { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers.count == lines.count)
            #expect(answers.first??["name"] != nil)
            #expect(answers.last??["name"] != nil)
            for (index, answer) in answers.enumerated().dropFirst().dropLast() {
                #expect(answer?["error"]?["status"] == "INVALID_ARGUMENT", "line \(index)")
                #expect(answer?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "INVALID_ARGUMENT", "line \(index)")
                #expect(answer?["error"]?["message"]?.stringValue?.isEmpty == false, "line \(index)")
            }
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.count } == 2)
        }
    }

    @Test("a client that trickles a line is closed after the line timeout; a client that leaves mid-line loses nothing of others")
    func slowAndVanishingClients() async throws {
        let options: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.lineTimeout = .milliseconds(300)
            return options
        }
        try await withSocketHerald(options: options, address: .unix(path: socketPath())) { herald, _, collector, bound in
            let token = try await herald.token()
            let steady = try TestSocketClient(bound)
            let slow = try TestSocketClient(bound)
            // One byte, then a pause, until the server hangs up: the bytes keep the idle timer happy, not the line timer.
            var closedByServer = false
            for byte in #"{"message": {"token": "x"}}"#.utf8.prefix(200) {
                slow.send(String(UnicodeScalar(byte)))
                var descriptor = pollfd(fd: slow.fd, events: Int16(POLLIN), revents: 0)
                if poll(&descriptor, 1, 100) > 0 {
                    closedByServer = true
                    break
                }
            }
            #expect(closedByServer)
            #expect(slow.readsClosed())

            let leaving = try TestSocketClient(bound)
            leaving.send(#"{"message": {"token": "\#(token)", "data": {"n": "half"#)
            _ = shutdown(leaving.fd, Int32(SHUT_RDWR))  // gone mid-line: nothing is delivered for it

            steady.send(#"{"message": {"token": "\#(token)", "data": {"n": "steady"}}}"# + "\n")
            #expect(steady.readLines(1).first?.contains("projects/demo/messages/") == true)
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.map { $0.data["n"] } } == ["steady"])
        }
    }

    @Test("a stale socket file left by a killed daemon is replaced; a socket someone listens on is not")
    func staleSocketFile() async throws {
        let path = socketPath()
        defer { unlink(path) }
        // A socket file with no listener, as SIGKILL leaves it: bound, never unlinked.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        close(stale)
        try await withSocketHerald(address: .unix(path: path)) { herald, _, _, bound in
            let token = try await herald.token()
            let client = try TestSocketClient(bound)
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n")
            #expect(client.readLines(1).first?.contains("projects/demo/messages/") == true)

            // While this one listens, a second receiver on the same path is refused.
            let second = Herald()
            try second.register(SocketReceiver(options: .init(addresses: [.unix(path: path)])))
            await #expect(throws: HeraldError.self) { try await second.start() }
            await second.shutdown()
        }
    }

    @Test("pipelined lines past a full bus wait for room instead of being refused")
    func pipelinedLinesWaitForRoom() async throws {
        // No sleep needed: the 50 lines arrive in one read and are offered before any handler task runs, so the
        // bus (4 in flight) is full after the fourth line and the rest must be held.
        final class SlowHandler: MessageHandler, Sendable {
            let count = Locked(0)
            func didReceive(_ message: RemoteMessage) async throws {
                count.withLock { $0 += 1 }
            }
        }
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        configuration.maxInFlight = 4
        let herald = Herald(configuration: patientShutdown(configuration))
        let path = socketPath()
        let receiver = SocketReceiver(options: .init(addresses: [.unix(path: path)]))
        let handler = SlowHandler()
        try herald.register(receiver)
        try herald.register(handler)
        try await herald.start()
        let token = try await herald.token()
        let client = try TestSocketClient(.unix(path: path))
        var lines = ""
        for n in 0..<50 { lines += #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# + "\n" }
        client.send(lines)
        let answers = client.readLines(50)
        #expect(answers.count == 50)
        #expect(answers.allSatisfy { $0.contains("projects/demo/messages/") }, "\(answers.filter { !$0.contains("projects/") }.prefix(2))")
        try await herald.waitUntilIdle()
        #expect(handler.count.withLock { $0 } == 50)
        await herald.shutdown()
    }

    @Test(
        "at a stop the answers written go out whole: a client that reads only once the stop began gets every answer, then the end of the stream (also when it had half-closed, so that the session was already ending)",
        arguments: [false, true])
    func answersGoOutAtStop(halfClosed: Bool) async throws {
        // Far more answers than the socket's buffers hold: most wait in the receiver until the client reads.
        let count = 10_000
        try await answersWaiting(count, halfClosed: halfClosed) { herald, client in
            let stopped = Task { await herald.shutdown() }
            // On a thread of its own: a client that waits for a turn of Swift's cooperative pool is one that does not read.
            nonisolated(unsafe) let reader = client
            let (answers, closed) = try await onOwnThread { (reader.readLines(count + 1), reader.readsClosed()) }
            #expect(answers.count == count)
            #expect(
                answers.allSatisfy { $0.contains("projects/demo/messages/") }, "\(answers.filter { !$0.contains("projects/") }.prefix(2))")
            #expect(closed)
            await stopped.value
        }
    }

    /// A Herald whose socket receiver was sent `count` lines on `client`'s connection (then the end of its stream, when
    /// `halfClosed`) and has handled them all, their answers waiting for the client to read them.
    private func answersWaiting(
        _ count: Int, halfClosed: Bool = false, _ body: (Herald, TestSocketClient) async throws -> Void
    ) async throws {
        final class Counter: MessageHandler, Sendable {
            let count = Locked(0)
            func didReceive(_ message: RemoteMessage) async throws { count.withLock { $0 += 1 } }
        }
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        let herald = Herald(configuration: patientShutdown(configuration))
        let path = socketPath()
        let handler = Counter()
        try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: path)])))
        try herald.register(handler)
        try await herald.start()
        let token = try await herald.token()
        let client = try TestSocketClient(.unix(path: path))
        var lines = ""
        for n in 0..<count { lines += #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# + "\n" }
        client.send(lines)
        if halfClosed { client.halfClose() }
        #expect(await eventually { handler.count.withLock { $0 } == count })
        try await body(herald, client)
    }

    @Test(
        "at a stop a client that reads its answers slowly, for longer than the linger, still gets every one: a connection is closed as it is only once its peer has taken nothing for the linger"
    )
    func slowReaderAtStop() async throws {
        let count = 10_000
        try await answersWaiting(count) { herald, client in
            let stopped = Task { await herald.shutdown() }
            // 64 KiB every 300 ms: the answers (500 KB) take some 2.4 s to read, more than twice the linger. The kernel
            // takes more of the receiver's queue only once most of its own has been read, so that queue stays as it is
            // for longer than the linger while the client reads (it was taken for a client that had stopped: 7,974
            // answers, every time). The pace is what is tested; on a thread of its own, so that the pace is the
            // client's, not the cooperative pool's.
            nonisolated(unsafe) let reader = client
            let (data, closed) = try await onOwnThread { () -> ([UInt8], Bool) in
                var data: [UInt8] = []
                while data.count(where: { $0 == UInt8(ascii: "\n") }) < count {
                    let chunk = reader.read(until: { $0.count >= 65_536 })
                    if chunk.isEmpty { break }
                    data += chunk
                    Thread.sleep(forTimeInterval: 0.3)
                }
                return (data, reader.readsClosed())
            }
            let answers = String(decoding: data, as: UTF8.self).split(separator: "\n")
            #expect(answers.count == count)
            #expect(answers.allSatisfy { $0.contains("projects/demo/messages/") })
            #expect(closed)
            await stopped.value
        }
    }

    @Test("at a stop a client that takes none of its answers is closed once the linger has passed; the stop ends")
    func stuckReaderAtStop() async throws {
        let count = 10_000
        try await answersWaiting(count) { herald, client in
            await herald.shutdown()
            // What the kernel's buffers held, then the end: the rest was never written.
            let data = client.read(until: { _ in false })
            #expect(data.count { $0 == UInt8(ascii: "\n") } < count)
            #expect(client.readsClosed())
        }
    }
}
