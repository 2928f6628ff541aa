import Herald

/// A gate that tasks wait at until it opens (once, for good): for tests that hold a handler or a sink in the middle
/// of its work, look at the instance meanwhile, then let it go on.
public final class Gate: Sendable {
    private let state = Locked<(isOpen: Bool, arrived: Int, waiting: [CheckedContinuation<Void, Never>])>((false, 0, []))

    public init() {}

    /// How many waits have begun (those still waiting and those let through).
    public var arrived: Int { state.withLock { $0.arrived } }

    /// Returns once the gate is open (at once when it already is).
    public func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let isOpen = state.withLock { state in
                state.arrived += 1
                if !state.isOpen { state.waiting.append(continuation) }
                return state.isOpen
            }
            if isOpen { continuation.resume() }
        }
    }

    /// Opens the gate: every waiter goes on, and later waits return at once.
    public func open() {
        let waiting = state.withLock { state in
            state.isOpen = true
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}
