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
    /// The UTF-8 of `names` and `camelCaseNames`, for matching keys read from the body.
    private let nameBytes: [[UInt8]]
    private let camelCaseNameBytes: [[UInt8]]
    /// For each UTF-8 length, the fields one of whose names has that length: a key is compared with one or two
    /// names at most (decoding looks fields up many times per message).
    private let byLength: [[Int]]

    init(_ names: [String]) {
        precondition(names.count <= 64, "a field set holds at most 64 fields")
        self.names = names
        self.camelCaseNames = names.map(FieldSet.camelCase)
        self.nameBytes = names.map { Array($0.utf8) }
        self.camelCaseNameBytes = camelCaseNames.map { Array($0.utf8) }
        var byLength: [[Int]] = []
        for (position, name) in names.enumerated() {
            for length in Set([name.utf8.count, FieldSet.camelCase(name).utf8.count]) {
                while byLength.count <= length { byLength.append([]) }
                byLength[length].append(position)
            }
        }
        self.byLength = byLength
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
        guard length < byLength.count, let keyStart = key.baseAddress else { return nil }
        for position in byLength[length] {
            if Self.equal(nameBytes[position], keyStart, length) { return (position, false) }
            if Self.equal(camelCaseNameBytes[position], keyStart, length) { return (position, true) }
        }
        return nil
    }

    /// Byte by byte: names are a few bytes long, shorter than a call to `memcmp` costs.
    @inline(__always)
    private static func equal(_ name: [UInt8], _ key: UnsafeRawPointer, _ length: Int) -> Bool {
        guard name.count == length else { return false }
        for offset in 0..<length where name[offset] != key.load(fromByteOffset: offset, as: UInt8.self) {
            return false
        }
        return true
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
