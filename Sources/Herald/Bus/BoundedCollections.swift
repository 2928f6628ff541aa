/// A set that remembers at most `capacity` elements, forgetting the oldest first (the de-duplication window).
struct BoundedSet<Element: Hashable> {
    private var members: Set<Element> = []
    private var order: [Element] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func contains(_ element: Element) -> Bool { members.contains(element) }

    /// Forgets `element` (a message whose acceptance was rolled back); its slot in the order is reused lazily.
    mutating func remove(_ element: Element) {
        members.remove(element)
    }

    mutating func insert(_ element: Element) {
        guard members.insert(element).inserted else { return }
        order.append(element)
        // Slots of removed elements are skipped: only members count against the capacity.
        while members.count > capacity, head < order.count {
            members.remove(order[head])
            head += 1
        }
        if head >= capacity {
            order.removeFirst(head)
            head = 0
        }
    }

    var count: Int { members.count }
}

/// A dictionary that remembers at most `capacity` entries, forgetting the oldest insertion first.
struct BoundedDictionary<Key: Hashable, Value> {
    private var storage: [Key: Value] = [:]
    private var order: [Key] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    subscript(key: Key) -> Value? {
        get { storage[key] }
        set {
            guard let newValue else {
                storage[key] = nil
                return
            }
            if storage.updateValue(newValue, forKey: key) == nil {
                order.append(key)
                while storage.count > capacity, head < order.count {
                    storage[order[head]] = nil
                    head += 1
                }
                if head >= capacity {
                    order.removeFirst(head)
                    head = 0
                }
            }
        }
    }

    var count: Int { storage.count }
}

/// Runs async operations one at a time, in the order they arrive (a FIFO async lock).
final class SerialGate: Sendable {
    private let state = Locked<(busy: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state in
                if state.busy {
                    state.waiting.append(continuation)
                    return false
                }
                state.busy = true
                return true
            }
            if acquired { continuation.resume() }
        }
        defer {
            let next = state.withLock { state in
                if state.waiting.isEmpty {
                    state.busy = false
                    return nil as CheckedContinuation<Void, Never>?
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}
