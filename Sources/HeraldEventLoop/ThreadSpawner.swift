import CLibUV
import Glibc

/// Starts a named pthread running `body`; join or detach it once.
package struct SpawnedThread: @unchecked Sendable {
    // @unchecked Sendable: a pthread_t is an opaque identifier; pthread_join may be called from any thread.
    let id: pthread_t

    private final class Box {
        let name: String
        let body: () -> Void
        init(name: String, body: @escaping () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts a thread named `name` (cut to the kernel's 15 bytes) that runs `body`.
    package static func spawn(name: String, _ body: @escaping @Sendable () -> Void) throws(EventLoopError) -> SpawnedThread {
        let box = Unmanaged.passRetained(Box(name: name, body: body)).toOpaque()
        var id = pthread_t()
        let result = pthread_create(
            &id, nil,
            { argument in
                let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
                _ = herald_set_thread_name(box.name)
                box.body()
                return nil
            }, box)
        guard result == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            throw .threadCreationFailed(errno: result)
        }
        return SpawnedThread(id: id)
    }

    /// Waits for the thread to finish.
    package func join() {
        pthread_join(id, nil)
    }

    /// Lets the thread end on its own; it must not be joined afterwards.
    func detach() {
        pthread_detach(id)
    }
}
