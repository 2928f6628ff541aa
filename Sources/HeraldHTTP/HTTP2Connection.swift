import HeraldEventLoop

/// One HTTP/2 connection on Herald's loop: an ``HTTP2ServerSession`` over a ``StreamConnection``, with the
/// idle and request timeouts, write backpressure and the end of the connection (GOAWAY, half-close, close).
/// Loop thread only; no thread of its own.
final class HTTP2Connection: @unchecked Sendable {
    // @unchecked Sendable: only the timers' closures cross into a @Sendable context, and they run on the loop
    // thread, where all of the connection's state lives.

    /// The client preface every HTTP/2 connection in clear by prior knowledge begins with (RFC 9113, 3.4).
    static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    let connection: StreamConnection
    let loop: EventLoop
    let session: HTTP2ServerSession
    private var idleTimer: ScheduledTask?
    private var requestTimer: ScheduledTask?
    private var lastRead: ContinuousClock.Instant = .now
    private var isClosed = false
    /// The write side is shut (or being shut): what the peer still sends is read and dropped until it ends.
    private var finishing = false
    /// Output waits for the kernel to take what is queued (a peer that does not read).
    private var waitingForWrites = false
    /// Bytes queued for the peer past which nghttp2 keeps its frames: its own bounds on queued
    /// acknowledgements then apply to a peer that sends without reading.
    private static let writeHighWater = 256 * 1024

    /// Makes the connection; `onRequest` answers each request through ``respond(to:status:headers:body:)``, and
    /// `onRefusal` each stream refused by a limit.
    init(
        connection: StreamConnection, loop: EventLoop, limits: HTTP2Limits,
        onRequest: @escaping (HTTP2Connection, HTTP2ServerSession.Request) -> Void,
        onRefusal: @escaping (HTTP2Connection, Int32, HTTP2ServerSession.Refusal) -> Void
    ) {
        self.connection = connection
        self.loop = loop
        self.session = HTTP2ServerSession(limits: limits)
        session.onRequest = { [unowned self] request in onRequest(self, request) }
        session.onRefusal = { [unowned self] streamID, refusal in onRefusal(self, streamID, refusal) }
    }

    /// Starts reading; `initialBytes` are bytes already read from the connection (the ones that chose HTTP/2).
    func start(initialBytes: UnsafeRawBufferPointer? = nil) {
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

    /// The connection has closed: timers are cancelled.
    func closed() {
        isClosed = true
        idleTimer?.cancel()
        requestTimer?.cancel()
    }

    /// Ends the connection gracefully: GOAWAY, the streams already taken answered, then close.
    func shutdown() {
        guard !isClosed, !finishing else { return }
        session.shutdown()
        pump()
    }

    /// Answers a stream (see ``HTTP2ServerSession/respond(to:status:headers:body:)``) and sends what can be sent.
    func respond(to streamID: Int32, status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        guard !isClosed, !finishing else { return }
        session.respond(to: streamID, status: status, headers: headers, body: body)
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
        if waitingForWrites { return }
        if session.isFinished { finish() }
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
            let silence = ContinuousClock.now - self.lastRead
            if self.session.openStreams == 0, silence >= self.session.limits.idleTimeout {
                self.session.shutdown()
                self.pump()
                if !self.finishing { self.finish() }
            } else {
                self.armIdleTimer()
            }
        }
    }

    /// Runs while a request is incomplete: answers 408 to the streams past the request timeout.
    private func armRequestTimer() {
        guard requestTimer == nil else { return }
        guard let next = session.expireRequests(olderThan: session.limits.requestTimeout) else { return }
        requestTimer = loop.scheduleTask(in: max(next - .now, .milliseconds(1))) { [weak self] in
            guard let self, !self.isClosed, !self.finishing else { return }
            self.requestTimer = nil
            self.armRequestTimer()
            self.pump()
        }
    }
}
