import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop
@testable import HeraldHTTP

/// An HTTP/2 server on its own loop whose requests are answered by `answer` (an echo of the request by default).
final class HTTP2TestServer: @unchecked Sendable {
    // @unchecked Sendable: the connections are touched on the loop thread only.
    let loop: EventLoop
    private var server: StreamServer?
    private var connections: [ObjectIdentifier: HTTP2Connection] = [:]
    let port: Int

    init(limits: HTTP2Limits = HTTP2Limits()) async throws {
        loop = EventLoop(name: "h2-test")
        try loop.start()
        let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { _ in }
        self.server = server
        port = Int(server.port ?? 0)
        try await loop.submit { [self] in
            server.onAccept = { [self] connection in
                let http2 = HTTP2Connection(
                    connection: connection, loop: loop, limits: limits,
                    onRequest: { http2, request in
                        let body = Array("\(request.method) \(request.path) \(request.body.count)".utf8)
                        http2.respond(to: request.streamID, status: 200, headers: [("content-type", "text/plain")], body: body)
                    },
                    onRefusal: { http2, streamID, refusal in
                        let status =
                            switch refusal {
                            case .bodyTooLarge: 413
                            case .headerListTooLarge: 431
                            case .timedOut: 408
                            }
                        http2.respond(to: streamID, status: status, headers: [], body: Array("\(refusal)".utf8))
                    })
                let key = ObjectIdentifier(connection)
                connections[key] = http2
                connection.onClose = { [self] _ in
                    connections[key]?.closed()
                    connections[key] = nil
                }
                http2.start()
            }
        }
    }

    var openConnections: Int {
        get async throws { try await loop.submit { self.connections.count } }
    }

    func stop() async {
        try? await loop.submit {
            self.server?.close()
            for connection in self.connections.values { connection.connection.close() }
        }
        await loop.shutdownGracefully()
    }
}

@Suite("HTTP/2 connections on nghttp2")
struct HTTP2ConnectionTests {
    @Test("curl --http2-prior-knowledge gets answers over HTTP/2, on one connection")
    func curlPriorKnowledge() async throws {
        let server = try await HTTP2TestServer()
        let url = "http://127.0.0.1:\(server.port)/v1/thing?x=1"
        let result = try runExecutable(
            URL(fileURLWithPath: "/usr/bin/curl"),
            ["-sS", "--http2-prior-knowledge", "-d", "hello", "-w", "\n%{http_version} %{response_code}\n", url, url])
        #expect(result.status == 0, "\(result.error)")
        #expect(result.output == "POST /v1/thing?x=1 5\n2 200\nPOST /v1/thing?x=1 5\n2 200\n")
        await server.stop()
    }
}
