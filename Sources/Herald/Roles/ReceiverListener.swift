public import Logging

/// One connection of a receiver plugin, created by ``ReceiverListener`` for each accepted connection.
public protocol ReceiverSession: AnyObject {
    /// Sets the connection's callbacks and starts reading. Loop thread.
    func start()
    /// The connection has closed (timers are cancelled here). Loop thread.
    func closed()
    /// The bus has room again and the connection reads again: offer what was held back. Loop thread.
    func resumed()
}

extension ReceiverSession {
    public func resumed() {}
}

/// What stream receivers share: listening on addresses, accepting within a connection limit, securing TCP
/// connections with TLS when given a `StreamSecurity`, pausing and resuming reading on every connection for the
/// bus's backpressure, and closing everything at stop. Loop thread only, like the sockets it owns.
public final class ReceiverListener<Session: ReceiverSession> {
    private let context: PluginContext
    private let maximumConnections: Int
    private let security: (any StreamSecurity)?
    private let applicationProtocols: [String]
    private let makeSession: (StreamConnection) -> Session
    private var servers: [StreamServer] = []
    /// Every open connection; its session once it has one (a TLS connection gets it when its handshake is done).
    private var sessions: [ObjectIdentifier: (connection: StreamConnection, session: Session?)] = [:]
    private var paused = false
    /// Called once every connection has closed, after ``close(linger:completion:)``.
    private var closeWaiters: [() -> Void] = []
    private var lingerTimer: ScheduledTask?
    /// While closing: each connection's bytes its peer had not taken at the last look of the linger timer.
    private var untakenAtLastLook: [ObjectIdentifier: Int] = [:]

    /// The sessions of the open connections (those in a TLS handshake have none yet). Loop thread only.
    package var openSessions: [Session] { sessions.values.compactMap(\.session) }

    /// - Parameters:
    ///   - context: the plugin's context: its loop and logger.
    ///   - maximumConnections: the most connections open at once; more are closed as they are accepted.
    ///   - security: TLS for the connections accepted on TCP addresses (Unix sockets stay plain); `nil`: none.
    ///     A TLS connection's session is made once its handshake is done, so `makeSession` can choose by
    ///     `StreamConnection.applicationProtocol`. Connections in their handshake count against the limit.
    ///   - applicationProtocols: what the sessions speak, offered to TLS clients (ALPN), in order of preference.
    ///   - makeSession: makes the session of a connection (once its TLS handshake is done).
    public init(
        context: PluginContext, maximumConnections: Int, security: (any StreamSecurity)? = nil, applicationProtocols: [String] = [],
        makeSession: @escaping (StreamConnection) -> Session
    ) {
        self.context = context
        self.maximumConnections = maximumConnections
        self.security = security
        self.applicationProtocols = applicationProtocols
        self.makeSession = makeSession
    }

    /// Listens on every address (Unix socket files get `unixMode`); when one fails, the ones already open are
    /// closed and the error thrown.
    public func listen(on addresses: [SocketAddress], unixMode: UInt32 = 0o600) throws {
        context.loop.preconditionInEventLoop()
        do {
            for address in addresses {
                let security = address.port == nil ? nil : self.security
                let server = try StreamServer.listen(on: context.loop, at: address, unixMode: unixMode) { [weak self] connection in
                    self?.accept(connection, security: security)
                }
                server.logAcceptFailures(to: context.logger)
                servers.append(server)
                context.logger.info("listening", metadata: ["address": "\(server.localAddress)", "tls": "\(security != nil)"])
            }
        } catch {
            close()
            throw error
        }
    }

    /// The addresses listened on (TCP port 0 replaced by the chosen port).
    public var localAddresses: [SocketAddress] { servers.map(\.localAddress) }

    /// Connections open now.
    public var connectionCount: Int { sessions.count }

    /// Stops reading every connection with a session (the bus is full); new sessions start paused. Handshakes go on.
    public func pause() {
        paused = true
        for entry in sessions.values where entry.session != nil { entry.connection.pauseReading() }
    }

    /// Reads every connection again.
    public func resume() {
        paused = false
        for entry in sessions.values {
            guard let session = entry.session else { continue }
            entry.connection.resumeReading()
            session.resumed()
        }
    }

    /// Closes the servers and every connection. What the connections have written still goes out: each stops
    /// reading and is half-closed once its queued writes are out (its peer reads every answer, then the end), then
    /// closed — or closed as it is when its peer has taken none of them for `linger` (a peer that reads, however
    /// slowly, gets them all). `completion` runs once every connection has closed.
    public func close(linger: Duration = .seconds(1), completion: @escaping () -> Void) {
        close(linger: linger, then: completion)
    }

