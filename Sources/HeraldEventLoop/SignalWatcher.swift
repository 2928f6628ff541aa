import CLibUV

/// Watches a POSIX signal (`SIGTERM`, `SIGINT`, `SIGHUP`, ...) on an ``EventLoop`` with libuv's `uv_signal_t`:
/// the handler runs on the loop thread, never in signal context. Use it on the loop thread; close it with
/// ``close()`` (loop shutdown closes it too).
public final class SignalWatcher: LoopHandle, @unchecked Sendable {
    // @unchecked Sendable: every member checks that it is used on the loop thread, where its state lives.

    /// The signal watched.
    public let signal: Int32
    private let handler: (Int32) -> Void

    /// Starts watching `signal`; `handler` runs on the loop thread each time it arrives. Call on the loop thread.
    public static func watch(_ signal: Int32, on loop: EventLoop, handler: @escaping (Int32) -> Void) throws -> SignalWatcher {
        try loop.checkAcceptingHandles()
        return try SignalWatcher(loop: loop, signal: signal, handler: handler)
    }

    private init(loop: EventLoop, signal: Int32, handler: @escaping (Int32) -> Void) throws {
        self.signal = signal
        self.handler = handler
        super.init(loop: loop, byteCount: MemoryLayout<uv_signal_t>.size)
        let result = uv_signal_init(loop.uv, raw.assumingMemoryBound(to: uv_signal_t.self))
        if result < 0 {
            abandon()
            throw UVError(code: result, operation: "watch signal \(signal)")
        }
        adopt()
        let started = uv_signal_start(
            raw.assumingMemoryBound(to: uv_signal_t.self),
            { handle, signal in
                let owner = Unmanaged<LoopHandle>.fromOpaque(handle!.pointee.data).takeUnretainedValue() as! SignalWatcher
                owner.handler(signal)
            }, signal)
        if started < 0 {
            closeHandle()
            throw UVError(code: started, operation: "watch signal \(signal)")
        }
    }

    /// Stops watching. Idempotent.
    public func close() {
        loop.preconditionInEventLoop()
        closeHandle()
    }
}
