/// What decoding needs from the instance: who the sender is, how to name a new message, and the time.
public struct DecodingContext: Sendable {
    /// The sender ID (FCM project number or project ID) written to `from` for token messages.
    public var senderID: String
    /// Makes the ID of each accepted message (`gcm.message_id`).
    public var makeMessageID: @Sendable () -> String
    /// The receipt time, in milliseconds since 1970.
    public var now: @Sendable () -> Int64

    public init(
        senderID: String,
        makeMessageID: @escaping @Sendable () -> String,
        now: @escaping @Sendable () -> Int64 = { WallClock.nowMilliseconds() }
    ) {
        self.senderID = senderID
        self.makeMessageID = makeMessageID
        self.now = now
    }
}

/// The payload size limits FCM applies, so that a message Herald accepts is one FCM would accept too.
public enum PayloadLimits {
    /// The most bytes of payload a message may carry.
    public static let message = 4096
    /// The most bytes of payload a topic message may carry.
    public static let topicMessage = 2048
}

/// The fields an object of the wire format may have: proto field names and their lowerCamelCase forms
/// (Google's JSON mapping accepts both), worked out once per object type.
final class FieldSet: Sendable {
    let names: [String]
    let camelCaseNames: [String]
    /// For each UTF-8 length, the fields one of whose names has that length: a key is compared with one or two
    /// names at most (decoding looks fields up many times per message).
    private let byLength: [[Int]]
    /// The names as `match` compares them: ordered by length, with where each length starts in `candidates`.
    private let candidates: [Candidate]
    private let candidatesByLength: [Int]

    /// A name's length and first 16 bytes as two words (see `FieldSet.words`); a name that is longer is compared as
    /// a `String`.
    private struct Candidate {
        var low: UInt64
        var high: UInt64
        var position: Int
        var camelCase: Bool
    }

    init(_ names: [String]) {
        precondition(names.count <= 64, "a field set holds at most 64 fields")
        self.names = names
        self.camelCaseNames = names.map(FieldSet.camelCase)
        var byLength: [[Int]] = []
        for (position, name) in names.enumerated() {
            for length in Set([name.utf8.count, FieldSet.camelCase(name).utf8.count]) {
                while byLength.count <= length { byLength.append([]) }
                byLength[length].append(position)
            }
        }
        self.byLength = byLength
        var candidates: [Candidate] = []
        var candidatesByLength: [Int] = []
        for length in byLength.indices {
            candidatesByLength.append(candidates.count)
            for position in byLength[length] {
                // The name before its lowerCamelCase form, so that a name that is its own form matches as the name.
                for (camelCase, name) in [(false, names[position]), (true, camelCaseNames[position])] where name.utf8.count == length {
                    let bytes = Array(name.utf8)
                    let (low, high) = bytes.withUnsafeBytes { FieldSet.words($0) }
                    candidates.append(Candidate(low: low, high: high, position: position, camelCase: camelCase))
                }
            }
        }
        candidatesByLength.append(candidates.count)
        self.candidates = candidates
        self.candidatesByLength = candidatesByLength
    }

    func index(of key: String) -> Int? {
        let length = key.utf8.count
        guard length < byLength.count else { return nil }
        for position in byLength[length] where names[position] == key || camelCaseNames[position] == key {
            return position
        }
        return nil
    }

    /// The position of the field whose name (`camelCase` false) or lowerCamelCase name (`camelCase` true) is the
    /// UTF-8 `key`; a name that is its own lowerCamelCase form matches as the name.
    func match(_ key: UnsafeRawBufferPointer) -> (position: Int, camelCase: Bool)? {
        let length = key.count
        guard length < byLength.count else { return nil }
        guard length <= 16 else { return matchLong(key) }
        let (low, high) = Self.words(key)
        for index in candidatesByLength[length]..<candidatesByLength[length + 1] {
            let candidate = candidates[index]
            if candidate.low == low && candidate.high == high { return (candidate.position, candidate.camelCase) }
        }
        return nil
    }

    /// `match` for a key over 16 bytes (a name that long is compared as a `String`), apart so that the usual path
    /// stays small.
    @inline(never)
    private func matchLong(_ key: UnsafeRawBufferPointer) -> (position: Int, camelCase: Bool)? {
        let name = String(decoding: key, as: UTF8.self)
        for position in byLength[key.count] {
            if names[position] == name { return (position, false) }
            if camelCaseNames[position] == name { return (position, true) }
        }
        return nil
    }

