import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop
@testable import HeraldHTTP

/// Answers every request with its method, target and body size; `/slow` is answered only when `release` is
/// called; `/big` with 1 MiB.
final class StreamEchoHandler: HTTPRequestHandler, @unchecked Sendable {
    // @unchecked Sendable: used on the loop thread only.
    var held: [HTTPResponder] = []

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        if request.path == "/slow" {
            held.append(responder)
            return
        }
        if request.path == "/big" {
            responder.respond(
                HTTPResponse(status: 200, contentType: "application/octet-stream", body: [UInt8](repeating: 7, count: 1 << 20)))
            return
        }
        let text = "\(request.method) \(request.target) \(request.body.count) \(request.version) \(request.headers["host"] ?? "-")"
        responder.respond(.text(200, text, headers: [("X-Echo", "yes")]))
    }
}

/// An HTTP server (HTTP/1.1, or HTTP/2 by prior knowledge) on its own loop, answering with an ``StreamEchoHandler``.
final class HTTPTestServer: @unchecked Sendable {
    // @unchecked Sendable: the sessions are touched on the loop thread only.
    let loop: EventLoop
    let handler = StreamEchoHandler()
    private var server: StreamServer?
    private let sessions: SessionBox

    /// The sessions open, by connection.
    final class SessionBox: @unchecked Sendable {
        // @unchecked Sendable: touched on the loop thread only.
        var sessions: [ObjectIdentifier: HTTPServerSession] = [:]
    }
    let port: Int

    init(limits: HTTPServerLimits = HTTPServerLimits(), http2Limits: HTTP2Limits = HTTP2Limits()) async throws {
        let loop = EventLoop(name: "h2-test")
        self.loop = loop
        try loop.start()
        let handler = handler
        let box = SessionBox()
        sessions = box
        let server = try await loop.submit {
            try StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
                let session = HTTPServerSession(
                    connection: connection, loop: loop, handler: handler, limits: limits, http2Limits: http2Limits)
                let key = ObjectIdentifier(connection)
                box.sessions[key] = session
                connection.onClose = { _ in
                    box.sessions[key]?.closed()
                    box.sessions[key] = nil
                }
                session.start()
            }
        }
        self.server = server
        port = Int(server.port ?? 0)
    }

    /// Connections open now.
    var openConnections: Int {
        get async throws { try await loop.submit { self.sessions.sessions.count } }
    }

    /// Answers the requests to `/slow` held so far.
    func releaseSlow() async throws {
        try await loop.submit {
            for responder in self.handler.held { responder.respond(.text(200, "slow")) }
            self.handler.held = []
        }
    }

    /// Ends every connection gracefully (HTTP/2's GOAWAY).
    func shutdownSessions() async throws {
        try await loop.submit { for session in self.sessions.sessions.values { session.shutdown() } }
    }

    func stop() async {
        try? await loop.submit {
            self.server?.close()
            for session in self.sessions.sessions.values { session.shutdown() }
        }
        await loop.shutdownGracefully()
    }
}

