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

/// What stream receivers share: listening on addresses, accepting within a connection limit, pausing and
/// resuming reading on every connection for the bus's backpressure, and closing everything at stop.
/// Loop thread only, like the sockets it owns.
public final class ReceiverListener<Session: ReceiverSession> {
    private let context: PluginContext
    private let maximumConnections: Int
    private let makeSession: (StreamConnection) -> Session
    private var servers: [StreamServer] = []
    private var sessions: [ObjectIdentifier: (connection: StreamConnection, session: Session)] = [:]
    private var paused = false

    public init(context: PluginContext, maximumConnections: Int, makeSession: @escaping (StreamConnection) -> Session) {
        self.context = context
        self.maximumConnections = maximumConnections
        self.makeSession = makeSession
    }

    /// Listens on every address (Unix socket files get `unixMode`); when one fails, the ones already open are
    /// closed and the error thrown.
    public func listen(on addresses: [SocketAddress], unixMode: UInt32 = 0o600) throws {
        context.loop.preconditionInEventLoop()
        do {
            for address in addresses {
                let server = try StreamServer.listen(on: context.loop, at: address, unixMode: unixMode) { [weak self] connection in
                    self?.accept(connection)
                }
                server.logAcceptFailures(to: context.logger)
                servers.append(server)
                context.logger.info("listening", metadata: ["address": "\(server.localAddress)"])
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

    /// Stops reading every connection (the bus is full); new connections start paused.
    public func pause() {
        paused = true
        for entry in sessions.values { entry.connection.pauseReading() }
    }

    /// Reads every connection again.
    public func resume() {
        paused = false
        for entry in sessions.values {
            entry.connection.resumeReading()
            entry.session.resumed()
        }
    }

    /// Closes the servers and every connection.
    public func close() {
        for server in servers { server.close() }
        servers.removeAll()
        for entry in sessions.values { entry.connection.close() }
        sessions.removeAll()
    }

    /// Connections closed at accept because the limit was reached, since the warning that said so; `nil` while
    /// below the limit. One warning per stretch at the limit and one notice at its end, not a line per client (a
    /// connection storm would flood the log).
    private var refusedAtLimit: Int?

    private func accept(_ connection: StreamConnection) {
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
        let session = makeSession(connection)
        let key = ObjectIdentifier(connection)
        sessions[key] = (connection, session)
        connection.onClose = { [weak self] _ in
            session.closed()
            guard let self else { return }
            self.sessions[key] = nil
            if let refused = self.refusedAtLimit {
                self.refusedAtLimit = nil
                self.context.logger.notice(
                    "below the connection limit again", metadata: ["limit": "\(self.maximumConnections)", "refused": "\(refused)"])
            }
        }
        session.start()
        if paused { connection.pauseReading() }
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
