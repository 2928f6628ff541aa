import Foundation
import HeraldEventLoop
import HeraldHTTP
import HeraldTesting
import Testing

@Suite("HTTP1Session: a handler served over a real loopback socket")
struct HTTP1SessionTests {
    @Test("pipelined requests answered out of order by an asynchronous handler are written in request order")
    func pipeliningOrder() async throws {
        let handler = EchoHandler()
        try await withHTTPServer(handler) { address, _ async throws in
            let client = try TestSocketClient(address)
            var text = ""
            for index in 0..<3 {
                text += "POST /later?n=\(index) HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n\(index)"
                text += "GET /echo?after=\(index) HTTP/1.1\r\nHost: x\r\n\r\n"
            }
            client.send(text)
            let read = answers(in: client.read { answers(in: $0).count >= 6 })
            #expect(
                read.map(\.body) == [
                    "POST /later?n=0 0", "GET /echo?after=0 ", "POST /later?n=1 1", "GET /echo?after=1 ", "POST /later?n=2 2",
                    "GET /echo?after=2 ",
                ])
            #expect(read.allSatisfy { $0.headers["connection"] == nil })
            // The connection stays open for more.
            client.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(answers(in: client.read { answers(in: $0).count >= 1 }).map(\.status) == [200])
        }
    }

    @Test(
        "large bodies, held by a handler while the connection reads on, then small ones: each answered with its own body (a large request takes its storage with it)"
    )
    func largeBodiesThenSmall() async throws {
        let handler = EchoHandler()
        try await withHTTPServer(handler) { address, _ async throws in
            let client = try TestSocketClient(address)
            // Three held by the handler (answered when the third comes), a large one answered at once between them,
            // then small ones on the same connection.
            let bodies = (0..<3).map { String(repeating: Character(UnicodeScalar(UInt8(ascii: "a") + UInt8($0))), count: 20_000 + $0) }
            var text = ""
            for (index, body) in bodies.enumerated() {
                text += "POST /later?n=\(index) HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                if index == 0 {
                    text += "POST /echo?large HTTP/1.1\r\nHost: x\r\nContent-Length: 30000\r\n\r\n\(String(repeating: "z", count: 30_000))"
                }
            }
            text += "POST /echo?small HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nsmall"
            client.send(text)
            let read = answers(in: client.read { answers(in: $0).count >= 5 })
            #expect(
                read.map(\.body) == [
                    "POST /later?n=0 \(bodies[0])", "POST /echo?large \(String(repeating: "z", count: 30_000))",
                    "POST /later?n=1 \(bodies[1])", "POST /later?n=2 \(bodies[2])", "POST /echo?small small",
                ])
            client.send("POST /echo?again HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
            #expect(answers(in: client.read { answers(in: $0).count >= 1 }).map(\.body) == ["POST /echo?again ok"])
            // The large bodies' and target's storage went with their requests; a small one's is kept.
            client.send(
                "POST /echo?\(String(repeating: "t", count: 10_000)) HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n\(String(repeating: "b", count: 9_000))"
            )
            _ = client.read { answers(in: $0).count >= 1 }
            client.send("GET /room HTTP/1.1\r\nHost: x\r\n\r\n")
            let room = answers(in: client.read { answers(in: $0).count >= 1 }).first?.body ?? ""
            let sizes = room.split(separator: " ").compactMap { $0.split(separator: "=").last.flatMap { Int($0) } }
            #expect(sizes.count == 2 && sizes.allSatisfy { $0 <= 8 * 1024 }, "\(room)")
        }
    }

    @Test("the last request of a connection (Connection: close, HTTP/1.0, the request limit) is answered with a close")
    func lastRequest() async throws {
        var limits = HTTPServerLimits()
        limits.maximumRequestsPerConnection = 2
        try await withHTTPServer(EchoHandler(), limits: limits) { address, _ async throws in
            let closing = try TestSocketClient(address)
            closing.send("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: x\r\n\r\n")
            let one = answers(in: closing.read { _ in false })
            #expect(one.map(\.body) == ["GET /echo "])
            #expect(one.first?.headers["connection"] == "close")

            let old = try TestSocketClient(address)
            old.send("GET /echo HTTP/1.0\r\n\r\n")
            #expect(answers(in: old.read { _ in false }).map(\.status) == [200])

            let limited = try TestSocketClient(address)
            limited.send(
                "GET /echo?1 HTTP/1.1\r\nHost: x\r\n\r\nGET /echo?2 HTTP/1.1\r\nHost: x\r\n\r\nGET /echo?3 HTTP/1.1\r\nHost: x\r\n\r\n")
            let two = answers(in: limited.read { _ in false })
            #expect(two.map(\.body) == ["GET /echo?1 ", "GET /echo?2 "])
            #expect(two.map { $0.headers["connection"] } == [nil, "close"])
        }
    }

    @Test("limits: 431 for a head over the limit, 413 for a body announced or sent over it, the connection closed")
    func sizeLimits() async throws {
        var limits = HTTPServerLimits()
        limits.maximumHeaderBytes = 256
        limits.maximumBodyBytes = 16
        let handler = EchoHandler()
        try await withHTTPServer(handler, limits: limits) { address, _ async throws in
            let cases: [(String, Int)] = [
                ("GET /echo HTTP/1.1\r\nHost: x\r\nX-Long: \(String(repeating: "a", count: 300))\r\n\r\n", 431),
                ("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n", 413),
                ("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n1\r\nX\r\n0\r\n\r\n", 413),
            ]
            for (text, status) in cases {
                let client = try TestSocketClient(address)
                client.send(text)
                let read = answers(in: client.read { answers(in: $0).count >= 1 })
                #expect(read.map(\.status) == [status])
                #expect(read.first?.headers["connection"] == "close")
                #expect(client.readsClosed())
            }
            #expect(handler.seen.withLock { $0 }.isEmpty)
            // A body at the limit is taken.
            let client = try TestSocketClient(address)
            client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n0123456789abcdef")
            #expect(answers(in: client.read { answers(in: $0).count >= 1 }).map(\.body) == ["POST /echo 0123456789abcdef"])
        }
    }

    @Test("timeouts: 408 for a request not whole within the request timeout, a silent connection closed")
    func timeouts() async throws {
        var limits = HTTPServerLimits()
        limits.requestTimeout = .milliseconds(300)
        limits.idleTimeout = .seconds(1)
        try await withHTTPServer(EchoHandler(), limits: limits) { address, _ async throws in
            let slow = try TestSocketClient(address)
            slow.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab")
            let read = answers(in: slow.read { answers(in: $0).count >= 1 })
            #expect(read.map(\.status) == [408])
            #expect(read.first?.body.contains("did not arrive") == true)
            #expect(slow.readsClosed())

            let silent = try TestSocketClient(address)
            #expect(silent.readsClosed())
        }
    }

    @Test(
        "the idle timeout counts from the last read: a connection sending a request every 250 ms stays open past it, then closes once silent"
    )
    func idleTimeoutFromLastRead() async throws {
        var limits = HTTPServerLimits()
        limits.idleTimeout = .seconds(2)
        try await withHTTPServer(EchoHandler(), limits: limits) { address, _ async throws in
            // The client's pace is what is tested, so it runs on a thread of its own: a task's sleep on the
            // cooperative pool of a busy parallel suite can last past the timeout. For 3 times the timeout it is
            // never silent for long; then it is, and the server closes.
            let (statuses, closed) = try await onThread { () throws -> ([[Int]], Bool) in
                let client = try TestSocketClient(address)
                var statuses: [[Int]] = []
                let start = ContinuousClock.now
                while ContinuousClock.now - start < .seconds(6) {
                    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
                    let read = answers(in: client.read { answers(in: $0).count >= 1 })
                    statuses.append(read.map(\.status))
                    guard read.count == 1 else { break }
                    usleep(200_000)
                }
                return (statuses, client.readsClosed())
            }
            #expect(statuses.count >= 10 && statuses.allSatisfy { $0 == [200] }, "\(statuses)")
            #expect(closed)
        }
    }

    /// Runs `body` on a thread of its own and returns what it returns.
    private func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    @Test("malformed requests get the handler's answer to the error: 400 with what was wrong, and a close")
    func malformed() async throws {
        try await withHTTPServer(EchoHandler()) { address, _ async throws in
            let cases = [
                ("nonsense\r\n\r\n", "HPE_"),
                ("GET /echo HTTP/1.1\r\n\r\n", "Host"),
                ("GET /echo HTTP/1.1\r\nHost: x\r\nX-Name : v\r\n\r\n", "colon"),
                ("GET /echo HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", "obs-fold"),
                ("GET /echo HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", "expectation"),
            ]
            for (text, mentions) in cases {
                let client = try TestSocketClient(address)
                client.send(text)
                let read = answers(in: client.read { answers(in: $0).count >= 1 })
                #expect(read.first.map { [400, 417].contains($0.status) } == true, "\(text.debugDescription)")
                #expect(read.first?.body.contains(mentions) == true, "\(text.debugDescription) → \(read.first?.body ?? "")")
                #expect(client.readsClosed())
            }
        }
    }

    @Test("Expect: 100-continue: 100 Continue and the body read, or the handler's refusal from the head and a close")
    func expectContinue() async throws {
        let handler = EchoHandler()
        try await withHTTPServer(handler) { address, _ async throws in
            let accepted = try TestSocketClient(address)
            accepted.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            let interim = String(decoding: accepted.read { $0.count >= 25 }, as: UTF8.self)
            #expect(interim == "HTTP/1.1 100 Continue\r\n\r\n")
            accepted.send("body")
            #expect(answers(in: accepted.read { answers(in: $0).count >= 1 }).map(\.body) == ["POST /echo body"])

            let refused = try TestSocketClient(address)
            refused.send("POST /refuse HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            let bytes = refused.read { answers(in: $0).count >= 1 }
            #expect(!String(decoding: bytes, as: UTF8.self).contains("100 Continue"))
            let read = answers(in: bytes)
            #expect(read.map(\.status) == [401])
            #expect(read.first?.headers["www-authenticate"] == "Bearer")
            #expect(read.first?.headers["connection"] == "close")
            #expect(refused.readsClosed())
            #expect(handler.seen.withLock { $0 } == ["POST /echo"])
        }
    }

    @Test("curl sending Expect: 100-continue is told to go on, or refused without sending its body")
    func curl() async throws {
        try await withHTTPServer(EchoHandler()) { address, _ async throws in
            guard case .tcp(_, let port) = address else { throw POSIXError(.EINVAL) }
            func run(_ path: String) async throws -> String {
                let result = try await runExecutable(
                    URL(fileURLWithPath: "/usr/bin/curl"),
                    [
                        "-sS", "-v", "-w", "\ncode=%{http_code}\n", "-H", "Expect: 100-continue", "--data-binary",
                        String(repeating: "b", count: 2048), "http://127.0.0.1:\(port)\(path)",
                    ])
                return result.output + result.error
            }
            let accepted = try await run("/echo")
            #expect(accepted.contains("code=200"), "\(accepted)")
            #expect(accepted.contains("HTTP/1.1 100 Continue"), "\(accepted)")
            #expect(accepted.contains("POST /echo " + String(repeating: "b", count: 2048)))
            let refused = try await run("/refuse")
            #expect(refused.contains("code=401"), "\(refused)")
            #expect(!refused.contains("HTTP/1.1 100 Continue"), "\(refused)")
        }
    }
}