    /// The first 16 bytes of `bytes` as two little-endian words, zero past its end: two names of the same length up
    /// to 16 bytes are equal when their words are. Reads only inside `bytes` (overlapping loads, no loop).
    @inline(__always)
    static func words(_ bytes: UnsafeRawBufferPointer) -> (UInt64, UInt64) {
        guard let start = bytes.baseAddress else { return (0, 0) }
        let length = bytes.count
        if length <= 8 { return (word(start, length), 0) }
        return (word(start, 8), word(start + 8, Swift.min(length - 8, 8)))
    }

    /// The `length` (0 to 8) bytes at `start` as a little-endian word.
    @inline(__always)
    private static func word(_ start: UnsafeRawPointer, _ length: Int) -> UInt64 {
        switch length {
        case 8:
            return UInt64(littleEndian: start.loadUnaligned(as: UInt64.self))
        case 4...7:
            // Two four-byte loads that overlap: the bytes they share are the same in both.
            let first = UInt64(UInt32(littleEndian: start.loadUnaligned(as: UInt32.self)))
            let last = UInt64(UInt32(littleEndian: start.loadUnaligned(fromByteOffset: length - 4, as: UInt32.self)))
            return first | last << UInt64(8 * (length - 4))
        case 1...3:
            let first = UInt64(start.load(as: UInt8.self))
            let middle = UInt64(start.load(fromByteOffset: length / 2, as: UInt8.self))
            let last = UInt64(start.load(fromByteOffset: length - 1, as: UInt8.self))
            return first | middle << UInt64(8 * (length / 2)) | last << UInt64(8 * (length - 1))
        default:
            return 0
        }
    }

    static func camelCase(_ name: String) -> String {
        var result = ""
        var upperNext = false
        for character in name {
            if character == "_" {
                upperNext = true
            } else {
                result.append(upperNext ? Character(character.uppercased()) : character)
                upperNext = false
            }
        }
        return result
    }
}

/// Reads a JSON object field by field, refusing unknown fields and wrong types with the field's path.
struct StrictObject {
    private let fields: FieldSet
    /// The object itself: fields are looked up in it (it has a handful of members), so reading one costs no
    /// array of values to build and free.
    private let object: JSONObject
    /// Bit `i` is set when field `i` is present: most lookups are of absent fields, answered without a search.
    private let present: UInt64
    private let parentPath: String
    private let name: String?

    /// The object's path for error messages (`message.notification`); built only when an error needs it.
    var path: String {
        guard let name else { return parentPath }
        return parentPath.isEmpty ? name : "\(parentPath).\(name)"
    }

    init(_ value: JSONValue, parentPath: String = "", name: String? = nil, fields: FieldSet) throws(MessageError) {
        self.fields = fields
        self.parentPath = parentPath
        self.name = name
        guard case .object(let object) = value else {
            self.object = JSONObject()
            self.present = 0
            throw MessageError(.wrongType(field: path, expected: "an object"))
        }
        self.object = object
        var present: UInt64 = 0
        for member in object.members {
            guard let position = fields.index(of: member.key) else {
                self.present = 0
                let path = self.path
                throw MessageError(.unknownField(path.isEmpty ? member.key : "\(path).\(member.key)"))
            }
            present |= 1 << UInt64(position)
        }
        self.present = present
    }

    func fieldPath(_ name: String) -> String {
        let path = self.path
        return path.isEmpty ? name : "\(path).\(name)"
    }

    /// The value of field `name` (a proto name of the field set) under either of its spellings; when both are
    /// given, the later one, as JSON readers that keep the last duplicate do. `nil` when absent or `null`.
    func value(_ name: String) -> JSONValue? {
        guard let position = fields.index(of: name), present & (1 << UInt64(position)) != 0 else { return nil }
        let camelCaseName = fields.camelCaseNames[position]
        let length = name.utf8.count
        let camelCaseLength = camelCaseName.utf8.count
        var found: JSONValue?
        for member in object.members {
            let keyLength = member.key.utf8.count
            if (keyLength == length && member.key == name) || (keyLength == camelCaseLength && member.key == camelCaseName) {
                found = member.value
            }
        }
        guard let found, !found.isNull else { return nil }
        return found
    }

