import Foundation
import HeraldEventLoop
import HeraldHTTPClient
import HeraldJSON
import HeraldTesting
import Testing

/// A started loop for one test, shut down (and checked for leftover handles) by `finish`.
private func startLoop() throws -> EventLoop {
    let loop = EventLoop(name: "http-client-test")
    try loop.start()
    return loop
}

private func finish(_ loop: EventLoop) async {
    await loop.shutdownGracefully()
    #expect(loop.statistics.liveHandles == 0)
}

private func json(_ response: HTTPResponse) throws -> JSONValue { try JSONParser.parse(response.body) }

@Suite("HTTPClient: libcurl on Herald's loop, against servers no one here wrote")
struct HTTPClientTests {
    @Test("URLs: http and https with any host; other schemes, user information and bad ports refused")
    func urls() throws {
        let plain = try HTTPURL(parsing: "http://127.0.0.1:8000/hooks/token?app=weather#fragment")
        #expect(plain.scheme == "http" && plain.host == "127.0.0.1" && plain.port == 8000)
        #expect(plain.description == "http://127.0.0.1:8000/hooks/token?app=weather")
        let secure = try HTTPURL(parsing: "HTTPS://Push.Example.com/token")
        #expect(secure.scheme == "https" && secure.port == 443)
        let v6 = try HTTPURL(parsing: "http://[::1]:9000")
        #expect(v6.host == "[::1]" && v6.port == 9000)

        func reason(_ url: String) -> String? {
            do {
                _ = try HTTPURL(parsing: url)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(reason("ftp://127.0.0.1/token")?.contains("only http:// and https://") == true)
        #expect(reason("http://user:pw@127.0.0.1/token")?.contains("user information") == true)
        #expect(reason("http://127.0.0.1:70000/") != nil)
        #expect(reason("http://127.0.0.1/a b") != nil)
        #expect(reason("127.0.0.1:8080") != nil)
        #expect(reason("http://") != nil)
    }

    @Test("plain HTTP: the method, headers and body arrive; status, headers and body come back; the connection is kept")
    func plainExchange() async throws {
        let server = try await PythonHTTPServer.start()
        defer { server.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)

        let posted = try await client.request(
            "POST", "\(server.baseURL)/echo?x=1", headers: [("Content-Type", "application/json"), ("X-Herald", "yes")],
            body: Array(#"{"a":1}"#.utf8))
        #expect(posted.status == 200 && posted.version == "1.1")
        #expect(posted.value(of: "content-type") == "application/json")
        let seen = try json(posted)
        #expect(seen["method"]?.stringValue == "POST")
        #expect(seen["path"]?.stringValue == "/echo?x=1")
        #expect(seen["body"]?.stringValue == #"{"a":1}"#)
        #expect(seen["headers"]?["x-herald"]?.stringValue == "yes")
        #expect(seen["headers"]?["content-type"]?.stringValue == "application/json")
        #expect(seen["headers"]?["user-agent"]?.stringValue == "Herald")
        #expect(seen["headers"]?["expect"] == nil)

        let deleted = try await client.request("DELETE", "\(server.baseURL)/echo")
        #expect(try json(deleted)["method"]?.stringValue == "DELETE")
        #expect(try json(deleted)["headers"]?["content-length"]?.stringValue == "0")
        #expect(try json(deleted)["headers"]?["content-type"] == nil)
        #expect(deleted.reusedConnection, "the second request goes over the first one's connection")
        #expect(try json(deleted)["connection"] == seen["connection"])

        let missing = try await client.request("GET", "\(server.baseURL)/status/503")
        #expect(missing.status == 503 && missing.value(of: "Retry-After") == "0", "an error status is a response, not an error")
        #expect(client.statistics.connectionsOpened == 1 && client.statistics.completed == 3)
        await finish(loop)
    }

    @Test("https: a server certified by a trusted CA answers; an untrusted certificate is refused with a clear error")
    func https() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let trusted = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { trusted.stop() }
            let untrusted = try await PythonHTTPServer.start(
                certificate: certificates.untrustedCertificateFile, key: certificates.untrustedKeyFile)
            defer { untrusted.stop() }
            let plain = try await PythonHTTPServer.start()
            defer { plain.stop() }
            let loop = try startLoop()
            let client = HTTPClient(loop: loop, configuration: .init(caFile: certificates.caFile))

            let answer = try await client.request("GET", "\(trusted.baseURL)/echo")
            #expect(answer.status == 200)
            #expect(try json(answer)["method"]?.stringValue == "GET")
            let again = try await client.request("GET", "https://127.0.0.1:\(trusted.port)/echo")
            #expect(again.status == 200, "the certificate names the address too")

            await #expect {
                _ = try await client.request("GET", "\(untrusted.baseURL)/echo")
            } throws: { error in
                guard case .certificateRejected(_, let detail) = error as? HTTPClientError else { return false }
                return detail.contains("certificate")
            }
            // Without the test CA, the system's CAs do not trust the test server either.
            let systemTrust = HTTPClient(loop: loop)
            await #expect {
                _ = try await systemTrust.request("GET", "\(trusted.baseURL)/echo")
            } throws: { error in
                if case .certificateRejected = error as? HTTPClientError { true } else { false }
            }
            // https to a server that speaks plain HTTP fails the handshake.
            await #expect {
                _ = try await client.request("GET", "https://127.0.0.1:\(plain.port)/echo")
            } throws: { error in
                if case .tlsFailed = error as? HTTPClientError { true } else { false }
            }
            await finish(loop)
        }
    }

    @Test("HTTP/2 when the server offers it: concurrent requests share one connection, one stream each")
    func http2() async throws {
        let python = try pythonEnvironment(with: "h2")
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(
                certificate: certificates.certificateFile, key: certificates.keyFile, http2: true, python: python)
            defer { server.stop() }
            let loop = try startLoop()
            let client = HTTPClient(loop: loop, configuration: .init(caFile: certificates.caFile))
            let first = try await client.request("GET", "\(server.baseURL)/first")
            #expect(first.version == "2" && first.status == 200)
            #expect(try json(first)["path"]?.stringValue == "/first")
            let answers = try await withThrowingTaskGroup(of: HTTPResponse.self) { group in
                for index in 0..<20 {
                    group.addTask { try await client.request("POST", "\(server.baseURL)/\(index)", body: Array("\(index)".utf8)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.count == 20 && answers.allSatisfy { $0.version == "2" && $0.status == 200 })
            let connections = Set(try answers.map { try json($0)["connection"] })
            #expect(connections == [try json(first)["connection"]], "every request on the first one's connection")
            #expect(Set(try answers.map { try json($0)["stream"] }).count == 20)
            #expect(client.statistics.connectionsOpened == 1)
            await finish(loop)
        }
    }

    @Test("a configured proxy carries every request: the host is never resolved here")
    func proxy() async throws {
        let proxy = try await PythonHTTPServer.start()
        defer { proxy.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop, configuration: .init(proxy: proxy.baseURL))
        // Python's server takes the absolute URI of a proxied request as its path, which no route has: 404.
        let answer = try await client.request("GET", "http://no-such-host.invalid/echo")
        #expect(answer.status == 404)
        await finish(loop)
    }

    @Test("a missing CA file is a certificate error that names the problem")
    func missingCAFile() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let server = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            let loop = try startLoop()
            let client = HTTPClient(loop: loop, configuration: .init(caFile: "\(directory)/no-such-ca.pem"))
            await #expect {
                _ = try await client.request("GET", "\(server.baseURL)/echo")
            } throws: { error in
                if case .certificateRejected = error as? HTTPClientError { true } else { false }
            }
            await finish(loop)
        }
    }

    @Test("no answer within the timeout is a timeout error, on time")
    func timeout() async throws {
        let server = try await PythonHTTPServer.start()
        defer { server.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)
        let clock = ContinuousClock()
        let began = clock.now
        await #expect(throws: HTTPClientError.timedOut("\(server.baseURL)/slow", after: .milliseconds(300))) {
            _ = try await client.request("GET", "\(server.baseURL)/slow", timeout: .milliseconds(300))
        }
        #expect(clock.now - began >= .milliseconds(300))
        await finish(loop)
    }

    @Test("a body over the limit is an error, whether announced by Content-Length or chunked; at the limit it is kept")
    func responseLimit() async throws {
        let server = try await PythonHTTPServer.start()
        defer { server.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)
        let exact = try await client.request("GET", "\(server.baseURL)/bytes/1000", maximumResponseBytes: 1000)
        #expect(exact.body.count == 1000)
        let chunkedExact = try await client.request("GET", "\(server.baseURL)/chunked/9000", maximumResponseBytes: 9000)
        #expect(chunkedExact.body.count == 9000)
        for path in ["/bytes/1001", "/chunked/9001", "/chunked/100000"] {
            await #expect(throws: HTTPClientError.responseTooLarge("\(server.baseURL)\(path)", limit: path == "/bytes/1001" ? 1000 : 9000))
            {
                _ = try await client.request("GET", "\(server.baseURL)\(path)", maximumResponseBytes: path == "/bytes/1001" ? 1000 : 9000)
            }
        }
        let after = try await client.request("GET", "\(server.baseURL)/echo")
        #expect(after.status == 200, "the client goes on after a refused answer")
        await finish(loop)
    }

    @Test("connection refused, a host that does not resolve, requests that would break the framing")
    func failures() async throws {
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)
        let unused = try freeLoopbackPort()
        await #expect {
            _ = try await client.request("GET", "http://127.0.0.1:\(unused)/")
        } throws: { error in
            guard case .connectFailed(_, let detail) = error as? HTTPClientError else { return false }
            return detail.contains("ECONNREFUSED")
        }
        await #expect {
            _ = try await client.request("GET", "http://no-such-host.invalid/")
        } throws: { error in
            if case .resolveFailed = error as? HTTPClientError { true } else { false }
        }
        await #expect(throws: HTTPClientError.self) {
            _ = try await client.request("POST", "http://127.0.0.1:\(unused)/", headers: [("X-A", "b\r\nX-Evil: 1")])
        }
        await #expect(throws: HTTPClientError.self) { _ = try await client.request("PO ST", "http://127.0.0.1:\(unused)/") }
        await #expect(throws: HTTPClientError.self) {
            _ = try await client.request("GET", "http://127.0.0.1:\(unused)/", headers: [("X A", "b")])
        }
        await #expect(throws: HTTPClientError.self) { _ = try await client.request("GET", "gopher://127.0.0.1/") }
        await finish(loop)
    }

    @Test("answers that are not HTTP are malformed-response errors")
    func malformed() async throws {
        let replies: [String: String] = [
            "/garbage": "SSH-2.0-OpenSSH_9.6\r\n\r\n",
            "/bad-length": "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nab",
            "/bad-status": "HTTP/1.1 2000 OK\r\n\r\n",
            "/bad-chunk": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ]
        let server = try await RawServer.start { path in replies[path] ?? "" }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)
        for path in replies.keys.sorted() {
            await #expect {
                _ = try await client.request("GET", "http://127.0.0.1:\(server.port)\(path)")
            } throws: { error in
                guard case .malformedResponse = error as? HTTPClientError else {
                    Issue.record("\(path): \(error)")
                    return false
                }
                return true
            }
        }
        await #expect {
            _ = try await client.request("GET", "http://127.0.0.1:\(server.port)/nothing")
        } throws: { error in
            if case .connectionLost = error as? HTTPClientError { true } else { false }
        }
        await finish(loop)
        await server.close()
    }

    @Test("200 concurrent requests on one loop: every one answered, over at most the per-host connection limit, kept for the next burst")
    func concurrent() async throws {
        let server = try await PythonHTTPServer.start()
        defer { server.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop, configuration: .init(maximumConnectionsPerHost: 8))
        let bodies = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for index in 0..<200 {
                group.addTask {
                    let response = try await client.request(
                        "POST", "\(server.baseURL)/echo", body: Array("\(index)".utf8), timeout: .seconds(60))
                    return (index, Int(try JSONParser.parse(response.body)["body"]?.stringValue ?? "") ?? -1)
                }
            }
            var seen: [Int: Int] = [:]
            for try await (index, echoed) in group { seen[index] = echoed }
            return seen
        }
        #expect(bodies.count == 200 && bodies.allSatisfy { $0.key == $0.value })
        #expect(client.statistics.completed == 200)
        #expect(client.statistics.connectionsOpened <= 8, "\(client.statistics)")
        // A second burst finds the connections of the first kept, though no request was under way in between.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 { group.addTask { _ = try await client.request("GET", "\(server.baseURL)/echo", timeout: .seconds(60)) } }
            try await group.waitForAll()
        }
        #expect(client.statistics.completed == 250)
        #expect(client.statistics.connectionsOpened <= 8, "\(client.statistics)")
        #expect(await eventually { client.statistics.watchedSockets == 0 }, "idle kept connections are not watched")
        await finish(loop)
    }

    @Test("cancelling the calling task abandons the request at once; the loop's shutdown fails the requests under way")
    func cancellationAndShutdown() async throws {
        let server = try await PythonHTTPServer.start()
        defer { server.stop() }
        let loop = try startLoop()
        let client = HTTPClient(loop: loop)
        // /slow answers after 30 s: an answer instead of the error would mean the request went on.
        let hanging = Task { try await client.request("GET", "\(server.baseURL)/slow", timeout: .seconds(60)) }
        #expect(await eventually { client.statistics.watchedSockets == 1 })
        hanging.cancel()
        await #expect(throws: CancellationError.self) { _ = try await hanging.value }
        #expect(await eventually { client.statistics.watchedSockets == 0 }, "nothing is watched for it any more")

        let underway = Task { try await client.request("GET", "\(server.baseURL)/slow", timeout: .seconds(60)) }
        #expect(await eventually { client.statistics.watchedSockets == 1 })
        await loop.shutdownGracefully()
        await #expect(throws: EventLoopError.shutDown) { _ = try await underway.value }
        #expect(loop.statistics.liveHandles == 0)
        await #expect(throws: EventLoopError.shutDown) { _ = try await client.request("GET", "\(server.baseURL)/echo") }
    }
}

/// A TCP server on a loop of its own that answers each connection's first request with a scripted text (by the
/// request's path) and closes it: for answers no HTTP server would give.
private final class RawServer: Sendable {
    let loop: EventLoop
    let server: StreamServer
    let port: Int

    private init(loop: EventLoop, server: StreamServer, port: Int) {
        self.loop = loop
        self.server = server
        self.port = port
    }

    static func start(reply: @escaping @Sendable (String) -> String) async throws -> RawServer {
        let loop = EventLoop(name: "raw-http-server")
        try loop.start()
        let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
            var received: [UInt8] = []
            connection.onRead = { bytes in
                received.append(contentsOf: bytes)
                let text = String(decoding: received, as: UTF8.self)
                guard text.contains("\r\n\r\n") else { return }
                let path = text.split(separator: " ").dropFirst().first.map(String.init) ?? "/"
                connection.write(Array(reply(path).utf8)) { _ in connection.close() }
            }
            connection.onEnd = { connection.close() }
            connection.startReading()
        }
        let port = try await loop.submit { server.port ?? 0 }
        return RawServer(loop: loop, server: server, port: port)
    }

    func close() async {
        let server = self.server
        try? await loop.submit { server.close() }
        await loop.shutdownGracefully()
    }
}
