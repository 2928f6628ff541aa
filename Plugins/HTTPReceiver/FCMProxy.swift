import Herald
import HeraldHTTP
import HeraldTLS

/// The start of a connection of a receiver with the FCM proxy on: a client that begins with `CONNECT` asks for a tunnel to one of
/// Google's hosts the Admin SDKs call, and gets Herald itself at the other end (TLS with the proxy's certificate,
/// then the receiver's HTTP session); any other client is served as on a receiver without the proxy, its first
/// bytes handed to the HTTP session.
///
/// Only `CONNECT fcm.googleapis.com:443`, `iid.googleapis.com:443` and `oauth2.googleapis.com:443` are taken: any
/// other target is answered 403 and the connection closed (this is never a general proxy). Inside a tunnel only TLS
/// is spoken: plain HTTP there fails the handshake. Loop thread only.
final class ConnectPreamble: @unchecked Sendable {
    // @unchecked Sendable: only the timer's closure crosses into a @Sendable context, and it runs on the loop
    // thread, where all of the preamble's state lives.

    /// The tunnels served: Google's hosts the Admin SDKs send to, take topic changes at, and get tokens from.
    static let targets: Set<String> = ["fcm.googleapis.com:443", "iid.googleapis.com:443", "oauth2.googleapis.com:443"]
    private static let connectPrefix = Array("CONNECT ".utf8)

    private let connection: StreamConnection
    private let loop: EventLoop
    private let tls: TLSServerContext
    private let limits: HTTPServerLimits
    /// Starts the HTTP session: with the protocol ALPN agreed on in a tunnel (`nil` in clear) and the bytes read
    /// that belong to it.
    private var serve: ((String?, [UInt8]) -> Void)?
    private var head: [UInt8] = []
    /// How much of `head` was scanned for its end.
    private var scanned = 0
    private var timer: ScheduledTask?
    private var isClosed = false

    init(connection: StreamConnection, loop: EventLoop, tls: TLSServerContext, limits: HTTPServerLimits) {
        self.connection = connection
        self.loop = loop
        self.tls = tls
        self.limits = limits
    }

    /// Reads the connection's first bytes; `serve` starts the HTTP session once they say how.
    func start(serve: @escaping (String?, [UInt8]) -> Void) {
        self.serve = serve
        connection.onRead = { [weak self] bytes in self?.read(bytes) }
        connection.onEnd = { [weak self] in self?.connection.close() }
        connection.startReading()
        // A client whose request head does not arrive in time is closed, as the HTTP session would close it.
        timer = loop.scheduleTask(in: limits.requestTimeout) { [weak self] in
            guard let self, !self.isClosed, self.serve != nil else { return }
            self.connection.close()
        }
    }

    func closed() {
        isClosed = true
        timer?.cancel()
        serve = nil
    }

    private func read(_ bytes: UnsafeRawBufferPointer) {
        head.append(contentsOf: bytes)
        let end: Int
        // Each read is scanned once: from where the last scan stopped (less the three bytes a "\r\n\r\n" split
        // between reads may have begun with).
        let parsed = Self.parse(head, maximumHeaderBytes: limits.maximumHeaderBytes, scanningFrom: max(0, scanned - 3))
        scanned = head.count
        switch parsed {
        case .incomplete: return
        case .notConnect: return serveHere()
        case .refused(let status, let reason, let message): return refuse(status, reason, message)
        case .tunnel(_, let headEnd): end = headEnd
        }
        timer?.cancel()
        let early = Array(head[end...])
        head = []
        // Sent now, in clear: a write would wait for the end of the loop's turn and go through TLS by then.
        Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8).withUnsafeBytes { connection.send($0, completion: nil) }
        connection.pauseReading()
        connection.onRead = nil
        tls.secure(connection, applicationProtocols: HTTPReceiver.applicationProtocols) { [weak self] in
            guard let self, let serve = self.serve else { return }
            self.serve = nil
            serve(self.connection.applicationProtocol, [])
        }
        // What the client sent right behind its CONNECT (its TLS hello, without waiting for the answer).
        if !early.isEmpty { early.withUnsafeBytes { connection.filter?.received($0) } }
    }

    /// Not a CONNECT: the receiver's HTTP session serves the connection from its first bytes.
    private func serveHere() {
        timer?.cancel()
        let initial = head
        head = []
        guard let serve else { return }
        self.serve = nil
        serve(nil, initial)
    }

    /// Answers `status` with a JSON error in Google's shape and closes the connection.
    private func refuse(_ status: Int, _ reason: String, _ message: String) {
        timer?.cancel()
        head = []
        serve = nil
        connection.onRead = nil
        let body = JSONValue.object([
            "error": [
                "code": .int(Int64(status)), "message": .string(message),
                "status": status == 403 ? "PERMISSION_DENIED" : "INVALID_ARGUMENT",
            ]
        ]).jsonBytes()
        var answer = Array(
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
                .utf8)
        answer += body
        connection.write(answer)
        connection.shutdownWriting { [weak self] _ in self?.connection.close() }
    }

    /// What a connection's first bytes are, as far as they go.
    enum Head: Equatable {
        /// A CONNECT (or its first bytes) whose head has not ended yet.
        case incomplete
        /// Not a CONNECT: an HTTP request for the receiver itself.
        case notConnect
        /// A CONNECT refused with `status` (`reason` its reason phrase) and `message` (the JSON error's).
        case refused(status: Int, reason: String, message: String)
        /// A CONNECT to one of ``targets`` (lower case); the tunnel's bytes start at `end`, after the head.
        case tunnel(target: String, end: Int)
    }

    /// Reads `bytes`, the connection's first bytes: a head longer than `maximumHeaderBytes` is refused 431, a
    /// request line that is not `CONNECT host:port HTTP/1.x` 400, a target not in ``targets`` 403. The end of the
    /// head is looked for from `start` on (what an earlier call already scanned is not scanned again).
    static func parse(_ bytes: [UInt8], maximumHeaderBytes: Int, scanningFrom start: Int = 0) -> Head {
        let compared = min(bytes.count, connectPrefix.count)
        guard bytes[..<compared].elementsEqual(connectPrefix[..<compared]) else { return .notConnect }
        guard let end = endOfHead(bytes, from: start) else {
            if bytes.count > maximumHeaderBytes {
                return .refused(status: 431, reason: "Request Header Fields Too Large", message: "The CONNECT request's head is too large.")
            }
            return .incomplete
        }
        let line = bytes[..<(bytes.firstIndex(of: UInt8(ascii: "\r")) ?? end)].split(separator: UInt8(ascii: " "))
        guard line.count == 3, line[2].starts(with: Array("HTTP/1.".utf8)) else {
            return .refused(status: 400, reason: "Bad Request", message: "A CONNECT request line is CONNECT host:port HTTP/1.1.")
        }
        let target = String(decoding: line[1], as: UTF8.self).lowercased()
        guard targets.contains(target) else {
            return .refused(
                status: 403, reason: "Forbidden",
                message:
                    "Herald tunnels to fcm.googleapis.com:443, iid.googleapis.com:443 and oauth2.googleapis.com:443 only; it is not a general proxy."
            )
        }
        return .tunnel(target: target, end: end + 4)
    }

    /// Where the blank line that ends a request head begins.
    private static func endOfHead(_ bytes: [UInt8], from start: Int) -> Int? {
        guard bytes.count >= start + 4 else { return nil }
        for index in start...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }
}
