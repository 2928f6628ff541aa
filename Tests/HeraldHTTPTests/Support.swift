import Foundation
import HeraldEventLoop
import HeraldTesting
import Testing

@testable import HeraldHTTP

/// Serves the handler `makeHandler` gives for each connection (evaluated on the loop thread, per connection) with HeraldHTTP's HTTP/1.1
/// session on a loopback port of its own, on a loop of its own, for the length of `body`; then checks that the
/// loop let every handle go.
func withHTTPServer(
    _ makeHandler: @autoclosure @escaping @Sendable () -> any HTTPRequestHandler, limits: HTTPServerLimits = HTTPServerLimits(),
    _ body: (SocketAddress, EventLoop) async throws -> Void
) async throws {
    let loop = EventLoop(name: "http-test")
    try loop.start()
    do {
        let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
            let session = HTTP1Session(connection: connection, loop: loop, handler: makeHandler(), limits: limits)
            connection.onClose = { _ in session.closed() }
            session.start()
        }
        let address = try await loop.submit { server.localAddress }
        try await body(address, loop)
        try await loop.submit { server.close() }
    } catch {
        await loop.shutdownGracefully()
        throw error
    }
    await loop.shutdownGracefully()
    #expect(loop.statistics.liveHandles == 0)
}

/// One answer as read off the socket.
struct Answer {
    var status: Int
    var headers: [String: String]
    var body: String
}

/// The complete answers in `bytes` (each with a Content-Length); interim `100 Continue` answers are skipped.
func answers(in bytes: [UInt8]) -> [Answer] {
    var text = Substring(String(decoding: bytes, as: UTF8.self))
    var result: [Answer] = []
    while let headEnd = text.range(of: "\r\n\r\n") {
        let lines = text[..<headEnd.lowerBound].components(separatedBy: "\r\n")
        let status = Int(lines[0].split(separator: " ")[1]) ?? 0
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let rest = text[headEnd.upperBound...]
        if status == 100 {
            text = rest
            continue
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        guard rest.utf8.count >= length else { break }
        let bodyEnd = rest.utf8.index(rest.startIndex, offsetBy: length)
        result.append(Answer(status: status, headers: headers, body: String(rest[..<bodyEnd])))
        text = rest[bodyEnd...]
    }
    return result
}

/// Answers `GET /echo` and `POST /echo` with the method, target and body, and counts the requests it saw; a
/// request to `/later` is held until three are held, then they are answered last first (out of order); `/room` is
/// answered with the room the HTTP/1.1 session's target and body storage have (`target=N body=N`).
final class EchoHandler: HTTPRequestHandler, @unchecked Sendable {
    // @unchecked Sendable: used on the loop thread only; the tests read `seen` through the lock.
    let seen = Locked<[String]>([])
    private var held: [(HTTPRequest, HTTPResponder)] = []

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        seen.withLock { $0.append("\(request.method) \(request.target)") }
        if request.path == "/room", let session = responder.sink as? HTTP1Session {
            let room = session.retainedCapacity
            responder.respond(.text(200, "target=\(room.target) body=\(room.body)"))
            return
        }
        if request.path == "/later" {
            held.append((request, responder))
            guard held.count == 3 else { return }
            for (request, responder) in held.reversed() { responder.respond(Self.echo(request)) }
            held.removeAll()
            return
        }
        responder.respond(Self.echo(request))
    }

    func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool {
        guard request.path == "/refuse" else { return false }
        responder.respond(.text(401, "refused from the head\n", headers: [("WWW-Authenticate", "Bearer")]))
        return true
    }

    static func echo(_ request: HTTPRequest) -> HTTPResponse {
        .text(200, "\(request.method) \(request.target) \(String(decoding: request.body, as: UTF8.self))")
    }
}
