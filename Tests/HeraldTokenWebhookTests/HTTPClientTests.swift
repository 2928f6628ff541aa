import Herald
import HeraldTesting
import Testing

@testable import HeraldTokenWebhook

@Suite("HTTPClient: a small HTTP/1.1 client on Herald's loop", .serialized)
struct HTTPClientTests {
    @Test("URLs: numeric hosts and localhost over http; https, host names and user information refused")
    func endpoints() throws {
        let plain = try HTTPEndpoint(parsing: "http://127.0.0.1:8000/hooks/token?app=weather#frag")
        #expect(plain.address == .tcp(host: "127.0.0.1", port: 8000))
        #expect(plain.target == "/hooks/token?app=weather")
        #expect(plain.hostHeader == "127.0.0.1:8000")
        let local = try HTTPEndpoint(parsing: "HTTP://LocalHost?x=1")
        #expect(local.address == .tcp(host: "127.0.0.1", port: 80))
        #expect(local.target == "/?x=1")
        #expect(local.hostHeader == "localhost:80")
        let v6 = try HTTPEndpoint(parsing: "http://[::1]:9000")
        #expect(v6.address == .tcp(host: "::1", port: 9000))
        #expect(v6.target == "/")
        #expect(v6.hostHeader == "[::1]:9000")
        #expect(v6.description == "http://[::1]:9000/")

        func reason(_ url: String) -> String? {
            do {
                _ = try HTTPEndpoint(parsing: url)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(reason("https://127.0.0.1/token")?.contains("TLS-terminating proxy") == true)
        #expect(reason("ftp://127.0.0.1/token") != nil)
        #expect(reason("http://example.com/token")?.contains("DNS") == true)
        #expect(reason("http://user:pw@127.0.0.1/token") != nil)
        #expect(reason("http://127.0.0.1:0/") != nil)
        #expect(reason("http://127.0.0.1:70000/") != nil)
        #expect(reason("http://127.0.0.1:/") != nil)
        #expect(reason("http://[::1/") != nil)
        #expect(reason("http://[example]/") != nil)
        #expect(reason("http:///token") != nil)
        #expect(reason("http://127.0.0.1/a b") != nil)
        #expect(reason("http://127.0.0.1/caf\u{E9}") != nil)
        #expect(reason("http://256.1.1.1/") != nil)
    }

    /// Feeds `text` in pieces of `piece` bytes (and then the end of the connection when `end`).
    private func parse(_ text: String, piece: Int, end: Bool = false) throws -> HTTPResponse? {
        var parser = HTTPResponseParser(maximumBodyBytes: 1024)
        let bytes = Array(text.utf8)
        var start = 0
        while start < bytes.count {
            let slice = bytes[start..<min(bytes.count, start + piece)]
            if let response = try parser.feed(slice) { return response }
            start += piece
        }
        return end ? try parser.finish() : nil
    }

    @Test("responses are read whole however the bytes are split: Content-Length, chunked, to the end, none")
    func framing() throws {
        let cases: [(text: String, end: Bool, status: Int, body: String)] = [
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", false, 200, "hello"),
            ("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n", false, 503, ""),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: 1\r\n\r\n", false, 200,
                "hello"
            ),
            ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", false, 201, "ok"),
            ("HTTP/1.1 204 No Content\r\n\r\n", false, 204, ""),
            ("HTTP/1.0 500 Oops\r\n\r\nsomething broke", true, 500, "something broke"),
            ("HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false, 200, "ok"),
            ("HTTP/1.1 200\r\nContent-Length: 2, 2\r\n\r\nok", false, 200, "ok"),
        ]
        for (text, end, status, body) in cases {
            for piece in [1, 2, 3, 7, 1000] {
                let response = try #require(try parse(text, piece: piece, end: end), "\(text.debugDescription) in pieces of \(piece)")
                #expect(response.status == status)
                #expect(String(decoding: response.body, as: UTF8.self) == body, "\(text.debugDescription) in pieces of \(piece)")
            }
        }
        let retry = try #require(try parse("HTTP/1.1 429 Too Many\r\nretry-after: 7\r\nContent-Length: 0\r\n\r\n", piece: 4))
        #expect(retry.value(of: "Retry-After") == "7")
        #expect(retry.reason == "Too Many")
    }

    @Test("bodies past the limit are read and dropped, not kept")
    func bodyLimit() throws {
        var parser = HTTPResponseParser(maximumBodyBytes: 4)
        let response = try #require(try parser.feed(Array("HTTP/1.1 400 Bad\r\nContent-Length: 10\r\n\r\n0123456789".utf8)))
        #expect(response.body == Array("0123".utf8))
        #expect(response.bodyTruncated)
    }

    @Test("broken responses are errors: not HTTP, bad lengths, bad chunks, cut short")
    func malformed() throws {
        func error(_ text: String, end: Bool = true) -> HTTPClientError? {
            do {
                _ = try parse(text, piece: 1000, end: end)
                return nil
            } catch let error as HTTPClientError {
                return error
            } catch {
                return nil
            }
        }
        #expect(error("SSH-2.0-OpenSSH_9.6\r\n\r\n").map { if case .malformedResponse = $0 { true } else { false } } == true)
        #expect(error("HTTP/1.1 20 OK\r\n\r\n") != nil)
        #expect(error("HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n") != nil)
        #expect(error("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n") != nil)
        #expect(error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") != nil)
        #expect(error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n") != nil)
        #expect(error("HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n") != nil)
        #expect(error("HTTP/1.1 101 Switching Protocols\r\n\r\n") != nil)
        #expect(
            error("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort").map { if case .connectionClosed = $0 { true } else { false } }
                == true)
        #expect(error("HTTP/1.1 200 OK\r\nContent-").map { if case .connectionClosed = $0 { true } else { false } } == true)
        #expect(error("").map { if case .connectionClosed = $0 { true } else { false } } == true)
        #expect(error("HTTP/1.1 200 OK\r\n" + String(repeating: "X-Long: aaaaaaaa\r\n", count: 5000), end: false) != nil)
    }

    @Test("requests that would break HTTP framing are refused before anything is sent")
    func invalidRequests() throws {
        let endpoint = try HTTPEndpoint(parsing: "http://127.0.0.1:1/")
        #expect(throws: HTTPClientError.self) { try HTTPRequest(method: "PO ST", endpoint: endpoint).serialized() }
        #expect(throws: HTTPClientError.self) {
            try HTTPRequest(method: "POST", endpoint: endpoint, headers: [("X-A", "b\r\nX-Evil: 1")]).serialized()
        }
        #expect(throws: HTTPClientError.self) { try HTTPRequest(method: "POST", endpoint: endpoint, headers: [("X A", "b")]).serialized() }
        let bytes = try HTTPRequest(method: "POST", endpoint: endpoint, headers: [("X-A", "b")], body: Array("hi".utf8)).serialized()
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == "POST / HTTP/1.1\r\nHost: 127.0.0.1:1\r\nX-A: b\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
    }

