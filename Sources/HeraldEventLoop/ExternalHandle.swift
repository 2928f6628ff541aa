package import CLibUV

/// A libuv handle owned by code of this package outside the Herald module — a plugin that uses `CLibUV`
/// directly (`ExecFetchWorker` spawns processes with it) — under the same rules as Herald's own handles:
/// allocated here at a stable address, initialised and used on the loop thread, counted in
/// `statistics.liveHandles`, closed at loop shutdown with every other handle, and freed in its close callback
/// (after ``onClose`` has run).
///
/// The handle's `data` field holds its owner: do not overwrite it. From a libuv callback, find the owner with
/// ``owner(of:)`` and the plugin's own object in ``context``.
package final class ExternalHandle: LoopHandle, @unchecked Sendable {
    // @unchecked Sendable: every member is used on the loop thread only, where all of its state lives.

    /// The plugin's object for this handle, for its libuv callbacks. Released when the handle has closed.
    package var context: AnyObject?
    /// Runs once the handle is closed, from libuv's close callback, before its memory is freed.
    package var onClose: (() -> Void)?
    /// Runs when the loop shuts down while the handle is open. `nil` (the default) closes the handle; a handle
    /// that must finish something first (a child process being reaped) closes itself when it is done, and
    /// must then keep the loop alive (stay active) until it does.
    package var onShutdown: (() -> Void)?

    /// Allocates `byteCount` bytes for a handle and calls `initialize` with the loop and that memory; it returns
    /// libuv's answer (`uv_pipe_init`, `uv_timer_init`, ...). On failure the memory is freed and a ``UVError``
    /// naming `operation` is thrown, except with `initializedOnFailure`: `uv_spawn` initialises its handle even
    /// when it fails, and that handle is then closed (its close callback frees it) before the error is thrown.
    /// Throws ``EventLoopError/shutDown`` once the loop has begun shutting down. Call on the loop thread.
    package init(
        loop: EventLoop,
        byteCount: Int,
        operation: @autoclosure () -> String,
        initializedOnFailure: Bool = false,
        initialize: (UnsafeMutablePointer<uv_loop_t>, UnsafeMutableRawPointer) -> Int32
    ) throws {
        try loop.checkAcceptingHandles()
        super.init(loop: loop, byteCount: byteCount)
        let result = initialize(loop.uv, raw)
        if result < 0 {
            if initializedOnFailure {
                adopt()
                closeHandle()
            } else {
                abandon()
            }
            throw UVError(code: result, operation: operation())
        }
        adopt()
    }

    /// The handle's memory, for libuv calls.
    package var pointer: UnsafeMutableRawPointer { raw }

    /// Whether the handle is closing or closed.
    package var isClosed: Bool { isClosing }

    /// The owner of a handle made by this class, from inside one of its libuv callbacks.
    package static func owner(of handle: UnsafeMutableRawPointer) -> ExternalHandle {
        let data = herald_as_handle(handle).pointee.data!
        return Unmanaged<LoopHandle>.fromOpaque(data).takeUnretainedValue() as! ExternalHandle
    }

    /// Closes the handle; ``onClose`` runs from libuv's close callback. Idempotent. Call on the loop thread.
    package func close() {
        loop.preconditionInEventLoop()
        closeHandle()
    }

    override func didClose() {
        let callback = onClose
        onClose = nil
        onShutdown = nil
        callback?()
        context = nil
    }

    override func closeForShutdown() {
        if let onShutdown {
            onShutdown()
        } else {
            closeHandle()
        }
    }
}
