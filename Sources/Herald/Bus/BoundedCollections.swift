/// A set that remembers at most `capacity` elements, forgetting the oldest first (the de-duplication window).
struct BoundedSet<Element: Hashable> {
    private var table: BoundedTable<Element, Void>

    init(capacity: Int) { table = BoundedTable(capacity: capacity) }

    var capacity: Int { table.capacity }

    func contains(_ element: Element) -> Bool { table.value(for: element) != nil }

    /// ``contains(_:)`` with `element`'s `hashValue` computed by the caller, who passes the same to
    /// ``insert(_:hash:)`` next: a check-then-insert hashes the element once.
    func contains(_ element: Element, hash: Int) -> Bool { table.value(for: element, hash: hash) != nil }

    /// Forgets `element` (a message whose acceptance was rolled back). Its place in the insertion order stays
    /// taken until it is the oldest, so until then the set holds one fewer than `capacity` elements.
    mutating func remove(_ element: Element) {
        table.removeValue(for: element)
    }

    mutating func insert(_ element: Element) {
        table.insertIfAbsent(element, ())
    }

    /// ``insert(_:)`` with `element`'s `hashValue` computed by the caller.
    mutating func insert(_ element: Element, hash: Int) {
        table.insertIfAbsent(element, (), hash: hash)
    }

    var count: Int { table.count }
}

/// A dictionary that remembers at most `capacity` entries, forgetting the oldest insertion first.
struct BoundedDictionary<Key: Hashable, Value> {
    private var table: BoundedTable<Key, Value>

    init(capacity: Int) { table = BoundedTable(capacity: capacity) }

    subscript(key: Key) -> Value? {
        get { table.value(for: key) }
        set {
            if let newValue {
                table.set(key, newValue)
            } else {
                table.removeValue(for: key)
            }
        }
    }

    /// Sets the value of `key`, whose `hashValue` the caller computed before (for another table keyed alike).
    mutating func setValue(_ value: consuming Value, forKey key: Key, hash: Int) {
        table.set(key, value, hash: hash)
    }

    var count: Int { table.count }
}

