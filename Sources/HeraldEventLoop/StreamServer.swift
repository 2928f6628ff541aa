import CLibUV
import Glibc

/// A listening TCP or Unix domain socket on an ``EventLoop``; each accepted connection is handed to the
/// `onAccept` closure given to `listen(on:at:backlog:unixMode:onAccept:)`.
///
/// Every method must be used on the loop thread (checked). The server stays open until ``close()`` or loop
/// shutdown; a Unix socket path the server created is removed when it closes.
public final class StreamServer: LoopHandle, @unchecked Sendable {
    // @unchecked Sendable: a reference may be handed to any thread, but every member checks that it is
    // used on the loop thread, where all of its state lives.

    /// The address the server listens on: for TCP the kernel's answer, so port 0 becomes the chosen port.
    public private(set) var localAddress: SocketAddress
    /// Called when accepting a connection fails after the last accept succeeded. While the failures go on it is not
    /// called again, so a log line written here is written once per outage, not once per client knocking. The server
    /// keeps listening, and each refused client's connection is closed at once (it does not hang).
    ///
    /// Out of file descriptors: a connection that takes one of the last ``reservedDescriptors`` below `RLIMIT_NOFILE`
    /// is closed and counted as a failure (`EMFILE`), so clients can never take the descriptors the daemon's files
    /// need. When something else used them up, libuv's own `EMFILE` handling closes waiting connections with a spare
    /// descriptor, without telling the server, and the loop does not spin either way.
    public var onAcceptError: ((UVError) -> Void)?
    /// Called at the first accept that succeeds after failures, with how many accepts failed meanwhile.
    public var onAcceptResumed: ((Int) -> Void)?
    /// Called once the server is closed.
    public var onClose: (() -> Void)?

    private let onAccept: (StreamConnection) -> Void
    private let kind: StreamConnection.Kind
    private var acceptedCount = 0
    /// Accepts failed since the last one that succeeded.
    private var failedAccepts = 0

    /// Listens on `address`; each accepted connection goes to `onAccept` (on the loop thread), which should set
    /// its callbacks and call ``StreamConnection/startReading()``. Call on the loop thread.
    ///
    /// Throws ``UVError`` with `EADDRINUSE` when the port is taken or the Unix path already exists (an existing
    /// file is never removed), `ENAMETOOLONG` for a Unix path over ``SocketAddress/maximumUnixPathLength`` bytes,
    /// and ``EventLoopError/shutDown`` when the loop is shutting down.
    ///
    /// A Unix socket file gets `unixMode` (default 0600: only the owner may connect), set between bind and
    /// listen, so no one can connect before the mode is in place.
    ///
    /// When the service manager passed a listening socket on exactly `address` (``InheritedSockets``), the server
    /// listens on that one and binds nothing.
    public static func listen(
        on loop: EventLoop,
        at address: SocketAddress,
        backlog: Int32 = 511,
        unixMode: UInt32 = 0o600,
        onAccept: @escaping (StreamConnection) -> Void
    ) throws -> StreamServer {
        try loop.checkAcceptingHandles()
        switch address {
        case .tcp:
            return try StreamServer(loop: loop, kind: .tcp, requested: address, backlog: backlog, unixMode: unixMode, onAccept: onAccept)
        case .unix(let path):
            try SocketAddress.checkUnixPath(path, operation: "listen on \(address)")
            return try StreamServer(loop: loop, kind: .unix, requested: address, backlog: backlog, unixMode: unixMode, onAccept: onAccept)
        }
    }

    /// Listens on `address` from any context; see ``listen(on:at:backlog:unixMode:onAccept:)``. `onAccept` runs on the loop thread.
    public static func listen(
        on loop: EventLoop,
        at address: SocketAddress,
        backlog: Int32 = 511,
        unixMode: UInt32 = 0o600,
        onAccept: @escaping @Sendable (StreamConnection) -> Void
    ) async throws -> StreamServer {
        try await loop.submit { try listen(on: loop, at: address, backlog: backlog, unixMode: unixMode, onAccept: onAccept) }
    }

    private init(
        loop: EventLoop,
        kind: StreamConnection.Kind,
        requested: SocketAddress,
        backlog: Int32,
        unixMode: UInt32,
        onAccept: @escaping (StreamConnection) -> Void
    ) throws {
        self.onAccept = onAccept
        self.kind = kind
        let operation = "listen on \(requested)"
        switch kind {
        case .tcp:
            self.localAddress = requested
            super.init(loop: loop, byteCount: herald_uv_tcp_size())
            let result = uv_tcp_init(loop.uv, raw.assumingMemoryBound(to: uv_tcp_t.self))
            if result < 0 {
                abandon()
                throw UVError(code: result, operation: operation)
            }
        case .unix:
            self.localAddress = requested
            super.init(loop: loop, byteCount: herald_uv_pipe_size())
            let result = uv_pipe_init(loop.uv, raw.assumingMemoryBound(to: uv_pipe_t.self), 0)
            if result < 0 {
                abandon()
                throw UVError(code: result, operation: operation)
            }
        }
        adopt()
        do {
            if let inherited = InheritedSockets.take(requested) {
                try listenOnInherited(inherited, requested, backlog: backlog, operation: operation)
            } else {
                try bindAndListen(requested, backlog: backlog, unixMode: unixMode, operation: operation)
            }
        } catch {
            closeHandle()
            throw error
        }
    }

