import Herald

/// At most `limit` holders at once; the others wait their turn in arrival order. A waiter whose task is cancelled
/// (or that is waiting when the limit is closed) stops waiting and gets `false`. Callable from any thread.
final class ConcurrencyLimit: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct State {
        var limit: Int
        /// Places free: the limit less the holders (below zero while a lowered limit has more holders than places).
        var available: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        var closed = false
        var holders = 0
        var mostHolders = 0
    }

    private let state: Locked<State>

    init(limit: Int) {
        state = Locked(State(limit: limit, available: limit))
    }

    /// Waits for a free place; `true` once the caller holds one (give it back with ``release()``), `false` when the
    /// task was cancelled or the limit was closed while waiting. `waiting` is called when the caller has to wait.
    func acquire(waiting: () -> Void = {}) async -> Bool {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let answer: Bool? = state.withLock { state in
                    // Checked under the lock: a cancellation handler that ran before this finds no waiter to remove.
                    if state.closed || Task.isCancelled { return false }
                    if state.available > 0, state.waiters.isEmpty {
                        state.available -= 1
                        state.holders += 1
                        state.mostHolders = max(state.mostHolders, state.holders)
                        return true
                    }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let answer {
                    continuation.resume(returning: answer)
                } else {
                    waiting()
                }
            }
        } onCancel: {
            let waiter: Waiter? = state.withLock { state in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(returning: false)
        }
    }

    /// Gives a place back: the longest waiter gets it, unless the limit was lowered below the holders meanwhile.
    func release() {
        let next: Waiter? = state.withLock { state in
            state.available += 1
            state.holders -= 1
            return Self.admitOne(&state)
        }
        next?.continuation.resume(returning: true)
    }

    /// Changes the limit: raised, the longest waiters get the new places at once; lowered, the holders keep their
    /// places and nobody new gets one until fewer than `limit` hold one.
    func setLimit(_ limit: Int) {
        let admitted: [Waiter] = state.withLock { state in
            state.available += limit - state.limit
            state.limit = limit
            var admitted: [Waiter] = []
            while let next = Self.admitOne(&state) { admitted.append(next) }
            return admitted
        }
        for waiter in admitted { waiter.continuation.resume(returning: true) }
    }

    /// The longest waiter, given a free place, if there are both.
    private static func admitOne(_ state: inout State) -> Waiter? {
        guard state.available > 0, !state.waiters.isEmpty else { return nil }
        state.available -= 1
        state.holders += 1
        state.mostHolders = max(state.mostHolders, state.holders)
        return state.waiters.removeFirst()
    }

    /// Wakes every waiter with `false`, and answers `false` to new callers until ``reopen()``.
    func close() {
        let waiters: [Waiter] = state.withLock { state in
            state.closed = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.continuation.resume(returning: false) }
    }

    /// Takes callers again after ``close()``.
    func reopen() {
        state.withLock { $0.closed = false }
    }

    /// How many hold a place now, and the most that ever did at once.
    var holders: (now: Int, most: Int) {
        state.withLock { ($0.holders, $0.mostHolders) }
    }
}
