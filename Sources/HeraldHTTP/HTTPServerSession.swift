public import HeraldEventLoop

/// One connection of an HTTP listener, in whichever HTTP its client speaks: HTTP/2 for a client that begins with
/// HTTP/2's preface (prior knowledge, in clear) or negotiated `h2` by ALPN, HTTP/1.1 otherwise. Both answer with
/// the same handler within the same limits.
///
/// In clear, the first bytes decide: they are read and kept until they are the preface or cannot be (one read, as
/// clients send the preface whole), then handed to the chosen session. Over TLS, the protocol ALPN negotiated
/// decides, with no peeking: pass it to ``start(negotiatedProtocol:)``.
///
/// Loop thread only: create it in the listener's accept callback (over TLS, once the handshake is done), call
/// ``start(negotiatedProtocol:)``, and ``closed()`` from the connection's `onClose`.
public final class HTTPServerSession: @unchecked Sendable {
    // @unchecked Sendable: only the timer's closure crosses into a @Sendable context, and it runs on the loop
    // thread, where all of the session's state lives.

    /// The session chosen, once the first bytes or ALPN have said which.
    public enum Chosen {
        case http1(HTTP1Session)
        case http2(HTTP2Session)
    }

    private let connection: StreamConnection
    private let loop: EventLoop
    private let handler: any HTTPRequestHandler
    private let limits: HTTPServerLimits
    private let http2Limits: HTTP2Limits
    private var peeked: [UInt8] = []
    private var timer: ScheduledTask?
    private var isClosed = false
    /// The session answering the connection, once chosen.
    public private(set) var chosen: Chosen?

    /// A connection answered by `handler` within `limits` (and `http2Limits` when it speaks HTTP/2).
    public init(
        connection: StreamConnection, loop: EventLoop, handler: any HTTPRequestHandler, limits: HTTPServerLimits,
        http2Limits: HTTP2Limits = HTTP2Limits()
    ) {
        self.connection = connection
        self.loop = loop
        self.handler = handler
        self.limits = limits
        self.http2Limits = http2Limits
    }

    /// Starts the connection. `negotiatedProtocol` is the ALPN protocol a TLS handshake agreed on: `h2` starts
    /// HTTP/2, `http/1.1` HTTP/1.1; `nil` (a connection in clear, or a TLS client that offered no ALPN) lets the
    /// first bytes decide.
    public func start(negotiatedProtocol: String? = nil) {
        switch negotiatedProtocol {
        case "h2": startHTTP2(initialBytes: nil)
        case .some: startHTTP1(initialBytes: nil)
        case nil:
            connection.onRead = { [weak self] bytes in self?.peek(bytes) }
            connection.onEnd = { [weak self] in self?.connection.close() }
            connection.startReading()
            // A client that connects and sends nothing is closed as an idle HTTP/1.1 one would be.
            timer = loop.scheduleTask(in: limits.idleTimeout) { [weak self] in
                guard let self, !self.isClosed, self.chosen == nil else { return }
                self.connection.close()
            }
        }
    }

    /// The connection has closed: cancels the timers.
    public func closed() {
        isClosed = true
        timer?.cancel()
        switch chosen {
        case .http1(let session): session.closed()
        case .http2(let session): session.closed()
        case nil: break
        }
    }

    /// Ends the connection gracefully where the protocol has a way to: HTTP/2's GOAWAY, the streams taken still
    /// answered. (An HTTP/1.1 connection ends after the answer it is writing, as the listener closes it.)
    public func shutdown() {
        if case .http2(let session) = chosen { session.shutdown() }
    }

    private func peek(_ bytes: UnsafeRawBufferPointer) {
        peeked.append(contentsOf: bytes)
        let compared = min(peeked.count, HTTP2Session.preface.count)
        let http2 = peeked[..<compared].elementsEqual(HTTP2Session.preface[..<compared])
        // Wait for the rest of a preface cut short (a client writing it in pieces).
        if http2, compared < HTTP2Session.preface.count { return }
        timer?.cancel()
        let initial = peeked
        peeked = []
        initial.withUnsafeBytes { initial in
            if http2 {
                startHTTP2(initialBytes: initial)
            } else {
                startHTTP1(initialBytes: initial)
            }
        }
    }

    private func startHTTP2(initialBytes: UnsafeRawBufferPointer?) {
        let session = HTTP2Session(connection: connection, loop: loop, handler: handler, limits: limits, http2Limits: http2Limits)
        chosen = .http2(session)
        session.start(initialBytes: initialBytes)
    }

    private func startHTTP1(initialBytes: UnsafeRawBufferPointer?) {
        let session = HTTP1Session(connection: connection, loop: loop, handler: handler, limits: limits)
        chosen = .http1(session)
        session.start()
        // start() set the connection's read callback: the bytes already read go the same way.
        if let initialBytes, !isClosed { connection.onRead?(initialBytes) }
    }
}