/// The table behind ``BoundedSet`` and ``BoundedDictionary``: entries in a ring in insertion order (the oldest is
/// forgotten when a new one needs its place) and an open-addressing index into the ring that keeps each key's
/// hash. Every message passes through two of these (the de-duplication window, the presented notifications),
/// so a key is hashed once per operation and never again: forgetting the oldest finds and removes its index
/// slot by the stored hash, where a `Set` would hash every key its deletion moves.
///
/// Storage grows by doubling up to `capacity`, so a large window costs memory only once it fills.
struct BoundedTable<Key: Hashable, Value> {
    let capacity: Int
    /// The ring, in insertion order from `head`; a removed entry leaves `nil` behind until its place comes round.
    private var keys: [Key?] = []
    private var values: [Value?] = []
    private var hashes: [Int] = []
    private var head = 0
    private var used = 0
    /// Open addressing with linear probing: ring positions, -1 for an empty slot; at most half full.
    private var slots: [Int32] = []
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = max(0, min(capacity, Int(Int32.max) / 4))
    }

    func value(for key: Key) -> Value? {
        value(for: key, hash: key.hashValue)
    }

    /// ``value(for:)`` with `hash`, which must be `key.hashValue`.
    func value(for key: Key, hash: Int) -> Value? {
        guard count > 0, let slot = find(key, hash: hash) else { return nil }
        return values[Int(slots[slot])]
    }

    /// Inserts `key` with `value` unless it is present; `true` when it was inserted.
    @discardableResult
    mutating func insertIfAbsent(_ key: Key, _ value: Value) -> Bool {
        insertIfAbsent(key, value, hash: key.hashValue)
    }

    /// ``insertIfAbsent(_:_:)`` with `hash`, which must be `key.hashValue`.
    @discardableResult
    mutating func insertIfAbsent(_ key: Key, _ value: Value, hash: Int) -> Bool {
        if count > 0, find(key, hash: hash) != nil { return false }
        append(key, value, hash: hash)
        return true
    }

    /// Sets the value of `key`: in place when present (its age does not change), else as the newest entry.
    mutating func set(_ key: Key, _ value: Value) {
        set(key, value, hash: key.hashValue)
    }

    /// ``set(_:_:)`` with `hash`, which must be `key.hashValue`.
    mutating func set(_ key: Key, _ value: consuming Value, hash: Int) {
        if count > 0, let slot = find(key, hash: hash) {
            values[Int(slots[slot])] = value
        } else {
            append(key, value, hash: hash)
        }
    }

    mutating func removeValue(for key: Key) {
        guard count > 0, let slot = find(key, hash: key.hashValue) else { return }
        let position = Int(slots[slot])
        deleteSlot(slot)
        keys[position] = nil
        values[position] = nil
        count -= 1
    }

    private func find(_ key: Key, hash: Int) -> Int? {
        guard !slots.isEmpty else { return nil }
        let mask = slots.count - 1
        var slot = hash & mask
        while true {
            let position = Int(slots[slot])
            if position < 0 { return nil }
            if hashes[position] == hash, keys[position] == key { return slot }
            slot = (slot + 1) & mask
        }
    }

    /// `value` is taken, not borrowed: a message kept in `presented` is moved into its place, not copied.
    private mutating func append(_ key: Key, _ value: consuming Value, hash: Int) {
        // A capacity of 0 remembers nothing (a de-duplication window turned off).
        guard capacity > 0 else { return }
        if used == keys.count {
            if keys.count < capacity {
                grow()
            } else {
                forgetOldest()
            }
        }
        let position = (head + used) % keys.count
        keys[position] = key
        values[position] = value
        hashes[position] = hash
        used += 1
        count += 1
        let mask = slots.count - 1
        var slot = hash & mask
        while slots[slot] >= 0 { slot = (slot + 1) & mask }
        slots[slot] = Int32(position)
    }

    private mutating func forgetOldest() {
        let position = head
        if keys[position] != nil {
            // Its slot is on the probe path from its stored hash: no key comparison, no hashing.
            let mask = slots.count - 1
            var slot = hashes[position] & mask
            while Int(slots[slot]) != position { slot = (slot + 1) & mask }
            deleteSlot(slot)
            keys[position] = nil
            values[position] = nil
            count -= 1
        }
        head = (head + 1) % keys.count
        used -= 1
    }

    /// Empties `slot`, moving later entries of its probe run back so that every entry stays reachable.
    private mutating func deleteSlot(_ slot: Int) {
        let mask = slots.count - 1
        var hole = slot
        var next = slot
        while true {
            next = (next + 1) & mask
            let position = Int(slots[next])
            if position < 0 { break }
            let ideal = hashes[position] & mask
            // The entry at `next` may fill the hole unless its ideal slot lies cyclically in (hole, next].
            let staysPut = hole <= next ? (ideal > hole && ideal <= next) : (ideal > hole || ideal <= next)
            if !staysPut {
                slots[hole] = slots[next]
                hole = next
            }
        }
        slots[hole] = -1
    }

    /// Doubles the ring (up to `capacity`), puts it in order from position 0 and rebuilds the index from the
    /// stored hashes.
    private mutating func grow() {
        let newCount = min(capacity, max(16, keys.count * 2))
        var newKeys = [Key?](repeating: nil, count: newCount)
        var newValues = [Value?](repeating: nil, count: newCount)
        var newHashes = [Int](repeating: 0, count: newCount)
        for offset in 0..<used {
            let old = (head + offset) % keys.count
            newKeys[offset] = keys[old]
            newValues[offset] = values[old]
            newHashes[offset] = hashes[old]
        }
        keys = newKeys
        values = newValues
        hashes = newHashes
        head = 0
        var slotCount = 16
        while slotCount < newCount * 2 { slotCount *= 2 }
        slots = [Int32](repeating: -1, count: slotCount)
        let mask = slotCount - 1
        for position in 0..<used where keys[position] != nil {
            var slot = hashes[position] & mask
            while slots[slot] >= 0 { slot = (slot + 1) & mask }
            slots[slot] = Int32(position)
        }
    }
}

/// Runs async operations one at a time, in the order they arrive (a FIFO async lock).
final class SerialGate: Sendable {
    private let state = Locked<(busy: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    /// How many calls of ``run(_:)`` wait for the one running.
    var waitingCount: Int { state.withLock { $0.waiting.count } }

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
