import Herald

/// Runs async bodies one after another.
final class SerialTasks: Sendable {
    private let tail = Locked<Task<Void, Never>?>(nil)

    func run(_ body: @escaping @Sendable () async throws -> Void) async throws {
        let result = Locked<Result<Void, any Error>>(.success(()))
        await start {
            do { try await body() } catch { result.withLock { $0 = .failure(error) } }
        }.value
        try result.withLock { $0 }.get()
    }

    /// Queues `body` after the bodies queued so far, at once (``wait()`` called after this waits for it too).
    @discardableResult
    func start(_ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        tail.withLock { tail in
            let previous = tail
            let task = Task {
                await previous?.value
                await body()
            }
            tail = task
            return task
        }
    }

    func wait() async {
        await tail.withLock { $0 }?.value
    }
}

/// Polls `condition` on the loop thread until it holds, for up to two seconds.
func eventuallyOnLoop(_ loop: EventLoop, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
    for _ in 0..<1000 {
        guard let done = try? await loop.submit(condition) else { return true }
        if done { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return false
}

extension Duration {
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
