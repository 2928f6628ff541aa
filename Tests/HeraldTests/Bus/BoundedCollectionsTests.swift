import HeraldTesting
import Testing

@testable import Herald

/// A plain model of the bounded table: the ring of insertions as an array (removed entries stay as `nil` until they
/// are the oldest), checked by linear search.
private struct ModelTable {
    let capacity: Int
    var ring: [(key: Int, value: Int)?] = []

    func value(for key: Int) -> Int? { ring.lazy.compactMap { $0 }.first { $0.key == key }?.value }

    mutating func set(_ key: Int, _ value: Int) {
        if let index = ring.firstIndex(where: { $0?.key == key }) {
            ring[index]!.value = value
            return
        }
        guard capacity > 0 else { return }
        if ring.count == capacity { ring.removeFirst() }
        ring.append((key, value))
    }

    mutating func remove(_ key: Int) {
        if let index = ring.firstIndex(where: { $0?.key == key }) { ring[index] = nil }
    }

    var count: Int { ring.lazy.compactMap { $0 }.count }
}

/// Keys that all hash alike modulo small powers of two, so that probe runs are long and deletions move entries.
private struct CollidingKey: Hashable {
    let value: Int
    func hash(into hasher: inout Hasher) { hasher.combine(value % 3) }
}

@Suite("Bounded set and dictionary (the de-duplication window and presented notifications)")
struct BoundedCollectionsTests {
    @Test("random inserts, updates and removals agree with a plain model at every step", arguments: [0, 1, 2, 7, 16, 100])
    func agreesWithModel(capacity: Int) {
        var random = SplitMix64(seed: UInt64(capacity) &* 7919)
        var table = BoundedDictionary<Int, Int>(capacity: capacity)
        var model = ModelTable(capacity: capacity)
        let keySpace = UInt64(capacity * 3 + 2)
        for step in 0..<20_000 {
            let key = Int(random.next(below: keySpace))
            switch random.next(below: 10) {
            case 0..<6:
                table[key] = step
                model.set(key, step)
            case 6..<8:
                table[key] = nil
                model.remove(key)
            default:
                break
            }
            let probe = Int(random.next(below: keySpace))
            guard table[probe] == model.value(for: probe), table.count == model.count else {
                Issue.record(
                    "step \(step): key \(probe) is \(String(describing: table[probe])), model says \(String(describing: model.value(for: probe))); count \(table.count) vs \(model.count)"
                )
                return
            }
        }
        #expect(table.count <= capacity)
    }

    @Test("the window forgets the oldest first and never holds more than its capacity")
    func forgetsOldestFirst() {
        var window = BoundedSet<String>(capacity: 1_000)
        for number in 0..<5_000 { window.insert("message-\(number)") }
        #expect(window.count == 1_000)
        #expect(!window.contains("message-3999"))
        #expect((4_000..<5_000).allSatisfy { window.contains("message-\($0)") })
        // Inserting what is there changes nothing (its age included).
        window.insert("message-4000")
        window.insert("message-5000")
        #expect(!window.contains("message-4000"))
        #expect(window.contains("message-4001") && window.contains("message-5000"))
    }

    @Test("keys whose hashes collide stay reachable through evictions and removals")
    func collisions() {
        var table = BoundedDictionary<CollidingKey, Int>(capacity: 40)
        var model = ModelTable(capacity: 40)
        var random = SplitMix64(seed: 42)
        for step in 0..<5_000 {
            let key = Int(random.next(below: 90))
            if random.next(below: 4) == 0 {
                table[CollidingKey(value: key)] = nil
                model.remove(key)
            } else {
                table[CollidingKey(value: key)] = step
                model.set(key, step)
            }
        }
        for key in 0..<90 {
            #expect(table[CollidingKey(value: key)] == model.value(for: key), "key \(key)")
        }
        #expect(table.count == model.count)
    }

    @Test("with the hash computed by the caller, the set and the dictionary agree with the plain calls")
    func hashGivenByTheCaller() {
        var given = BoundedSet<String>(capacity: 4)
        var plain = BoundedSet<String>(capacity: 4)
        var dictionary = BoundedDictionary<String, Int>(capacity: 4)
        for step in 0..<12 {
            let id = "message-\(step % 6)"
            let hash = id.hashValue
            #expect(given.contains(id, hash: hash) == plain.contains(id), "step \(step)")
            if !given.contains(id, hash: hash) { given.insert(id, hash: hash) }
            plain.insert(id)
            dictionary.setValue(step, forKey: id, hash: hash)
            #expect(dictionary[id] == step)
        }
        for step in 0..<6 {
            let id = "message-\(step)"
            #expect(given.contains(id) == plain.contains(id), "\(id)")
        }
        #expect(given.count == plain.count)
        #expect(dictionary.count == 4)
    }
}
