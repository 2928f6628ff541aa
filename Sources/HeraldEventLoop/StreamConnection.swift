import CLibUV

/// A connected TCP or Unix domain stream on an ``EventLoop``: reads with pause and resume, writes with
/// completion, half-close and close.
///
/// Every method and property must be used on the loop thread (checked). A connection stays alive while it
/// is open, even with no reference held by the user; it is freed after ``close()`` (or the peer's reset,
/// or loop shutdown) once libuv's close callback has run ``onClose``.
public final class StreamConnection: LoopHandle, @unchecked Sendable {
    // @unchecked Sendable: a reference may be handed to any thread, but every member checks that it is
    // used on the loop thread, where all of its state lives.

    /// Bytes read from the peer; the buffer is only valid during the call. Set before ``startReading()``.
    public var onRead: ((UnsafeRawBufferPointer) -> Void)?
    /// The peer has closed its writing side (end of file). Writing is still possible until ``close()``.
    public var onEnd: (() -> Void)?
    /// The connection is closed. The error says why when it was not closed by ``close()`` or shutdown.
    public var onClose: ((UVError?) -> Void)?

    /// Who is at the other end, for error messages and logs: `127.0.0.1:40122` or `unix:/run/herald.sock`.
    public internal(set) var label: String
    private var closeError: UVError?
    private var reading = false
    /// The half-close under way, until libuv has done it.
    private var pendingShutdown: ShutdownRequest?
    /// TLS (or another filter) between the socket and the user; `nil` for a plain connection. Read on every read and
    /// flush: unchecked for exclusivity (loop thread only, set once before reading), so a plain connection pays a
    /// test of the optional and no runtime access check.
    @exclusivity(unchecked) package private(set) var filter: (any StreamFilter)?

    enum Kind { case tcp, unix }

    init(loop: EventLoop, kind: Kind) throws {
        label = kind == .tcp ? "TCP peer" : "Unix socket peer"
        switch kind {
        case .tcp:
            super.init(loop: loop, byteCount: herald_uv_tcp_size())
            let result = uv_tcp_init(loop.uv, raw.assumingMemoryBound(to: uv_tcp_t.self))
            if result < 0 {
                abandon()
                throw UVError(code: result, operation: "create a TCP handle")
            }
        case .unix:
            super.init(loop: loop, byteCount: herald_uv_pipe_size())
            let result = uv_pipe_init(loop.uv, raw.assumingMemoryBound(to: uv_pipe_t.self), 0)
            if result < 0 {
                abandon()
                throw UVError(code: result, operation: "create a Unix socket handle")
            }
        }
        adopt()
    }

    var stream: UnsafeMutablePointer<uv_stream_t> { herald_as_stream(raw) }

    /// Whether the connection is open (not closed or closing).
    public var isOpen: Bool {
        loop.preconditionInEventLoop()
        return !isClosing
    }

    /// Bytes queued for writing that the kernel has not taken yet: the measure for write backpressure.
    public var writeQueueSize: Int {
        loop.preconditionInEventLoop()
        return isClosing ? 0 : uv_stream_get_write_queue_size(stream) + gathered.count
    }

    /// Bytes written that the peer has not taken yet: those queued here (``writeQueueSize``) and those in the kernel's
    /// send queue (for TCP, not yet acknowledged by the peer; for a Unix socket, not yet read by it, as the kernel
    /// counts them). It goes down while the peer reads, also while the queue here stays as it is: the kernel asks for
    /// more only once most of its queue has been read.
    package var untakenBytes: Int {
        loop.preconditionInEventLoop()
        guard !isClosing else { return 0 }
        let fd = fileDescriptor
        return writeQueueSize + (fd >= 0 ? max(0, Int(herald_socket_untaken(fd))) : 0)
    }

    /// The socket's file descriptor (for tests and diagnostics; do not read or write it behind libuv's back).
    var fileDescriptor: Int32 {
        loop.preconditionInEventLoop()
        var fd = uv_os_fd_t()
        return uv_fileno(handle, &fd) == 0 ? fd : -1
    }

