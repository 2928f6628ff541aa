public import HeraldEventLoop

/// One HTTP/2 connection on nghttp2: each stream's request read whole and handed to the handler, its answer sent
/// on the stream whenever the handler gives it, within the ``HTTPServerLimits`` an HTTP/1.1 connection keeps
/// (431, 413 and 408 as answers on the stream) and the ``HTTP2Limits`` of HTTP/2 alone (concurrent streams,
/// streams cancelled before their answer, control frames: past them, GOAWAY `ENHANCE_YOUR_CALM`).
///
/// The connection is idle-closed (GOAWAY, then close) when no stream has been open for
/// ``HTTPServerLimits/idleTimeout``; ``shutdown()`` ends it gracefully (the streams taken are still answered).
/// Output stops while the peer does not read (more than 256 KiB queued), so nghttp2's own bounds on the frames
/// it keeps apply to a client that sends without reading.
///
/// Loop thread only: create it in the listener's accept callback (or through ``HTTPServerSession``), call
/// ``start(initialBytes:)``, and ``closed()`` from the connection's `onClose`.
public final class HTTP2Session: HTTPResponseSink, @unchecked Sendable {
    // @unchecked Sendable: only the timers' closures cross into a @Sendable context, and they run on the loop
    // thread, where all of the session's state lives.

    /// The client preface every HTTP/2 connection begins with (RFC 9113, 3.4): what tells an HTTP/2 client that
    /// knows the server speaks it (prior knowledge, in clear) from an HTTP/1.1 one.
    public static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    private let connection: StreamConnection
    private let loop: EventLoop
    private let handler: any HTTPRequestHandler
    let session: HTTP2ServerSession
    private var idleTimer: ScheduledTask?
    private var requestTimer: ScheduledTask?
    private var lastRead: ContinuousClock.Instant = .now
    private var isClosed = false
    /// The write side is shut (or being shut): what the peer still sends is read and dropped until it ends.
    private var finishing = false
    /// Output waits for the kernel to take what is queued (a peer that does not read).
    private var waitingForWrites = false
    /// Bytes queued for the peer past which nghttp2 keeps its frames.
    private static let writeHighWater = 256 * 1024

    /// A session for `connection` (on `loop`), answering with `handler` within `limits` and `http2Limits`.
    public init(
        connection: StreamConnection, loop: EventLoop, handler: any HTTPRequestHandler, limits: HTTPServerLimits,
        http2Limits: HTTP2Limits = HTTP2Limits()
    ) {
        self.connection = connection
        self.loop = loop
        self.handler = handler
        self.session = HTTP2ServerSession(limits: limits, http2Limits: http2Limits)
        session.onRequest = { [unowned self] streamID, request in
            self.handler.handle(request, responder: HTTPResponder(sink: self, slot: Int(streamID)))
        }
        session.onRefusal = { [unowned self] streamID, error in
            self.respond(self.handler.response(to: error), slot: Int(streamID))
        }
    }

    /// Sets the connection's read callbacks, starts reading and the idle timer, and sends the server's SETTINGS.
    /// `initialBytes` are bytes already read from the connection (the preface that chose HTTP/2, say).
    public func start(initialBytes: UnsafeRawBufferPointer? = nil) {
        connection.onRead = { [weak self] bytes in self?.read(bytes) }
        connection.onEnd = { [weak self] in self?.peerEnded() }
        connection.startReading()
        armIdleTimer()
        if let initialBytes {
            read(initialBytes)
        } else {
            pump()
        }
    }

    /// The connection has closed: cancels the timers.
    public func closed() {
        isClosed = true
        idleTimer?.cancel()
        requestTimer?.cancel()
    }

    /// Ends the connection gracefully: a GOAWAY naming the last stream taken, those streams answered, then close.
    public func shutdown() {
        guard !isClosed, !finishing else { return }
        session.shutdown()
        pump()
    }

    /// The answer for the stream `slot` names; dropped when the stream or the connection has closed.
    public func respond(_ response: HTTPResponse, slot: Int) {
        guard !isClosed, !finishing else { return }
        session.respond(to: Int32(truncatingIfNeeded: slot), response)
        pump()
    }

    private func read(_ bytes: UnsafeRawBufferPointer) {
        guard !finishing else { return }
        lastRead = .now
        session.receive(bytes)
        if !isClosed, !finishing {
            pump()
            armRequestTimer()
        }
    }

    private func peerEnded() {
        guard !isClosed else { return }
        if finishing {
            connection.close()
            return
        }
        // Nothing more will come: what is owed is sent, then the connection closes.
        pump()
        finish()
    }

    /// Sends what nghttp2 has to send, while the peer takes it; ends the connection when the session is over.
    private func pump() {
        guard !isClosed, !finishing, !waitingForWrites else { return }
        session.drainOutput { bytes in
            guard connection.writeQueueSize + bytes.count >= Self.writeHighWater else {
                connection.write(bytes)
                return true
            }
            // The peer is not taking what is sent: the rest waits until the kernel has taken this.
            waitingForWrites = true
            connection.write(bytes) { [weak self] _ in
                guard let self else { return }
                self.waitingForWrites = false
                self.pump()
            }
            return false
        }
        if !waitingForWrites, session.isFinished { finish() }
    }

    /// Half-closes once the last bytes are queued, reads and drops what still comes, and closes when the peer
    /// ends or after a short linger (closing with unread bytes would reset the connection, and a reset can
    /// destroy the GOAWAY before the peer reads it).
    private func finish() {
        guard !finishing, !isClosed else { return }
        finishing = true
        idleTimer?.cancel()
        requestTimer?.cancel()
        connection.shutdownWriting { [weak self] _ in
            guard let self, !self.isClosed else { return }
            self.idleTimer = self.loop.scheduleTask(in: min(self.session.limits.idleTimeout, .seconds(2))) { [weak self] in
                guard let self, !self.isClosed else { return }
                self.connection.close()
            }
        }
    }

    private func armIdleTimer() {
        idleTimer = loop.scheduleTask(in: session.limits.idleTimeout) { [weak self] in
            guard let self, !self.isClosed, !self.finishing else { return }
            if self.session.openStreams == 0, ContinuousClock.now - self.lastRead >= self.session.limits.idleTimeout {
                self.session.shutdown()
                self.pump()
                self.finish()
            } else {
                self.armIdleTimer()
            }
        }
    }

    /// Runs while a request is incomplete: answers 408 to the streams past the request timeout.
    private func armRequestTimer() {
        guard requestTimer == nil, let next = session.expireRequests() else { return }
        requestTimer = loop.scheduleTask(in: max(next - .now, .milliseconds(1))) { [weak self] in
            guard let self, !self.isClosed, !self.finishing else { return }
            self.requestTimer = nil
            self.armRequestTimer()
            self.pump()
        }
    }
}
