import CLibUV
import Glibc

/// A listening TCP or Unix domain socket on an ``EventLoop``; each accepted connection is handed to the
/// `onAccept` closure given to ``listen(on:at:backlog:onAccept:)``.
///
/// Every method must be used on the loop thread (checked). The server stays open until ``close()`` or loop
/// shutdown; a Unix socket path the server created is removed when it closes.
public final class StreamServer: LoopHandle, @unchecked Sendable {
    // @unchecked Sendable: a reference may be handed to any thread, but every member checks that it is
    // used on the loop thread, where all of its state lives.

    /// The address the server listens on: for TCP the kernel's answer, so port 0 becomes the chosen port.
    public private(set) var localAddress: SocketAddress
    /// Called when accepting a connection failed (for example `EMFILE`, out of file descriptors). The server keeps listening.
    public var onAcceptError: ((UVError) -> Void)?
    /// Called once the server is closed.
    public var onClose: (() -> Void)?

    private let onAccept: (StreamConnection) -> Void
    private let kind: StreamConnection.Kind
    private var acceptedCount = 0

    /// Listens on `address`; each accepted connection goes to `onAccept` (on the loop thread), which should set
    /// its callbacks and call ``StreamConnection/startReading()``. Call on the loop thread.
    ///
    /// Throws ``UVError`` with `EADDRINUSE` when the port is taken or the Unix path already exists (an existing
    /// file is never removed), `ENAMETOOLONG` for a Unix path over ``SocketAddress/maximumUnixPathLength`` bytes,
    /// and ``EventLoopError/shutDown`` when the loop is shutting down.
    ///
    /// A Unix socket file gets `unixMode` (default 0600: only the owner may connect), set between bind and
    /// listen, so no one can connect before the mode is in place.
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

    /// Listens on `address` from any context; see ``listen(on:at:backlog:onAccept:)``. `onAccept` runs on the loop thread.
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
            try bindAndListen(requested, backlog: backlog, unixMode: unixMode, operation: operation)
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
        try UVError.check(uv_listen(herald_as_stream(raw), backlog) { server, status in
            let owner = Unmanaged<LoopHandle>.fromOpaque(server!.pointee.data).takeUnretainedValue() as! StreamServer
            owner.acceptOne(status: status)
        }, operation)
        if case .tcp = address {
            var storage = sockaddr_storage()
            var length = Int32(MemoryLayout<sockaddr_storage>.size)
            let result = withUnsafeMutableBytes(of: &storage) {
                uv_tcp_getsockname(raw.assumingMemoryBound(to: uv_tcp_t.self), $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
            }
            try UVError.check(result, "read the address of \(address)")
            localAddress = SocketAddress.fromStorage(&storage) ?? address
        }
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
            onAcceptError?(UVError(code: status, operation: "accept on \(localAddress)"))
            return
        }
        let connection: StreamConnection
        do {
            connection = try StreamConnection(loop: loop, kind: kind)
        } catch {
            onAcceptError?(error as? UVError ?? UVError(code: Int32(UV_ENOMEM.rawValue), operation: "accept on \(localAddress)"))
            return
        }
        let result = uv_accept(herald_as_stream(raw), connection.stream)
        if result < 0 {
            connection.closeHandle()
            onAcceptError?(UVError(code: result, operation: "accept on \(localAddress)"))
            return
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
        callback?()
    }
}
