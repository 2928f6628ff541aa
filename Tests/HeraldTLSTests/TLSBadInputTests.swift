import Foundation
import HeraldEventLoop
import HeraldTLS
import HeraldTesting
import Logging
import Testing

/// A real client's first flight (its ClientHello record), caught by a plain listener that `openssl s_client` connects to.
func capturedClientHello(on loop: EventLoop) async throws -> [UInt8] {
    let caught = Locked<[UInt8]>([])
    let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
        connection.onRead = { bytes in caught.withLock { $0.append(contentsOf: bytes) } }
        connection.startReading()
    }
    // The client waits for a ServerHello that never comes; `timeout` ends it.
    _ = try await runExecutable(
        URL(fileURLWithPath: "/usr/bin/timeout"),
        ["2", "openssl", "s_client", "-connect", "127.0.0.1:\(server.port ?? 0)", "-servername", "localhost", "-alpn", "h2,http/1.1"],
        input: "")
    let hello = await eventuallyValue { () -> [UInt8]? in
        let bytes = caught.withLock { $0 }
        guard bytes.count >= 5 else { return nil }
        let length = 5 + Int(bytes[3]) << 8 + Int(bytes[4])
        return bytes.count >= length ? Array(bytes[..<length]) : nil
    }
    try await loop.submit { server.close() }
    return try #require(hello)
}

/// A value behind a lock, for the tests' callbacks.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

@Suite("TLS: bad input from clients")
struct TLSBadInputTests {
    @Test("garbage before a ClientHello is refused and counted; the server goes on")
    func garbage() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            let hello = try await capturedClientHello(on: loop)
            for garbage in [
                "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\u{0}\u{1}\u{2}\u{3}\u{4}\u{5}\u{6}\u{7}", "\u{16}\u{3}\u{1}\u{0}\u{1}x",
            ] {
                let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port))
                client.send(garbage)
                client.send(String(decoding: hello, as: UTF8.self))
                _ = client.read { _ in false }  // an alert, perhaps, then the end
                #expect(client.readsClosed(), "\(garbage.debugDescription) not closed")
            }
            #expect(await eventually { context.handshakeFailures.refused == 3 })
            let result = try await sClient(port: server.port, ["-CAfile", certificates.caFile])
            #expect(result.output.contains("hello alpn=none"), "\(result.output)")
        }
    }

    @Test("a handshake cut in half and closed is counted as closed; one left half done is closed at the timeout")
    func cutHandshake() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory, handshakeTimeout: .milliseconds(500))
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                let hello = try await capturedClientHello(on: loop)
                let half = Array(hello[..<(hello.count / 2)])
                do {
                    let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port))
                    half.withUnsafeBytes { _ = send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    client.halfClose()
                    #expect(client.readsEndOfFile())
                }
                #expect(await eventually { context.handshakeFailures.closed == 1 })
                let stalled = try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port))
                half.withUnsafeBytes { _ = send(stalled.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                // Nothing more is sent: the server closes it at its handshake timeout.
                #expect(stalled.readsEndOfFile())
                let silent = try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port))
                #expect(silent.readsEndOfFile())
                #expect(await eventually { context.handshakeFailures.timedOut == 2 })
                let result = try await sClient(port: server.port, ["-CAfile", certificates.caFile])
                #expect(result.output.contains("hello alpn=none"), "\(result.output)")
                try await server.close()
            }
        }
    }

    @Test(
        "1,000 half-open handshakes: the server stays up, serves another client, and closes them all at the timeout",
        .ownProcess)
    func manyHalfOpen() async throws {
        // The clients are a Python child's descriptors, and the test has its process to itself (.ownProcess): here
        // are only the server's 1,000. Foundation's Process.run (its scan of /proc/self/fd copies whole dirents
        // past the end of readdir's buffer) can crash past some 1,360 open descriptors, which 1,000 clients and
        // their 1,000 server ends in one process, or the other tests' 400–500 beside them, would pass.
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        let count = 1000
        try #require(limit.rlim_cur >= rlim_t(count + 200), "RLIMIT_NOFILE's hard limit \(limit.rlim_max) is below \(count + 200)")
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory, handshakeTimeout: .seconds(3))
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                let helloFile = "\(directory)/client-hello"
                try Data(try await capturedClientHello(on: loop)).write(to: URL(fileURLWithPath: helloFile))
                let clients = Process()
                clients.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
                clients.arguments = [
                    repositoryRoot.appendingPathComponent("Tests/TLSPy/half_open.py").path, "--port", String(server.port), "--count",
                    String(count), "--hello", helloFile, "--wait", "30",
                ]
                let output = Pipe()
                clients.standardOutput = output
                try clients.run()
                let lines = LineReader(output.fileHandleForReading.fileDescriptor)
                #expect(await lines.line(timeout: 30_000) == "ready \(count)")
                // Once the server has answered every ClientHello: until then its loop is busy with their key exchanges
                // and signatures (seconds under Address Sanitizer), and another client's handshake could wait past
                // its own timeout behind them (seen once: 1,001 timed out).
                #expect(await lines.line(timeout: 30_000) == "answered \(count)")
                let result = try await sClient(port: server.port, ["-CAfile", certificates.caFile])
                #expect(result.output.contains("hello alpn=none"), "\(result.output)")
                #expect(await lines.line(timeout: 30_000) == "closed \(count)", "every half-open handshake closed by the server")
                await waitUntilExitWithoutSpinning(clients)
                #expect(context.handshakeFailures.timedOut == count)
                try await server.close()
            }
        }
    }

    @Test("failed handshakes are logged once per stretch, not once per connection")
    func logOncePerStretch() async throws {
        try await withTemporaryDirectory { directory in
            let collector = LogCollector()
            let (_, context) = try await makeContext(in: directory, logger: collector.logger())
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                for _ in 0..<20 {
                    let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port))
                    client.send("not TLS at all\r\n\r\n")
                    #expect(client.readsClosed())
                }
                #expect(await eventually { context.handshakeFailures.refused == 20 })
                let lines = collector.all.filter { $0.message.contains("TLS handshake") }
                #expect(lines.count == 1, "\(lines)")
                try await server.close()
            }
        }
    }
}