@Suite("HTTP/2 connections on nghttp2")
struct HTTP2SessionTests {
    /// Runs `arguments` with curl; returns its output (a failed run records an issue).
    func curl(_ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let result = try await runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), ["-sS"] + arguments)
        #expect(result.status == 0, "curl: \(result.error)", sourceLocation: sourceLocation)
        return result.output
    }

    // curl 7.88 (Debian 12) fails a second transfer on a reused prior-knowledge connection before it sends
    // anything ("Error in the HTTP2 framing layer", with no frame from the server): streams on one connection
    // are tested with nghttp and h2load.
    @Test("curl --http2-prior-knowledge gets an answer over HTTP/2; a client in HTTP/1.1 on the same port, over HTTP/1.1")
    func curlPriorKnowledge() async throws {
        let server = try await HTTPTestServer()
        let url = "http://127.0.0.1:\(server.port)/v1/thing?x=1"
        let format = ["-w", "\n%{http_version} %{response_code}\n"]
        #expect(
            try await curl(["--http2-prior-knowledge", "-d", "hello"] + format + [url])
                == "POST /v1/thing?x=1 5 HTTP/2 127.0.0.1:\(server.port)\n2 200\n")
        #expect(
            try await curl(["--http1.1", "-d", "hello"] + format + [url])
                == "POST /v1/thing?x=1 5 HTTP/1.1 127.0.0.1:\(server.port)\n1.1 200\n")
        // HEAD: the answer's fields, its content-length included, and no body.
        let head = try await curl(["--http2-prior-knowledge", "-I", url])
        #expect(head.hasPrefix("HTTP/2 200"), "\(head)")
        let length = "HEAD /v1/thing?x=1 0 HTTP/2 127.0.0.1:\(server.port)".utf8.count
        #expect(head.contains("content-length: \(length)\r\n") && head.hasSuffix("\r\n\r\n"), "\(head)")
        await server.stop()
    }

    @Test("nghttp sends many streams on one connection, each answered on its own stream")
    func nghttpStreams() async throws {
        let server = try await HTTPTestServer()
        let base = "http://127.0.0.1:\(server.port)"
        let urls = (1...20).map { "\(base)/n/\($0)" } + ["\(base)/big"]
        let result = try await runExecutable(URL(fileURLWithPath: "/usr/bin/nghttp"), ["-n", "--stat"] + urls)
        #expect(result.status == 0, "\(result.error)")
        // One line of statistics per stream, each answered 200.
        #expect(result.output.split(separator: "\n").filter { $0.contains(" 200 ") }.count == 21, "\(result.output)")
        #expect(result.output.contains("1M"), "the 1 MiB answer whole: \(result.output)")
        await server.stop()
    }

    /// What `Tests/HTTP2Clients/h2_abuse.py --case <name>` saw: the GOAWAY's error code, whether the server closed the
    /// connection, RST_STREAM codes and :status answers by stream.
    struct AbuseOutcome: Decodable {
        var goaway: Int?
        var closed: Bool
        var resets: [String: Int]
        var statuses: [String: Int]
        var frames: Int
    }

    static func abuse(_ name: String, port: Int) async throws -> AbuseOutcome {
        let python = try pythonEnvironment(with: "h2")
        let script = repositoryRoot.appendingPathComponent("Tests/HTTP2Clients/h2_abuse.py")
        let result = try await runExecutable(python, [script.path, "--port", String(port), "--case", name])
        #expect(result.status == 0, "h2_abuse.py \(name): \(result.error)")
        let line = try #require(result.output.split(separator: "\n").last, "h2_abuse.py \(name) printed nothing: \(result.error)")
        return try JSONDecoder().decode(AbuseOutcome.self, from: Data(line.utf8))
    }

    /// GOAWAY's ENHANCE_YOUR_CALM and PROTOCOL_ERROR codes (RFC 9113, 7).
    static let enhanceYourCalm = 0xB
    static let protocolError = 0x1
    static let refusedStream = 0x7

    @Test(
        "abuse is bounded: the connection ends with GOAWAY, the server goes on and answers another client",
        arguments: ["rapid-reset", "continuation-flood", "settings-flood", "hpack-bomb"])
    func abuseEndsTheConnection(name: String) async throws {
        let server = try await HTTPTestServer()
        let outcome = try await Self.abuse(name, port: server.port)
        #expect(outcome.goaway != nil && outcome.goaway != 0, "\(name): \(outcome)")
        if name != "continuation-flood" { #expect(outcome.goaway == Self.enhanceYourCalm, "\(name): \(outcome)") }
        #expect(try await eventually(timeout: .seconds(10)) { try await server.openConnections == 0 }, "the abusive connection is closed")
        let url = "http://127.0.0.1:\(server.port)/after"
        #expect(try await curl(["--http2-prior-knowledge", url]).hasPrefix("GET /after 0 HTTP/2"))
        await server.stop()
    }

    @Test("a stream past SETTINGS_MAX_CONCURRENT_STREAMS is refused")
    func streamsPastTheLimit() async throws {
        let server = try await HTTPTestServer()
        let outcome = try await Self.abuse("too-many-streams", port: server.port)
        // Past the limit the client has acknowledged, nghttp2 1.52 ends the connection (GOAWAY PROTOCOL_ERROR); a
        // stream past a limit not yet acknowledged would be refused alone (RST_STREAM REFUSED_STREAM).
        #expect(outcome.goaway == Self.protocolError || outcome.resets["201"] == Self.refusedStream, "\(outcome)")
        await server.stop()
    }

    @Test("a header list over the limit gets 431 on its stream; the next stream is answered")
    func headerListOverTheLimit() async throws {
        let server = try await HTTPTestServer()
        let outcome = try await Self.abuse("large-headers", port: server.port)
        #expect(outcome.statuses == ["1": 431, "3": 200], "\(outcome)")
        #expect(outcome.goaway == nil)
        await server.stop()
    }

    @Test("a graceful shutdown sends GOAWAY NO_ERROR, answers the stream already taken, then closes")
    func shutdownSendsGoAway() async throws {
        let server = try await HTTPTestServer()
        let client = Task { try await Self.abuse("wait-goaway", port: server.port) }
        #expect(try await eventually(timeout: .seconds(10)) { try await server.loop.submit { server.handler.held.count == 1 } })
        try await server.shutdownSessions()
        try await server.releaseSlow()
        let outcome = try await client.value
        #expect(outcome.goaway == 0, "\(outcome)")
        #expect(outcome.statuses == ["1": 200], "\(outcome)")
        #expect(try await eventually(timeout: .seconds(10)) { try await server.openConnections == 0 })
        await server.stop()
    }

    @Test("a request that arrived whole is answered by its handler however long it takes: the request timeout bounds its arrival only")
    func handlerLongerThanTheRequestTimeout() async throws {
        let server = try await HTTPTestServer(limits: HTTPServerLimits(requestTimeout: .milliseconds(200)))
        let client = Task { try await Self.abuse("slow-answer", port: server.port) }
        #expect(try await eventually(timeout: .seconds(10)) { try await server.loop.submit { server.handler.held.count == 1 } })
        // Past the request timeout, by the session's own clock: no 408 may have gone out meanwhile.
        try await Task.sleep(for: .milliseconds(600))
        try await server.releaseSlow()
        let outcome = try await client.value
        #expect(outcome.statuses == ["1": 200], "\(outcome)")
        await server.stop()
    }

    @Test("a request whose body does not come within the request timeout gets 408 on its stream; the connection goes on")
    func requestTimeout() async throws {
        let server = try await HTTPTestServer(limits: HTTPServerLimits(requestTimeout: .milliseconds(300)))
        let outcome = try await Self.abuse("slow-request", port: server.port)
        #expect(outcome.statuses == ["1": 408, "3": 200], "\(outcome)")
        #expect(outcome.goaway == nil)
        await server.stop()
    }

    @Test("a preface written in pieces still picks HTTP/2")
    func splitPreface() async throws {
        let server = try await HTTPTestServer()
        let outcome = try await Self.abuse("split-preface", port: server.port)
        #expect(outcome.statuses == ["1": 200], "\(outcome)")
        await server.stop()
    }

    @Test("a connection with no stream open for the idle timeout is ended with GOAWAY NO_ERROR and closed")
    func idleTimeout() async throws {
        let server = try await HTTPTestServer(limits: HTTPServerLimits(idleTimeout: .milliseconds(300)))
        let outcome = try await Self.abuse("idle", port: server.port)
        #expect(outcome.goaway == 0 && outcome.closed, "\(outcome)")
        await server.stop()
    }
}