    func string(_ name: String) throws(MessageError) -> String? {
        guard let value = value(name) else { return nil }
        guard case .string(let string) = value else { throw MessageError(.wrongType(field: fieldPath(name), expected: "a string")) }
        return string
    }

    func object(_ name: String, fields: FieldSet) throws(MessageError) -> StrictObject? {
        guard let value = value(name) else { return nil }
        return try StrictObject(value, parentPath: path, name: name, fields: fields)
    }

    /// A free-form object (`apns.payload`), checked only for being an object.
    func freeObject(_ name: String) throws(MessageError) -> JSONObject? {
        guard let value = value(name) else { return nil }
        guard case .object(let object) = value else { throw MessageError(.wrongType(field: fieldPath(name), expected: "an object")) }
        return object
    }

    /// A `map<string, string>` field (`data`, `apns.headers`), checked and returned as the object it is.
    func stringMap(_ name: String) throws(MessageError) -> JSONObject? {
        guard let value = value(name) else { return nil }
        guard case .object(let object) = value else {
            throw MessageError(.wrongType(field: fieldPath(name), expected: "an object of strings"))
        }
        for (key, entry) in object {
            guard case .string = entry else {
                throw MessageError(.wrongType(field: "\(fieldPath(name)).\(key)", expected: "a string (FCM map values are strings)"))
            }
        }
        return object
    }
}

/// Checks the types of an `aps` dictionary so that handlers can trust ``APS``.
enum APSValidation {
    static func validate(_ value: JSONValue, path: String) throws(MessageError) {
        guard case .object(let aps) = value else { throw MessageError(.wrongType(field: path, expected: "an object")) }
        for (key, entry) in aps {
            // The path is only built when an error needs it.
            var field: String { "\(path).\(key)" }
            switch key {
            case "alert":
                switch entry {
                case .string: break
                case .object(let alert):
                    for (alertKey, alertValue) in alert {
                        if alertKey.hasSuffix("-args") {
                            guard case .array(let args) = alertValue, args.allSatisfy({ $0.stringValue != nil }) else {
                                throw MessageError(.wrongType(field: "\(field).\(alertKey)", expected: "an array of strings"))
                            }
                        } else if alertValue.stringValue == nil {
                            throw MessageError(.wrongType(field: "\(field).\(alertKey)", expected: "a string"))
                        }
                    }
                default:
                    throw MessageError(.wrongType(field: field, expected: "a string or an object"))
                }
            case "badge":
                guard let badge = entry.intValue, badge >= 0 else {
                    throw MessageError(.wrongType(field: field, expected: "a non-negative integer"))
                }
            case "sound":
                switch entry {
                case .string: break
                case .object(let sound):
                    if let volume = sound["volume"], volume.doubleValue.map({ (0...1).contains($0) }) != true {
                        throw MessageError(.wrongType(field: "\(field).volume", expected: "a number from 0 to 1"))
                    }
                    if let name = sound["name"], name.stringValue == nil {
                        throw MessageError(.wrongType(field: "\(field).name", expected: "a string"))
                    }
                default:
                    throw MessageError(.wrongType(field: field, expected: "a string or a critical-sound object"))
                }
            case "content-available", "mutable-content":
                guard let flag = entry.intValue, flag == 0 || flag == 1 else {
                    throw MessageError(.wrongType(field: field, expected: "0 or 1"))
                }
            case "thread-id", "category", "target-content-id":
                guard entry.stringValue != nil else { throw MessageError(.wrongType(field: field, expected: "a string")) }
            case "interruption-level":
                guard let level = entry.stringValue, APS.InterruptionLevel(rawValue: level) != nil else {
                    throw MessageError(.wrongType(field: field, expected: "passive, active, time-sensitive or critical"))
                }
            case "relevance-score":
                guard let score = entry.doubleValue, (0...1).contains(score) else {
                    throw MessageError(.wrongType(field: field, expected: "a number from 0 to 1"))
                }
            default:
                break  // APNs ignores keys it does not know; so does Herald (timestamp, event, content-state, ...).
            }
        }
    }
}

/// The bytes of a payload as the size limit counts them: `userInfo` written compactly.
func payloadSize(_ userInfo: JSONObject) -> Int {
    JSONValue.object(userInfo).jsonByteCount
}