    /// The peer's address, asked of the kernel (TCP only).
    public var peerAddress: SocketAddress? {
        loop.preconditionInEventLoop()
        guard !isClosing, handle.pointee.type == UV_TCP else { return nil }
        var storage = sockaddr_storage()
        var length = Int32(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutableBytes(of: &storage) {
            uv_tcp_getpeername(raw.assumingMemoryBound(to: uv_tcp_t.self), $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
        }
        return result == 0 ? SocketAddress.fromStorage(&storage) : nil
    }

    /// The application protocol agreed with the peer during the TLS handshake (ALPN: `h2`, `http/1.1`), once the
    /// handshake is done; `nil` for a plain connection or when none was agreed.
    public var applicationProtocol: String? {
        loop.preconditionInEventLoop()
        return filter?.applicationProtocol
    }

    // MARK: Filters

    /// Puts `filter` between the socket and the user. Once, before reading starts.
    package func install(_ filter: any StreamFilter) {
        loop.preconditionInEventLoop()
        precondition(self.filter == nil && !reading, "a filter is installed once, before the connection reads")
        self.filter = filter
    }

    /// The loop the connection is on (for a filter's timers).
    package var eventLoop: EventLoop { loop }

    /// A filter hands decoded bytes to the user.
    package func deliver(_ bytes: UnsafeRawBufferPointer) {
        onRead?(bytes)
    }

    /// A filter tells the user that the peer's stream ended: reading stops, as at end of file.
    package func deliverEnd() {
        if reading {
            reading = false
            uv_read_stop(stream)
        }
        onEnd?()
    }

    /// A filter sends encoded bytes now, behind the bytes already handed to the kernel or queued.
    package func send(_ bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?) {
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection"))
            return
        }
        guard bytes.count > 0 else {
            completion?(nil)
            return
        }
        writeNow(bytes, completion: completion)
    }

    // MARK: Connecting

    /// Connects to `address` on `loop` and calls `completion` on the loop thread with the open connection or
    /// the error (`ECONNREFUSED`, `ENOENT` for a missing socket path, ...). Call on the loop thread.
    public static func connect(
        to address: SocketAddress,
        on loop: EventLoop,
        completion: @escaping (Result<StreamConnection, any Error>) -> Void
    ) {
        loop.preconditionInEventLoop()
        do {
            try loop.checkAcceptingHandles()
            let connection: StreamConnection
            let request = ConnectRequest(completion: completion)
            switch address {
            case .tcp:
                // Check the address before a handle exists, so a bad one leaves nothing open.
                _ = try address.withSockAddr { _ in }
                connection = try StreamConnection(loop: loop, kind: .tcp)
                request.connection = connection
                let result = try address.withSockAddr { sockaddr in
                    uv_tcp_connect(request.request, connection.raw.assumingMemoryBound(to: uv_tcp_t.self), sockaddr) { request, status in
                        ConnectRequest.finish(request!, status: status)
                    }
                }
                if result < 0 {
                    connection.closeHandle()
                    throw UVError(code: result, operation: "connect to \(address)")
                }
            case .unix(let path):
                try SocketAddress.checkUnixPath(path, operation: "connect to \(address)")
                connection = try StreamConnection(loop: loop, kind: .unix)
                request.connection = connection
                uv_pipe_connect(request.request, connection.raw.assumingMemoryBound(to: uv_pipe_t.self), path) { request, status in
                    ConnectRequest.finish(request!, status: status)
                }
            }
            connection.label = "\(address)"
            request.address = address
            request.retainForLibuv()
        } catch {
            completion(.failure(error))
        }
    }

    /// Connects to `address` on `loop`. Callable from any context.
    public static func connect(to address: SocketAddress, on loop: EventLoop) async throws -> StreamConnection {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<StreamConnection, any Error>) in
            let accepted = loop.enqueue(
                .closure {
                    connect(to: address, on: loop) { continuation.resume(with: $0) }
                })
            if !accepted { continuation.resume(throwing: EventLoopError.shutDown) }
        }
    }

    private final class ConnectRequest {
        let request = UnsafeMutablePointer<uv_connect_t>.allocate(capacity: 1)
        let completion: (Result<StreamConnection, any Error>) -> Void
        var connection: StreamConnection?
        var address: SocketAddress?

        init(completion: @escaping (Result<StreamConnection, any Error>) -> Void) {
            self.completion = completion
        }

        deinit { request.deallocate() }

        func retainForLibuv() {
            request.pointee.data = Unmanaged.passRetained(self).toOpaque()
        }

        static func finish(_ request: UnsafeMutablePointer<uv_connect_t>, status: Int32) {
            let owner = Unmanaged<ConnectRequest>.fromOpaque(request.pointee.data).takeRetainedValue()
            let connection = owner.connection!
            if status < 0 {
                connection.closeHandle()
                owner.completion(.failure(UVError(code: status, operation: "connect to \(owner.address.map { "\($0)" } ?? "peer")")))
            } else {
                if connection.handle.pointee.type == UV_TCP {
                    uv_tcp_nodelay(connection.raw.assumingMemoryBound(to: uv_tcp_t.self), 1)
                }
                owner.completion(.success(connection))
            }
        }
    }

    // MARK: Reading

    /// Starts delivering bytes to ``onRead`` (and the end of the stream to ``onEnd``).
    public func startReading() {
        loop.preconditionInEventLoop()
        guard !isClosing, !reading else { return }
        reading = true
        let result = uv_read_start(
            stream,
            { handle, _, buffer in
                let loop = EventLoop.from(handle!.pointee.loop)
                buffer!.pointee = uv_buf_t(
                    base: loop.readBuffer.baseAddress!.assumingMemoryBound(to: CChar.self), len: loop.readBuffer.count)
            },
            { stream, count, buffer in
                let connection = Unmanaged<LoopHandle>.fromOpaque(stream!.pointee.data).takeUnretainedValue() as! StreamConnection
                connection.didRead(count: count, buffer: buffer!)
            })
        if result < 0 { fail(UVError(code: result, operation: "start reading")) }
    }

    /// Stops reading: the kernel's buffer fills and the peer is slowed down (backpressure). Idempotent.
    public func pauseReading() {
        loop.preconditionInEventLoop()
        guard !isClosing, reading else { return }
        reading = false
        uv_read_stop(stream)
    }

    /// Starts reading again after ``pauseReading()``.
    public func resumeReading() {
        guard let filter else {
            startReading()
            return
        }
        loop.preconditionInEventLoop()
        let wasReading = reading
        startReading()
        if !wasReading, reading { filter.readingResumed() }
    }

    /// Whether bytes are being delivered (``startReading()`` called and not paused).
    public var isReading: Bool {
        loop.preconditionInEventLoop()
        return reading
    }

    private func didRead(count: Int, buffer: UnsafePointer<uv_buf_t>) {
        if count > 0 {
            if let filter {
                filter.received(UnsafeRawBufferPointer(start: buffer.pointee.base, count: count))
            } else {
                onRead?(UnsafeRawBufferPointer(start: buffer.pointee.base, count: count))
            }
        } else if count == Int(UV_EOF.rawValue) {
            uv_read_stop(stream)
            if let filter {
                // Still reading while the filter decrypts what is left and delivers the end: it delivers only to a
                // reading user, and a TLS stream ended without close_notify would otherwise never be ended.
                filter.receivedEnd()
                reading = false
            } else {
                reading = false
                onEnd?()
            }
        } else if count < 0 {
            fail(UVError(code: Int32(count), operation: "read from \(label)"))
        }
    }

    // MARK: Writing

    /// Writes `bytes` after the bytes already queued, then calls `completion` (on the loop thread) with `nil`
    /// or the error (`EPIPE`, `ECONNRESET`, `ECANCELED` when the connection closed first). A failed write
    /// closes the connection, and ``onClose`` gets the error.
    ///
    /// Writes made during one turn of the loop are gathered and handed to the kernel together just before
    /// the loop next polls for I/O (or when the connection half-closes or closes), so the answers to a burst
    /// of pipelined requests cost one `write` system call, not one each. The bytes are copied.
    public func write(_ bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)? = nil) {
        guard startWrite(byteCount: bytes.count, completion: completion) else { return }
        gathered.append(contentsOf: bytes)
        noteGathered(completion: completion)
    }

    /// Writes `bytes`; see ``write(_:completion:)-(UnsafeRawBufferPointer,_)``.
    public func write(_ bytes: some Collection<UInt8>, completion: ((UVError?) -> Void)? = nil) {
        guard startWrite(byteCount: bytes.count, completion: completion) else { return }
        // Made an array first (no copy for an array), so that the collection's iteration, which may be any code, runs
        // outside the access to `gathered`.
        let bytes = Array(bytes)
        gathered.append(contentsOf: bytes)
        noteGathered(completion: completion)
    }

    /// Writes the bytes `body` appends (for answers built in place, with no buffer of their own).
    public func write(completion: ((UVError?) -> Void)? = nil, appending body: (inout [UInt8]) -> Void) {
        loop.preconditionInEventLoop()
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection"))
            return
        }
        // `body` appends to the gathered bytes moved out of the property, so that no access to it spans the call (the
        // compiler can then leave out the run-time exclusivity checks), and a write from inside `body` is no
        // overlapping access: its bytes, gathered meanwhile, follow the body's.
        var bytes: [UInt8] = []
        swap(&bytes, &gathered)
        let before = bytes.count
        body(&bytes)
        let grew = bytes.count > before
        if !gathered.isEmpty { bytes.append(contentsOf: gathered) }
        swap(&bytes, &gathered)
        guard grew else {
            completion?(nil)
            return
        }
        noteGathered(completion: completion)
    }

    /// Checks a write can go ahead; `false` when it is already finished (closed connection, nothing to write).
    private func startWrite(byteCount: Int, completion: ((UVError?) -> Void)?) -> Bool {
        loop.preconditionInEventLoop()
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection"))
            return false
        }
        guard byteCount > 0 else {
            completion?(nil)
            return false
        }
        return true
    }

    private func noteGathered(completion: ((UVError?) -> Void)?) {
        if let completion { gatheredCompletions.append(completion) }
        guard !flushRequested else { return }
        flushRequested = true
        // While the loop is closing no flush before polling comes: write at once.
        if !loop.writeBeforePolling(self) { flushGatheredWrites() }
    }

    /// Bytes written since the last flush, and the completions waiting for them. Loop thread only; no access to either
    /// spans a call out (a write's body appends to the bytes moved out first, a completion runs after the access), so
    /// the run-time exclusivity checks, several a request, are left out.
    @exclusivity(unchecked) private var gathered: [UInt8] = []
    @exclusivity(unchecked) private var gatheredCompletions: [(UVError?) -> Void] = []
    private var flushRequested = false
    /// Capacity kept between flushes; a larger buffer (after a burst of big answers) is given back.
    private static let keptGatherCapacity = 64 * 1024

    /// Hands the gathered bytes to the kernel (and to libuv's write queue for what the kernel cannot take now).
    func flushGatheredWrites() {
        flushRequested = false
        guard !gathered.isEmpty else { return }
        var bytes: [UInt8] = []
        swap(&bytes, &gathered)
        let completions = gatheredCompletions
        gatheredCompletions.removeAll(keepingCapacity: true)
        let completion: ((UVError?) -> Void)?
        switch completions.count {
        case 0: completion = nil
        case 1: completion = completions[0]
        default: completion = { error in for each in completions { each(error) } }
        }
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection"))
            return
        }
        if let filter {
            bytes.withUnsafeBytes { filter.write($0, completion: completion) }
        } else {
            bytes.withUnsafeBytes { writeNow($0, completion: completion) }
        }
        // Keep the buffer for the next turn unless a write came in meanwhile (a completion wrote again).
        if gathered.isEmpty, bytes.capacity <= Self.keptGatherCapacity {
            bytes.removeAll(keepingCapacity: true)
            gathered = bytes
        }
    }

    private func writeNow(_ bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?) {
        var offset = 0
        if uv_stream_get_write_queue_size(stream) == 0 {
            var buffer = uv_buf_t(
                base: UnsafeMutablePointer(mutating: bytes.baseAddress!.assumingMemoryBound(to: CChar.self)), len: bytes.count)
            let written = uv_try_write(stream, &buffer, 1)
            if written == Int32(bytes.count) {
                completion?(nil)
                return
            }
            if written < 0, written != Int32(UV_EAGAIN.rawValue) {
                let error = UVError(code: written, operation: "write to \(label)")
                completion?(error)
                fail(error)
                return
            }
            offset = max(0, Int(written))
        }
        WriteRequest.start(on: self, copying: UnsafeRawBufferPointer(rebasing: bytes[offset...]), completion: completion)
    }

    private final class WriteRequest {
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        let storage: UnsafeMutableRawBufferPointer
        let completion: ((UVError?) -> Void)?
        let connection: StreamConnection

        init(connection: StreamConnection, bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?) {
            self.connection = connection
            self.storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
            self.storage.copyMemory(from: bytes)
            self.completion = completion
        }

        deinit {
            storage.deallocate()
            request.deallocate()
        }

        static func start(on connection: StreamConnection, copying bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?) {
            let owner = WriteRequest(connection: connection, bytes: bytes, completion: completion)
            owner.request.pointee.data = Unmanaged.passRetained(owner).toOpaque()
            var buffer = uv_buf_t(base: owner.storage.baseAddress!.assumingMemoryBound(to: CChar.self), len: owner.storage.count)
            let result = uv_write(owner.request, connection.stream, &buffer, 1) { request, status in
                let owner = Unmanaged<WriteRequest>.fromOpaque(request!.pointee.data).takeRetainedValue()
                guard status < 0 else {
                    owner.completion?(nil)
                    return
                }
                let error = UVError(code: status, operation: "write to \(owner.connection.label)")
                owner.completion?(error)
                // A failed write means the connection is broken; ECANCELED means it is already closing.
                if status != Int32(UV_ECANCELED.rawValue) { owner.connection.fail(error) }
            }
            if result < 0 {
                Unmanaged<WriteRequest>.fromOpaque(owner.request.pointee.data).release()
                let error = UVError(code: result, operation: "write to \(connection.label)")
                completion?(error)
                connection.fail(error)
            }
        }
    }

    // MARK: Closing

    /// Half-closes: sends end-of-file to the peer once queued writes are flushed; reading goes on.
    /// `completion` runs on the loop thread with `nil` or the error.
    public func shutdownWriting(completion: ((UVError?) -> Void)? = nil) {
        loop.preconditionInEventLoop()
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ENOTCONN.rawValue), operation: "half-close a closed connection"))
            return
        }
        flushGatheredWrites()  // uv_shutdown waits for queued writes, not for gathered ones
        filter?.finishWriting()
        guard !isClosing else {
            completion?(UVError(code: Int32(UV_ENOTCONN.rawValue), operation: "half-close a closed connection"))
            return
        }
        // A half-close under way: this call's completion waits for it too (libuv would refuse a second one at once,
        // and a caller closing on that error would cut off the writes the first one waits for).
        if let pending = pendingShutdown {
            if let completion { pending.completions.append(completion) }
            return
        }
        let request = ShutdownRequest(connection: self, completion: completion)
        request.request.pointee.data = Unmanaged.passRetained(request).toOpaque()
        let result = uv_shutdown(request.request, stream) { request, status in
            let owner = Unmanaged<ShutdownRequest>.fromOpaque(request!.pointee.data).takeRetainedValue()
            owner.connection.pendingShutdown = nil
            let error = status < 0 ? UVError(code: status, operation: "half-close \(owner.connection.label)") : nil
            for completion in owner.completions { completion(error) }
        }
        if result < 0 {
            Unmanaged<ShutdownRequest>.fromOpaque(request.request.pointee.data).release()
            completion?(UVError(code: result, operation: "half-close \(label)"))
        } else {
            pendingShutdown = request
        }
    }

    private final class ShutdownRequest {
        let request = UnsafeMutablePointer<uv_shutdown_t>.allocate(capacity: 1)
        var completions: [(UVError?) -> Void]
        let connection: StreamConnection
        init(connection: StreamConnection, completion: ((UVError?) -> Void)?) {
            self.connection = connection
            self.completions = completion.map { [$0] } ?? []
        }
        deinit { request.deallocate() }
    }

    /// Closes the connection: queued writes complete with `ECANCELED`, then ``onClose`` runs with `nil`. Idempotent.
    public func close() {
        loop.preconditionInEventLoop()
        // What was written before close() goes out if the kernel takes it now, as if written at once.
        flushGatheredWrites()
        closeHandle()
    }

    override func closeForShutdown() {
        flushGatheredWrites()
        closeHandle()
    }

    fileprivate func fail(_ error: UVError) {
        guard !isClosing else { return }
        closeError = error
        closeHandle()
    }

    override func didClose() {
        if !gatheredCompletions.isEmpty {
            // Closed by a failure before the gathered bytes were flushed.
            let completions = gatheredCompletions
            gatheredCompletions = []
            let error = UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection")
            for completion in completions { completion(error) }
        }
        gathered = []
        filter?.closed()
        filter = nil
        let callback = onClose
        let error = closeError
        onRead = nil
        onEnd = nil
        onClose = nil
        callback?(error)
    }
}
