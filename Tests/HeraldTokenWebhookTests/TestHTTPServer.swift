import Glibc
import Herald
import HeraldTesting

/// A tiny HTTP/1.1 server for the tests, on Herald's `StreamServer` and an event loop of its own: it records every
/// request (with when it arrived) and answers each with what the test's script says.
final class TestHTTPServer: Sendable {
    struct Request: Sendable {
        var method: String
        var target: String
        /// Header fields by lower-cased name.
        var headers: [String: String]
        var body: [UInt8]
        var arrival: ContinuousClock.Instant
        /// The number of the connection it came on (1 for the server's first).
        var connection: Int

        var json: JSONObject? { (try? JSONParser.parse(body))?.objectValue }
        var token: String? { json?["token"]?.stringValue }
    }

    enum Reply: Sendable {
        /// A response framed by `Content-Length`; the connection stays open (the client closes it).
        case status(Int, headers: [String] = [], body: String = "")
        /// A chunked response (chunk extensions and a trailer included); the connection stays open.
        case chunked(Int, chunks: [String])
        /// A response that ends when the server closes the connection.
        case closeDelimited(Int, body: String)
        /// No answer at all.
        case hang
    }

    let loop: EventLoop
    let server: StreamServer
    let port: Int
    private let recorded: Locked<[Request]>

    private init(loop: EventLoop, server: StreamServer, port: Int, recorded: Locked<[Request]>) {
        self.loop = loop
        self.server = server
        self.port = port
        self.recorded = recorded
    }

    /// Listens on 127.0.0.1:`port` (0: a free port); `reply` gets each request and its index (0 for the first).
    static func start(port: Int = 0, reply: @escaping @Sendable (Request, Int) -> Reply) async throws -> TestHTTPServer {
        let loop = EventLoop(name: "test-http-server")
        try loop.start()
        let recorded = Locked<[Request]>([])
        let connections = Locked(0)
        do {
            let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: port)) { connection in
                let number = connections.withLock { count in
                    count += 1
                    return count
                }
                Session(connection: connection, number: number, recorded: recorded, reply: reply).start()
            }
            let port = try await loop.submit { server.port ?? 0 }
            return TestHTTPServer(loop: loop, server: server, port: port, recorded: recorded)
        } catch {
            await loop.shutdownGracefully()
            throw error
        }
    }

    var requests: [Request] { recorded.withLock { $0 } }

    var url: String { "http://127.0.0.1:\(port)" }

    /// Closes the server and its connections and shuts its loop down.
    func close() async {
        let server = self.server
        try? await loop.submit { server.close() }
        await loop.shutdownGracefully()
    }

    /// A TCP port on 127.0.0.1 that nobody listens on (HeraldTesting's `freeLoopbackPort()`).
    static func unusedPort() throws -> Int { try freeLoopbackPort() }

    /// One connection: reads requests (head and `Content-Length` body) and writes the scripted answers.
    private final class Session {
        let connection: StreamConnection
        let recorded: Locked<[Request]>
        let reply: @Sendable (Request, Int) -> Reply
        let number: Int
        var buffer: [UInt8] = []

        init(connection: StreamConnection, number: Int, recorded: Locked<[Request]>, reply: @escaping @Sendable (Request, Int) -> Reply) {
            self.number = number
            self.connection = connection
            self.recorded = recorded
            self.reply = reply
        }

        func start() {
            connection.onRead = { [self] bytes in
                buffer.append(contentsOf: bytes)
                parse()
            }
            connection.onEnd = { [connection] in connection.close() }
            connection.startReading()
        }

        private func parse() {
            let separator = Array("\r\n\r\n".utf8)
            guard buffer.count >= 4, let end = (0...(buffer.count - 4)).first(where: { Array(buffer[$0..<$0 + 4]) == separator }) else {
                return
            }
            let lines = String(decoding: buffer[..<end], as: UTF8.self).split(
                separator: "\r\n" as Character, omittingEmptySubsequences: false)
            let requestLine = lines[0].split(separator: " ")
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = String(line[line.index(after: colon)...]).trimmedSpaces()
            }
            let length = Int(headers["content-length"] ?? "0") ?? 0
            guard buffer.count >= end + 4 + length else { return }
            let request = Request(
                method: String(requestLine[0]), target: String(requestLine[1]), headers: headers,
                body: Array(buffer[(end + 4)..<(end + 4 + length)]), arrival: .now, connection: number)
            buffer.removeFirst(end + 4 + length)
            let index = recorded.withLock { requests in
                requests.append(request)
                return requests.count - 1
            }
            answer(reply(request, index))
        }

        private func answer(_ reply: Reply) {
            switch reply {
            case .status(let status, let headers, let body):
                var head = "HTTP/1.1 \(status) Scripted\r\nContent-Length: \(body.utf8.count)\r\n"
                for header in headers { head += header + "\r\n" }
                connection.write(Array((head + "\r\n" + body).utf8))
            case .chunked(let status, let chunks):
                var text = "HTTP/1.1 \(status) Scripted\r\nTransfer-Encoding: chunked\r\n\r\n"
                for chunk in chunks { text += String(chunk.utf8.count, radix: 16) + ";ext=1\r\n" + chunk + "\r\n" }
                text += "0\r\nX-Trailer: yes\r\n\r\n"
                connection.write(Array(text.utf8))
            case .closeDelimited(let status, let body):
                connection.write(Array("HTTP/1.1 \(status) Scripted\r\nConnection: close\r\n\r\n\(body)".utf8)) { [connection] _ in
                    connection.close()
                }
            case .hang:
                break
            }
        }
    }
}

extension String {
    fileprivate func trimmedSpaces() -> String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }
}
