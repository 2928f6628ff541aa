extension JSONValue {
    /// The value as compact JSON text (no whitespace), in UTF-8.
    ///
    /// Object members are written in stored order. Strings escape only what RFC 8259 requires (`"`, `\` and
    /// control characters, as `\n \r \t \b \f` or `\u00XX`); `/` and non-ASCII characters are written as is.
    /// ``int(_:)`` is written as an integer; a finite ``double(_:)`` in the shortest form that reads back as
    /// the same `Double`, always with a fraction or an exponent (`2.0`, `1e+300`) so that it parses back as
    /// a double. JSON has no infinity or NaN: a non-finite double (which ``JSONParser`` never produces) is
    /// written as `null`.
    public func jsonBytes() -> [UInt8] {
        // Counted first, then written into an array of that size through a pointer: no capacity check and growth
        // per appended piece (a durable message's `userInfo` is written so for the inbox).
        let count = jsonByteCount
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var writer = JSONBufferWriter(buffer)
            writer.write(self)
            // The count and the writing walk the same tree and agree (tested); the writer never passes the end.
            precondition(writer.written == count, "the JSON writer wrote \(writer.written) bytes of the \(count) counted")
            initialized = count
        }
    }

    /// The value as compact JSON text; see ``jsonBytes()``.
    public func jsonString() -> String {
        String(decoding: jsonBytes(), as: UTF8.self)
    }

    /// Appends the value's compact JSON text (see ``jsonBytes()``) to `output`.
    public func write(into output: inout [UInt8]) {
        switch self {
        case .string(let value):
            // Strings are what is written this way most (one field of a line at a time): escaped straight in.
            output.append(UInt8(ascii: "\""))
            JSONWriter.appendEscapedContents(value, to: &output)
            output.append(UInt8(ascii: "\""))
        default:
            output.append(contentsOf: jsonBytes())
        }
    }
}

/// The pieces of JSON text the writers share: literals, decimals, escaped string contents.
package enum JSONWriter {
    /// Appends the bytes of `literal` (a copy of its static bytes, without going through `String`).
    package static func appendLiteral(_ literal: StaticString, to output: inout [UInt8]) {
        literal.withUTF8Buffer { output.append(contentsOf: $0) }
    }

    /// `value` in decimal, `String(value)` without the generic formatting behind it.
    package static func decimalString(_ value: UInt64) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            let start = writeDecimal(value, backwardsInto: digits)
            return String(decoding: UnsafeBufferPointer(rebasing: digits[start...]), as: UTF8.self)
        }
    }

    /// Writes `value` in decimal at the end of `digits` (20 bytes hold `UInt64.max`), last digit first; returns the
    /// index of the first digit.
    static func writeDecimal(_ value: UInt64, backwardsInto digits: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var magnitude = value
        var start = digits.count
        repeat {
            start -= 1
            digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        } while magnitude != 0
        return start
    }

    /// Appends `value` escaped as the inside of a JSON string (no quotes).
    package static func appendEscapedContents(_ value: String, to output: inout [UInt8]) {
        var value = value
        value.withUTF8 { utf8 in
            writeEscaped(utf8, into: &output)
        }
    }

    /// Appends `utf8` with `"`, `\` and control characters escaped, copying the runs between them whole.
    private static func writeEscaped(_ utf8: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) {
        forEachEscapedPiece(of: UnsafeRawBufferPointer(utf8)) { output.append(contentsOf: $0) }
    }

    /// Calls `body` with `bytes` escaped as the inside of a JSON string, piece by piece: each run of bytes that need
    /// no escaping (found eight at a time) whole, and each escape sequence.
    @inline(__always)
    package static func forEachEscapedPiece(of bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) {
        guard let base = bytes.baseAddress else { return }
        var runStart = 0
        while true {
            let index = firstByteToEscape(in: base, count: bytes.count, from: runStart)
            if index > runStart { body(UnsafeRawBufferPointer(start: base + runStart, count: index - runStart)) }
            guard index < bytes.count else { return }
            withEscapeSequence(of: base.load(fromByteOffset: index, as: UInt8.self), body)
            runStart = index + 1
        }
    }

    /// Calls `body` with the escape sequence of `byte`, one that JSON must escape (`"`, `\` or a control character):
    /// `\` and a letter, or `\u00XX`.
    @inline(__always)
    package static func withEscapeSequence(of byte: UInt8, _ body: (UnsafeRawBufferPointer) -> Void) {
        let second: UInt8
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): second = byte
        case UInt8(ascii: "\n"): second = UInt8(ascii: "n")
        case UInt8(ascii: "\r"): second = UInt8(ascii: "r")
        case UInt8(ascii: "\t"): second = UInt8(ascii: "t")
        case 0x08: second = UInt8(ascii: "b")
        case 0x0C: second = UInt8(ascii: "f")
        default:
            // Only bytes below 0x20 get here: the first hex digit is 0 or 1.
            let low = byte & 0xF
            let sequence: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (
                UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), UInt8(ascii: "0") + byte >> 4,
                low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10
            )
            withUnsafeBytes(of: sequence) { body($0) }
            return
        }
        withUnsafeBytes(of: (UInt8(ascii: "\\"), second)) { body($0) }
    }

    /// The offset of the first `"`, `\` or control character from `offset`, or `count` when there is none;
    /// eight bytes at a time while eight are left.
    package static func firstByteToEscape(in base: UnsafeRawPointer, count: Int, from offset: Int) -> Int {
        let start = offset
        var offset = offset
        while offset + 8 <= count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            let ones: UInt64 = 0x0101_0101_0101_0101
            // High bit set for bytes below 0x20, '"' and '\' (see the parser's `specialBytes`); `& ~word`
            // drops non-ASCII bytes, which are written as they are.
            let belowSpace = word &- ones &* 0x20
            let quotes = (word ^ (ones &* 0x22)) &- ones
            let backslashes = (word ^ (ones &* 0x5C)) &- ones
            let special = (belowSpace | quotes | backslashes) & ~word & (ones &* 0x80)
            if special != 0 {
                return offset + special.trailingZeroBitCount / 8
            }
            offset += 8
        }
        if offset < count && count - 8 >= start {
            // The last eight bytes at once, overlapping bytes this call found plain: those raise no flag (a flag, and
            // the borrow that can make a false one after it, needs a byte to escape), so the first flag is in the
            // rest.
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
            let ones: UInt64 = 0x0101_0101_0101_0101
            let belowSpace = word &- ones &* 0x20
            let quotes = (word ^ (ones &* 0x22)) &- ones
            let backslashes = (word ^ (ones &* 0x5C)) &- ones
            let special = (belowSpace | quotes | backslashes) & ~word & (ones &* 0x80)
            return special == 0 ? count : count - 8 + special.trailingZeroBitCount / 8
        }
        while offset < count {
            let byte = base.load(fromByteOffset: offset, as: UInt8.self)
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return offset }
            offset += 1
        }
        return count
    }
}