    private var boundPath: String?

    private func bindAndListen(_ address: SocketAddress, backlog: Int32, unixMode: UInt32, operation: String) throws {
        switch address {
        case .tcp:
            _ = try address.withSockAddr { sockaddr in
                try UVError.check(uv_tcp_bind(raw.assumingMemoryBound(to: uv_tcp_t.self), sockaddr, 0), operation)
            }
        case .unix(let path):
            try UVError.check(uv_pipe_bind(raw.assumingMemoryBound(to: uv_pipe_t.self), path), operation)
            boundPath = path
            if chmod(path, mode_t(unixMode)) != 0 {
                throw UVError(code: -errno, operation: "set mode \(String(unixMode, radix: 8)) on \(address)")
            }
        }
        try startListening(backlog: backlog, operation: operation)
        if case .tcp = address {
            var storage = sockaddr_storage()
            var length = Int32(MemoryLayout<sockaddr_storage>.size)
            let result = withUnsafeMutableBytes(of: &storage) {
                uv_tcp_getsockname(
                    raw.assumingMemoryBound(to: uv_tcp_t.self), $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
            }
            try UVError.check(result, "read the address of \(address)")
            localAddress = SocketAddress.fromStorage(&storage) ?? address
        }
    }

    /// Listens on a socket the service manager bound already (``InheritedSockets``); its file, for a Unix socket,
    /// is the service manager's and stays when the server closes.
    private func listenOnInherited(_ descriptor: Int32, _ address: SocketAddress, backlog: Int32, operation: String) throws {
        switch address {
        case .tcp: try UVError.check(uv_tcp_open(raw.assumingMemoryBound(to: uv_tcp_t.self), uv_os_sock_t(descriptor)), operation)
        case .unix: try UVError.check(uv_pipe_open(raw.assumingMemoryBound(to: uv_pipe_t.self), uv_file(descriptor)), operation)
        }
        try startListening(backlog: backlog, operation: operation)
    }

    private func startListening(backlog: Int32, operation: String) throws {
        try UVError.check(
            uv_listen(herald_as_stream(raw), backlog) { server, status in
                let owner = Unmanaged<LoopHandle>.fromOpaque(server!.pointee.data).takeUnretainedValue() as! StreamServer
                owner.acceptOne(status: status)
            }, operation)
    }

    /// The TCP port the server listens on; `nil` for a Unix socket.
    public var port: Int? { localAddress.port }

    /// How many connections were accepted so far.
    public var acceptedConnections: Int {
        loop.preconditionInEventLoop()
        return acceptedCount
    }

    private func acceptOne(status: Int32) {
        if status < 0 {
            acceptFailed(UVError(code: status, operation: "accept on \(localAddress)"))
            return
        }
        let connection: StreamConnection
        do {
            connection = try StreamConnection(loop: loop, kind: kind)
        } catch {
            acceptFailed(error as? UVError ?? UVError(code: Int32(UV_ENOMEM.rawValue), operation: "accept on \(localAddress)"))
            return
        }
        let result = uv_accept(herald_as_stream(raw), connection.stream)
        if result < 0 {
            connection.closeHandle()
            acceptFailed(UVError(code: result, operation: "accept on \(localAddress)"))
            return
        }
        if let exhausted = Self.descriptorsExhausted(connection.fileDescriptor) {
            connection.closeHandle()
            acceptFailed(UVError(code: Int32(UV_EMFILE.rawValue), operation: "accept on \(localAddress) (\(exhausted))"))
            return
        }
        if failedAccepts > 0 {
            let failed = failedAccepts
            failedAccepts = 0
            onAcceptResumed?(failed)
        }
        if kind == .tcp {
            uv_tcp_nodelay(connection.raw.assumingMemoryBound(to: uv_tcp_t.self), 1)
            connection.label = connection.peerAddress.map { "\($0)" } ?? connection.label
        } else {
            connection.label = "\(localAddress) peer"
        }
        acceptedCount += 1
        onAccept(connection)
    }

    /// File descriptors kept free of connections: the store, the analytics files, log rotation, a NATS reconnect and
    /// libuv's own spare descriptor need them even when clients have taken all the others.
    public static let reservedDescriptors = 16

    /// Why a connection accepted on descriptor `fd` must be closed again: it took one of the last
    /// ``reservedDescriptors`` below the process's `RLIMIT_NOFILE`. Descriptors are handed out lowest first, so a
    /// descriptor that high means (nearly) every one below it is in use. `nil` when there is room.
    static func descriptorsExhausted(_ fd: Int32) -> String? {
        var limit = rlimit()
        guard fd >= 0, getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        let soft = Int(clamping: limit.rlim_cur)
        guard Int(fd) >= soft - reservedDescriptors else { return nil }
        return "out of file descriptors: descriptor \(fd) of a limit of \(soft), the last \(reservedDescriptors) kept for files"
    }

    private func acceptFailed(_ error: UVError) {
        failedAccepts += 1
        if failedAccepts == 1 { onAcceptError?(error) }
    }

    /// Stops listening; connections already accepted stay open. ``onClose`` runs once closed. Idempotent.
    public func close() {
        loop.preconditionInEventLoop()
        closeHandle()
    }

    override func didClose() {
        if let boundPath { unlink(boundPath) }
        let callback = onClose
        onClose = nil
        onAcceptError = nil
        onAcceptResumed = nil
        callback?()
    }
}
