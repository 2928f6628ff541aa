/// A JSON value, as a plugin gets it from Herald: the message's `userInfo`, its configuration.
///
/// Numbers keep the distinction the text made, as Herald's own `JSONValue` does: an integer written without
/// fraction or exponent that fits in 64 bits is ``int(_:)``, every other number ``double(_:)``.
public enum JSONValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The member named `key` when this value is an object that has it.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[key]
    }

    /// The string, when this value is a string.
    public var stringValue: String? {
        guard case .string(let value) = self else { return nil }
        return value
    }

    /// The integer, when this value is an integer or a double with an integral value that fits in `Int64`.
    public var intValue: Int64? {
        switch self {
        case .int(let value): value
        case .double(let value): Int64(exactly: value)
        default: nil
        }
    }

    /// The number as a `Double`.
    public var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// The Boolean, when this value is `true` or `false`.
    public var boolValue: Bool? {
        guard case .bool(let value) = self else { return nil }
        return value
    }

    /// The object, when this value is an object.
    public var objectValue: JSONObject? {
        guard case .object(let value) = self else { return nil }
        return value
    }

    /// The elements, when this value is an array.
    public var arrayValue: [JSONValue]? {
        guard case .array(let value) = self else { return nil }
        return value
    }

    /// Compact JSON text.
    public var description: String {
        var output: [UInt8] = []
        write(into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Parses one JSON value from UTF-8 bytes; `nil` when they are not JSON.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> JSONValue? {
        var reader = JSONReader(bytes)
        return reader.document()
    }

    /// Parses one JSON value from text; `nil` when it is not JSON.
    public static func parse(_ text: String) -> JSONValue? {
        var text = text
        return text.withUTF8 { parse($0) }
    }

    func write(into output: inout [UInt8]) {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let value): output.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): output.append(contentsOf: String(value).utf8)
        case .double(let value): output.append(contentsOf: (value.isFinite ? value.description : "null").utf8)
        case .string(let value): Self.writeString(value, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                element.write(into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            for (position, member) in object.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, into: &output)
                output.append(UInt8(ascii: ":"))
                member.value.write(into: &output)
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ value: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: "\\\"".utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: "\\\\".utf8)
            case UInt8(ascii: "\n"): output.append(contentsOf: "\\n".utf8)
            case UInt8(ascii: "\r"): output.append(contentsOf: "\\r".utf8)
            case UInt8(ascii: "\t"): output.append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                output.append(contentsOf: "\\u00".utf8)
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}

/// A JSON object: members in the order they came, each key once. Lookup by key.
public struct JSONObject: Sendable, Hashable, Sequence, CustomStringConvertible {
    public typealias Element = (key: String, value: JSONValue)

    private var keys: [String] = []
    private var values: [String: JSONValue] = [:]

    public init() {}

    /// The value for `key`; setting `nil` removes the member.
    public subscript(key: String) -> JSONValue? {
        get { values[key] }
        set {
            if let newValue {
                if values.updateValue(newValue, forKey: key) == nil { keys.append(key) }
            } else if values.removeValue(forKey: key) != nil {
                keys.removeAll { $0 == key }
            }
        }
    }

    public var count: Int { keys.count }
    public var isEmpty: Bool { keys.isEmpty }

    /// The keys in the order they came.
    public var orderedKeys: [String] { keys }

    /// Iterates the members in the order they came.
    public struct Iterator: IteratorProtocol {
        fileprivate var keys: IndexingIterator<[String]>
        fileprivate let values: [String: JSONValue]

        public mutating func next() -> Element? {
            guard let key = keys.next(), let value = values[key] else { return nil }
            return (key: key, value: value)
        }
    }

    public func makeIterator() -> Iterator {
        Iterator(keys: keys.makeIterator(), values: values)
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool { lhs.values == rhs.values }
    public func hash(into hasher: inout Hasher) { hasher.combine(values) }

    public var description: String { JSONValue.object(self).description }
}

/// A small recursive-descent JSON reader for what Herald sends (which is always valid JSON): enough to be
/// correct, with no attempt at Herald's parser's speed. Nesting is limited to 128 levels.
struct JSONReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0
    private var depth = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    mutating func document() -> JSONValue? {
        guard let value = value() else { return nil }
        skipSpace()
        return position == bytes.count ? value : nil
    }

    private var current: UInt8? { position < bytes.count ? bytes[position] : nil }

    private mutating func skipSpace() {
        while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { position += 1 }
    }

    private mutating func consume(_ literal: String) -> Bool {
        for byte in literal.utf8 {
            guard current == byte else { return false }
            position += 1
        }
        return true
    }

    private mutating func value() -> JSONValue? {
        skipSpace()
        guard let byte = current else { return nil }
        switch byte {
        case UInt8(ascii: "n"): return consume("null") ? .null : nil
        case UInt8(ascii: "t"): return consume("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return consume("false") ? .bool(false) : nil
        case UInt8(ascii: "\""): return string().map { .string($0) }
        case UInt8(ascii: "["):
            guard depth < 128 else { return nil }
            depth += 1
            defer { depth -= 1 }
            position += 1
            var elements: [JSONValue] = []
            skipSpace()
            if current == UInt8(ascii: "]") {
                position += 1
                return .array(elements)
            }
            while true {
                guard let element = value() else { return nil }
                elements.append(element)
                skipSpace()
                if consume(",") { continue }
                return consume("]") ? .array(elements) : nil
            }
        case UInt8(ascii: "{"):
            guard depth < 128 else { return nil }
            depth += 1
            defer { depth -= 1 }
            position += 1
            var object = JSONObject()
            skipSpace()
            if current == UInt8(ascii: "}") {
                position += 1
                return .object(object)
            }
            while true {
                skipSpace()
                guard current == UInt8(ascii: "\""), let key = string() else { return nil }
                skipSpace()
                guard consume(":"), let member = value(), object[key] == nil else { return nil }
                object[key] = member
                skipSpace()
                if consume(",") { continue }
                return consume("}") ? .object(object) : nil
            }
        default:
            return number()
        }
    }

    private mutating func number() -> JSONValue? {
        let start = position
        var integral = true
        while let byte = current {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                position += 1
            case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"), UInt8(ascii: "+"):
                integral = false
                position += 1
            default:
                return finishNumber(from: start, integral: integral)
            }
        }
        return finishNumber(from: start, integral: integral)
    }

    private func finishNumber(from start: Int, integral: Bool) -> JSONValue? {
        guard position > start else { return nil }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        if integral, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { return nil }
        return .double(value)
    }

    private mutating func string() -> String? {
        position += 1 // the opening quote
        var utf8: [UInt8] = []
        while let byte = current {
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: utf8, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let escaped = current else { return nil }
                position += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escaped)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4() else { return nil }
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard consume("\\u"), let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { return nil }
                    utf8.append(contentsOf: String(Character(unicode)).utf8)
                default:
                    return nil
                }
            case 0..<0x20:
                return nil
            default:
                utf8.append(byte)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = current else { return nil }
            position += 1
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }
}