    @Test("over real sockets: each framing, the timeout, connection refused, cancellation; nothing left open")
    func exchanges() async throws {
        let server = try await TestHTTPServer.start { request, _ in
            switch request.target {
            case "/chunked": .chunked(200, chunks: ["hel", "lo"])
            case "/close": .closeDelimited(201, body: "done")
            case "/empty": .status(204)
            case "/hang": .hang
            default: .status(503, headers: ["Retry-After: 2"], body: "busy")
            }
        }
        let loop = EventLoop(name: "http-client-test")
        try loop.start()
        let client = HTTPClient(loop: loop)
        func send(_ path: String, timeout: Duration = .seconds(10), to base: String = server.url) async throws -> HTTPResponse {
            try await client.send(
                HTTPRequest(method: "POST", endpoint: try HTTPEndpoint(parsing: base + path), body: Array("{}".utf8)), timeout: timeout)
        }

        let chunked = try await send("/chunked")
        #expect(chunked.status == 200 && chunked.body == Array("hello".utf8))
        let closed = try await send("/close")
        #expect(closed.status == 201 && closed.body == Array("done".utf8))
        let empty = try await send("/empty")
        #expect(empty.status == 204 && empty.body.isEmpty)
        let busy = try await send("/busy")
        #expect(busy.status == 503 && busy.value(of: "retry-after") == "2" && busy.body == Array("busy".utf8))

        let clock = ContinuousClock()
        var began = clock.now
        await #expect(throws: HTTPClientError.timedOut("\(server.url)/hang", after: .milliseconds(150))) {
            _ = try await send("/hang", timeout: .milliseconds(150))
        }
        #expect(clock.now - began >= .milliseconds(150))

        let unused = try TestHTTPServer.unusedPort()
        await #expect {
            _ = try await send("/", to: "http://127.0.0.1:\(unused)")
        } throws: { error in
            guard case .connectFailed(_, let reason) = error as? HTTPClientError else { return false }
            return reason.contains("ECONNREFUSED")
        }

        began = clock.now
        let hanging = Task { try await send("/hang", timeout: .seconds(60)) }
        #expect(await eventually { server.requests.filter { $0.target == "/hang" }.count == 2 })
        hanging.cancel()
        await #expect(throws: CancellationError.self) { _ = try await hanging.value }
        #expect(clock.now - began < .seconds(5))

        #expect(
            await eventually { loop.statistics.liveHandles == 3 }, "only the loop's own timer, wake-up and write-flush handles are left")
        await loop.shutdownGracefully()
        #expect(loop.statistics.liveHandles == 0)
        await #expect(throws: EventLoopError.shutDown) { _ = try await send("/busy") }
        await server.close()
    }
}