    /// Closes the servers and every connection, as ``close(linger:completion:)`` does (a second's linger).
    public func close() {
        close(linger: .seconds(1), then: nil)
    }

    private func close(linger: Duration, then completion: (() -> Void)?) {
        for server in servers { server.close() }
        servers.removeAll()
        if let completion { closeWaiters.append(completion) }
        guard !sessions.isEmpty else { return closeFinished() }
        for entry in sessions.values {
            let connection = entry.connection
            connection.pauseReading()
            connection.shutdownWriting { _ in connection.close() }
        }
        guard lingerTimer == nil else { return }
        for (key, entry) in sessions { untakenAtLastLook[key] = entry.connection.untakenBytes }
        scheduleLingerLook(linger)
    }

    /// In `linger`, closes the connections whose peer took nothing since the last look (the bytes it has not taken,
    /// queued here or in the kernel, are as many as then), and looks again later while any is open. The kernel's part
    /// counts: it takes more from the queue here only once most of its own has been read, so a peer that reads slowly
    /// can leave the queue here unchanged for longer than the linger.
    private func scheduleLingerLook(_ linger: Duration) {
        // The timer keeps the listener until every connection has closed (its owner may have let it go).
        let look = LoopBound(
            {
                for (key, entry) in self.sessions {
                    let untaken = entry.connection.untakenBytes
                    if self.untakenAtLastLook[key] == untaken {
                        let unsent = entry.connection.writeQueueSize
                        if unsent > 0 {
                            self.context.logger.warning(
                                "closing a connection at stop: its peer took none of its answers for the linger; they are not sent",
                                metadata: ["peer": "\(entry.connection.label)", "bytes": "\(unsent)", "linger": "\(linger)"])
                        }
                        entry.connection.close()
                    } else {
                        self.untakenAtLastLook[key] = untaken
                    }
                }
                if !self.sessions.isEmpty { self.scheduleLingerLook(linger) }
            }, loop: context.loop)
        lingerTimer = context.loop.scheduleTask(in: linger) { look.value() }
    }

    private func closeFinished() {
        lingerTimer?.cancel()
        lingerTimer = nil
        untakenAtLastLook = [:]
        let waiters = closeWaiters
        closeWaiters.removeAll()
        for waiter in waiters { waiter() }
    }

    /// Connections closed at accept because the limit was reached, since the warning that said so; `nil` while
    /// below the limit. One warning per stretch at the limit and one notice at its end, not a line per client (a
    /// connection storm would flood the log).
    private var refusedAtLimit: Int?

    private func accept(_ connection: StreamConnection, security: (any StreamSecurity)?) {
        guard sessions.count < maximumConnections else {
            if let refused = refusedAtLimit {
                refusedAtLimit = refused + 1
            } else {
                refusedAtLimit = 1
                context.logger.warning(
                    "too many connections; closing new ones until one closes", metadata: ["limit": "\(maximumConnections)"])
            }
            connection.close()
            return
        }
        let key = ObjectIdentifier(connection)
        guard let security else {
            begin(connection, key: key)
            return
        }
        sessions[key] = (connection, nil)
        connection.onClose = closeHandler(key: key, session: nil)
        security.secure(connection, applicationProtocols: applicationProtocols) { [weak self] in
            self?.begin(connection, key: key)
        }
    }

    private func begin(_ connection: StreamConnection, key: ObjectIdentifier) {
        let session = makeSession(connection)
        sessions[key] = (connection, session)
        connection.onClose = closeHandler(key: key, session: session)
        session.start()
        if paused { connection.pauseReading() }
    }

    private func closeHandler(key: ObjectIdentifier, session: Session?) -> (UVError?) -> Void {
        { [weak self] _ in
            session?.closed()
            guard let self else { return }
            self.sessions[key] = nil
            // The linger timer runs from a close with connections open until the last has closed.
            if self.sessions.isEmpty, self.lingerTimer != nil { self.closeFinished() }
            if let refused = self.refusedAtLimit {
                self.refusedAtLimit = nil
                self.context.logger.notice(
                    "below the connection limit again", metadata: ["limit": "\(self.maximumConnections)", "refused": "\(refused)"])
            }
        }
    }
}

extension StreamServer {
    /// Logs an outage of accepting once (a warning naming the error, `EMFILE` when the process is out of file
    /// descriptors) and its end (a notice with how many connections were refused meanwhile), instead of a line per
    /// refused client.
    public func logAcceptFailures(to logger: Logger) {
        let address = "\(localAddress)"
        onAcceptError = { error in
            logger.warning(
                "accept failed; refusing new connections until it works again",
                metadata: ["address": "\(address)", "error": "\(error)"])
        }
        onAcceptResumed = { failed in
            logger.notice("accepting connections again", metadata: ["address": "\(address)", "refused": "\(failed)"])
        }
    }
}