extension JSONValue {
    /// The number of bytes ``jsonBytes()`` would produce, counted without building them (payload size limits
    /// are checked on every message).
    public var jsonByteCount: Int {
        switch self {
        case .null: return 4
        case .bool(let value): return value ? 4 : 5
        case .int(let value): return JSONWriter.integerLength(value)
        case .double(let value): return value.isFinite ? value.description.utf8.count : 4
        case .string(let value): return JSONWriter.escapedLength(value)
        case .array(let elements):
            var total = 2 + max(0, elements.count - 1)
            for element in elements { total += element.jsonByteCount }
            return total
        case .object(let object):
            var total = 2 + max(0, object.count - 1)
            for member in object.members { total += JSONWriter.escapedLength(member.key) + 1 + member.value.jsonByteCount }
            return total
        }
    }
}

extension JSONWriter {
    static func integerLength(_ value: Int64) -> Int {
        var magnitude = value.magnitude
        var digits = 1
        while magnitude >= 10 {
            magnitude /= 10
            digits += 1
        }
        return digits + (value < 0 ? 1 : 0)
    }

    /// The length of `value` written as a JSON string, quotes included.
    package static func escapedLength(_ value: String) -> Int {
        // Most strings need no escaping: find the first byte that does eight at a time, count from there.
        if let length = value.utf8.withContiguousStorageIfAvailable({ utf8 -> Int in
            guard let base = utf8.baseAddress else { return 2 }
            var length = 2
            var offset = 0
            while true {
                let special = firstByteToEscape(in: UnsafeRawPointer(base), count: utf8.count, from: offset)
                length += special - offset
                guard special < utf8.count else { return length }
                switch base[special] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x09, 0x0A, 0x0C, 0x0D: length += 2
                default: length += 6
                }
                offset = special + 1
            }
        }) {
            return length
        }
        var length = 2
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x08, 0x09, 0x0A, 0x0C, 0x0D: length += 2
            case 0..<0x20: length += 6
            default: length += 1
            }
        }
        return length
    }
}

/// Writes a value's compact JSON, as ``JSONValue/write(into:)`` does, into a buffer ``JSONValue/jsonByteCount`` sized:
/// each piece copied in place. It stops the process rather than write past the buffer's end.
struct JSONBufferWriter {
    private let base: UnsafeMutableRawPointer
    private let capacity: Int
    private(set) var written = 0

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        base = UnsafeMutableRawPointer(buffer.baseAddress ?? UnsafeMutablePointer(bitPattern: 1)!)
        capacity = buffer.count
    }

    private mutating func put(_ byte: UInt8) {
        precondition(written < capacity, "the JSON writer passed the counted length")
        base.storeBytes(of: byte, toByteOffset: written, as: UInt8.self)
        written += 1
    }

    private mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress else { return }
        precondition(capacity - written >= bytes.count, "the JSON writer passed the counted length")
        (base + written).copyMemory(from: source, byteCount: bytes.count)
        written += bytes.count
    }

    private mutating func put(_ literal: StaticString) {
        put(UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    mutating func write(_ value: JSONValue) {
        switch value {
        case .null: put("null")
        case .bool(let value): put(value ? "true" : "false")
        case .int(let value):
            if value < 0 { put(UInt8(ascii: "-")) }
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
                let start = JSONWriter.writeDecimal(value.magnitude, backwardsInto: digits)
                put(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(digits)[start...]))
            }
        case .double(let value):
            guard value.isFinite else { return put("null") }
            var text = value.description
            text.withUTF8 { put(UnsafeRawBufferPointer($0)) }
        case .string(let value):
            writeString(value)
        case .array(let elements):
            put(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { put(UInt8(ascii: ",")) }
                write(element)
            }
            put(UInt8(ascii: "]"))
        case .object(let object):
            put(UInt8(ascii: "{"))
            var first = true
            for member in object.members {
                if !first { put(UInt8(ascii: ",")) }
                first = false
                writeString(member.key)
                put(UInt8(ascii: ":"))
                write(member.value)
            }
            put(UInt8(ascii: "}"))
        }
    }

    /// `value` quoted, with `"`, `\` and control characters escaped; the runs between them copied whole.
    private mutating func writeString(_ value: String) {
        put(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            JSONWriter.forEachEscapedPiece(of: UnsafeRawBufferPointer(utf8)) { put($0) }
        }
        put(UInt8(ascii: "\""))
    }
}
