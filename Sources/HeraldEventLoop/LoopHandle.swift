import CLibUV

/// The owner of one libuv handle. The handle lives at a stable address allocated here; its `data` holds a
/// retained reference to the owner, released in the close callback, where the memory is freed too.
/// Every handle of a loop is closed at shutdown through `closeForShutdown()`.
///
/// The common base of ``StreamServer``, ``StreamConnection`` and ``SignalWatcher``; it has no public members.
public class LoopHandle {
    let loop: EventLoop
    let raw: UnsafeMutableRawPointer
    private(set) var isClosing = false

    var handle: UnsafeMutablePointer<uv_handle_t> { herald_as_handle(raw) }

    /// Allocates `byteCount` bytes for a handle; the subclass initialises it and then calls ``adopt()``.
    init(loop: EventLoop, byteCount: Int) {
        self.loop = loop
        self.raw = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: 16)
    }

    /// Called once libuv has initialised the handle: from now on the handle owns a reference to `self`.
    final func adopt() {
        handle.pointee.data = Unmanaged.passRetained(self).toOpaque()
        loop.handleOpened()
    }

    /// Frees the memory of a handle that libuv failed to initialise.
    final func abandon() {
        raw.deallocate()
    }

    /// Closes the handle; ``didClose()`` runs from libuv's close callback. Idempotent.
    final func closeHandle() {
        guard !isClosing else { return }
        isClosing = true
        uv_close(handle) { handle in
            let owner = Unmanaged<LoopHandle>.fromOpaque(handle!.pointee.data).takeRetainedValue()
            owner.handle.pointee.data = nil
            owner.loop.handleClosed()
            owner.didClose()
            owner.raw.deallocate()
        }
    }

    /// Runs once the handle is closed, before its memory is freed. Subclasses tell their users here.
    func didClose() {}

    /// The loop is shutting down; close the way a user's `close()` would.
    func closeForShutdown() { closeHandle() }
}
