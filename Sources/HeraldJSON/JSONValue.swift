/// A JSON value as it arrived on the wire: the free-form part of a message (`data`, `apns.payload`,
/// a remote message's `userInfo`) that Herald carries without a schema.
///
/// Numbers keep the distinction the text made: an integer written without fraction or exponent that fits
/// in 64 bits is ``int(_:)``; every other number is ``double(_:)``. `1` and `1.0` are therefore different
/// values, and each survives a parse → write → parse round trip unchanged.
///
/// A value type with no reference to the loop: safe to use and send from any thread.
public enum JSONValue: Sendable, Hashable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer written without fraction or exponent that fits in `Int64` exactly.
    case int(Int64)
    /// Any other number. Always finite when it comes from ``JSONParser``.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object: ordered, unique keys.
    case object(JSONObject)
}

extension JSONValue {
    /// The member named `key` when this value is an object that has it; otherwise `nil`.
    @inlinable
    public subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[key]
    }

    /// The string, when this value is a string.
    @inlinable
    public var stringValue: String? {
        guard case .string(let value) = self else { return nil }
        return value
    }

    /// The integer, when this value is ``int(_:)`` or a ``double(_:)`` with an integral value
    /// that fits in `Int64` (so `3.0` gives 3, `3.5` gives `nil`).
    @inlinable
    public var intValue: Int64? {
        switch self {
        case .int(let value):
            return value
        case .double(let value):
            return Int64(exactly: value)
        default:
            return nil
        }
    }

    /// The number as a `Double`, when this value is ``int(_:)`` (converted, rounding beyond 2⁵³)
    /// or ``double(_:)``.
    @inlinable
    public var doubleValue: Double? {
        switch self {
        case .int(let value):
            return Double(value)
        case .double(let value):
            return value
        default:
            return nil
        }
    }

    /// The Boolean, when this value is `true` or `false`. Numbers and strings are not converted.
    @inlinable
    public var boolValue: Bool? {
        guard case .bool(let value) = self else { return nil }
        return value
    }

    /// The object, when this value is an object.
    @inlinable
    public var objectValue: JSONObject? {
        guard case .object(let value) = self else { return nil }
        return value
    }

    /// The elements, when this value is an array.
    @inlinable
    public var arrayValue: [JSONValue]? {
        guard case .array(let value) = self else { return nil }
        return value
    }

    /// Whether this value is `null`.
    @inlinable
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}

extension JSONValue: ExpressibleByNilLiteral {
    /// `nil` is JSON `null`.
    public init(nilLiteral: ()) {
        self = .null
    }
}

extension JSONValue: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) {
        self = .bool(value)
    }
}

extension JSONValue: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int64) {
        self = .int(value)
    }
}

extension JSONValue: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) {
        self = .double(value)
    }
}

extension JSONValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        self = .string(value)
    }
}

extension JSONValue: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: JSONValue...) {
        self = .array(elements)
    }
}

extension JSONValue: ExpressibleByDictionaryLiteral {
    /// An object with the literal's members in the order written. A key written twice is a programming
    /// error and traps, as it does for `Dictionary`.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(uniqueKeysWithValues: elements))
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact JSON text of the value (see ``jsonString()``).
    public var description: String { jsonString() }
}

/// A JSON object: members in the order they were written or inserted, each key at most once.
///
/// Lookup is by key as with a dictionary, and so is equality: two objects with the same members in a
/// different order are equal and hash alike. Iteration, ``keys`` and the writer use the stored order.
///
/// Small objects (the usual case in a push message) are searched linearly; an object that grows past a
/// few members also keeps a hash index, so lookups and the parser's duplicate-key check stay O(1) for
/// an object with many members.
///
/// The members used on every message's path (lookup, insertion, iteration) are `@inlinable`: the decoders in
/// `Herald` call them per field, and as calls across the module boundary they cost about 5 % of a request's
/// instructions (callgrind, `Benchmarks/scripts/profile-callgrind`).
public struct JSONObject: Sendable {
    /// One member: its key and its value.
    public typealias Element = (key: String, value: JSONValue)

    /// One stored member. A struct rather than the `Element` tuple: the compiler generates its copy and
    /// destroy code, where a tuple goes through the runtime's generic tuple witnesses (measurably slower
    /// when a parsed message is freed).
    @usableFromInline
    package struct Member: Sendable {
        @usableFromInline package var key: String
        @usableFromInline package var value: JSONValue

        @inlinable
        package init(key: String, value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    /// Members in stored order.
    @usableFromInline var entries: [Member]
    /// Key → position in `entries`; present only while `entries.count > JSONObject.linearSearchLimit`.
    @usableFromInline var index: [String: Int]?

    /// Objects up to this many members are searched linearly; larger ones keep `index`.
    @usableFromInline static let linearSearchLimit = 12

    /// An empty object.
    @inlinable
    public init() {
        entries = []
        index = nil
    }

    /// An object with the given members in the given order. A key that appears twice is a programming
    /// error and traps, as it does for `Dictionary(uniqueKeysWithValues:)`.
    public init(uniqueKeysWithValues members: some Sequence<(String, JSONValue)>) {
        self.init()
        for (key, value) in members {
            precondition(position(of: key) == nil, "JSONObject: duplicate key \"\(key)\"")
            appendNew(key: key, value: value)
        }
    }

    /// Makes room for `capacity` members, so that building an object of known size allocates once.
    @inlinable
    public mutating func reserveCapacity(_ capacity: Int) {
        entries.reserveCapacity(capacity)
    }

    /// The number of members.
    @inlinable
    public var count: Int { entries.count }

    /// Whether the object has no members.
    @inlinable
    public var isEmpty: Bool { entries.isEmpty }

    /// The keys in stored order.
    public var keys: [String] { entries.map(\.key) }

    /// The value for `key`, or `nil` when there is no such member. Setting a value replaces an
    /// existing member in place or appends a new one at the end; setting `nil` removes the member.
    @inlinable
    public subscript(key: String) -> JSONValue? {
        get {
            guard let position = position(of: key) else { return nil }
            return entries[position].value
        }
        set {
            guard let newValue else {
                removeValue(forKey: key)
                return
            }
            if let position = position(of: key) {
                entries[position].value = newValue
            } else {
                appendNew(key: key, value: newValue)
            }
        }
    }

    /// Removes the member named `key` and returns its value, or returns `nil` when there is none.
    /// The other members keep their order.
    @discardableResult
    public mutating func removeValue(forKey key: String) -> JSONValue? {
        guard let position = position(of: key) else { return nil }
        let removed = entries.remove(at: position).value
        if entries.count > Self.linearSearchLimit {
            rebuildIndex()
        } else {
            index = nil
        }
        return removed
    }

    /// Merges `other` into this object, recursively: where both have an object under the same key the two
    /// objects are merged; otherwise `other`'s value wins (replacing in place). Keys only `other` has are
    /// appended in `other`'s order.
    ///
    /// This is how `apns.payload` is merged into a message's `userInfo`.
    public mutating func merge(_ other: JSONObject) {
        for member in other.entries {
            let value = member.value
            guard let position = position(of: member.key) else {
                appendNew(key: member.key, value: value)
                continue
            }
            if case .object(let incoming) = value, case .object(var existing) = entries[position].value {
                // Release the stored copy first so `existing` is uniquely referenced while it is merged.
                entries[position].value = .null
                existing.merge(incoming)
                entries[position].value = .object(existing)
            } else {
                entries[position].value = value
            }
        }
    }

    /// This object with `other` merged into it; see ``merge(_:)``.
    public func merging(_ other: JSONObject) -> JSONObject {
        var result = self
        result.merge(other)
        return result
    }

    /// An object of `entries`, whose keys the caller has checked are unique, with `index` built from them
    /// when there are more than `linearSearchLimit`.
    package init(uniqueEntries entries: [Member], index: [String: Int]?) {
        self.entries = entries
        self.index = index
    }

    /// The members in stored order, for code that iterates without building tuples.
    @inlinable
    package var members: [Member] { entries }

    /// Whether the object has a member named `key` (without copying its value, as the subscript does).
    @inlinable
    package func containsKey(_ key: String) -> Bool {
        position(of: key) != nil
    }

    /// Appends a member whose key the caller knows is not present yet.
    @inlinable
    package mutating func appendNew(key: String, value: JSONValue) {
        entries.append(Member(key: key, value: value))
        if index != nil {
            index![key] = entries.count - 1
        } else if entries.count > Self.linearSearchLimit {
            rebuildIndex()
        }
    }

    /// Puts the member named `key` at `position`: the member there is moved when the object has one (keeping
    /// its value), otherwise a new one with `value` is inserted. The members before `position` stay in place.
    package mutating func place(key: String, at position: Int, orInsert value: @autoclosure () -> JSONValue) {
        if let current = self.position(of: key) {
            entries.insert(entries.remove(at: current), at: position)
        } else {
            entries.insert(Member(key: key, value: value()), at: position)
        }
        if entries.count > Self.linearSearchLimit {
            rebuildIndex()
        } else {
            index = nil
        }
    }

    @inlinable
    func position(of key: String) -> Int? {
        if let index { return index[key] }
        // Comparing lengths first skips most string comparisons (keys of an object mostly differ in length). The
        // members are walked through their buffer: no bounds check or closure per member.
        let length = key.utf8.count
        return entries.withUnsafeBufferPointer { members in
            for position in members.indices where members[position].key.utf8.count == length && members[position].key == key {
                return position
            }
            return nil
        }
    }

    @usableFromInline
    mutating func rebuildIndex() {
        var newIndex = [String: Int](minimumCapacity: entries.count)
        for (position, entry) in entries.enumerated() {
            newIndex[entry.key] = position
        }
        index = newIndex
    }
}

extension JSONObject: Sequence {
    /// Iterates the members in stored order.
    public struct Iterator: IteratorProtocol {
        @usableFromInline var base: IndexingIterator<[Member]>

        @inlinable
        init(base: IndexingIterator<[Member]>) {
            self.base = base
        }

        @inlinable
        public mutating func next() -> Element? {
            guard let member = base.next() else { return nil }
            return (key: member.key, value: member.value)
        }
    }

    /// Iterates the members in stored order.
    @inlinable
    public func makeIterator() -> Iterator {
        Iterator(base: entries.makeIterator())
    }

    @inlinable
    public var underestimatedCount: Int { entries.count }
}

extension JSONObject: Hashable {
    /// Equal when both have the same keys with equal values, in any order.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.entries.count == rhs.entries.count else { return false }
        for member in lhs.entries {
            guard let other = rhs[member.key], other == member.value else { return false }
        }
        return true
    }

    /// Hashes the members independently of their order, consistent with ``==(_:_:)``.
    public func hash(into hasher: inout Hasher) {
        var combined = 0
        for member in entries {
            var memberHasher = Hasher()
            memberHasher.combine(member.key)
            memberHasher.combine(member.value)
            combined ^= memberHasher.finalize()
        }
        hasher.combine(entries.count)
        hasher.combine(combined)
    }
}

extension JSONObject: ExpressibleByDictionaryLiteral {
    /// An object with the literal's members in the order written. A key written twice traps.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(uniqueKeysWithValues: elements)
    }
}

extension JSONObject: CustomStringConvertible {
    /// The compact JSON text of the object.
    public var description: String { JSONValue.object(self).jsonString() }
}
