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
        withJSONText { [UInt8]($0) }
    }

    /// The value as compact JSON text; see ``jsonBytes()``.
    public func jsonString() -> String {
        withJSONText { String(decoding: $0, as: UTF8.self) }
    }

    /// Appends the value's compact JSON text (see ``jsonBytes()``) to `output`.
    public func write(into output: inout [UInt8]) {
        withJSONText { output.append(contentsOf: $0) }
    }

    /// Calls `body` with the value's compact JSON text, composed on the stack (on the heap past 512 bytes): an array's
    /// append per piece (a uniqueness and a capacity check each, a message's `userInfo` has dozens of pieces) costs
    /// more than the pieces' bytes.
    private func withJSONText<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 512) { stack in
            var writer = ByteWriter(stack)
            write(to: &writer)
            return writer.withBytes(body)
        }
    }

    fileprivate func write(to writer: inout ByteWriter) {
        switch self {
        case .null:
            writer.append("null" as StaticString)
        case .bool(let value):
            writer.append(value ? "true" as StaticString : "false")
        case .int(let value):
            JSONWriter.writeInteger(value, to: &writer)
        case .double(let value):
            guard value.isFinite else {
                writer.append("null" as StaticString)
                return
            }
            // Swift's description is the shortest text that reads back as the same Double; for finite values it
            // is valid JSON and always has a fraction or an exponent ("0.1", "2.0", "-0.0", "1e+16", "5e-324"),
            // which the round-trip tests check.
            var text = value.description
            text.withUTF8 { writer.append($0) }
        case .string(let value):
            JSONWriter.writeString(value, to: &writer)
        case .array(let elements):
            writer.append(UInt8(ascii: "["))
            // Each element read where it is, not copied out of the array (and retained) first.
            elements.withUnsafeBufferPointer { elements in
                for index in elements.indices {
                    if index > 0 { writer.append(UInt8(ascii: ",")) }
                    elements[index].write(to: &writer)
                }
            }
            writer.append(UInt8(ascii: "]"))
        case .object(let object):
            object.write(to: &writer)
        }
    }
}

extension JSONObject {
    /// The object as compact JSON text, as ``JSONValue/jsonBytes()`` writes it, from the object where it is: wrapped
    /// in a `JSONValue` first, it was copied (a message's whole `userInfo`, for the durable inbox's record).
    package func jsonBytes() -> [UInt8] {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 512) { stack in
            var writer = ByteWriter(stack)
            write(to: &writer)
            return writer.withBytes { [UInt8]($0) }
        }
    }

    fileprivate func write(to writer: inout ByteWriter) {
        writer.append(UInt8(ascii: "{"))
        // The members read where they are (`members` would be a copy of the array).
        entries.withUnsafeBufferPointer { members in
            for index in members.indices {
                if index > 0 { writer.append(UInt8(ascii: ",")) }
                JSONWriter.writeString(members[index].key, to: &writer)
                writer.append(UInt8(ascii: ":"))
                members[index].value.write(to: &writer)
            }
        }
        writer.append(UInt8(ascii: "}"))
    }
}

/// The scalar encoders behind ``JSONValue/write(into:)``.
package enum JSONWriter {
    static func writeInteger(_ value: Int64, to writer: inout ByteWriter) {
        if value < 0 { writer.append(UInt8(ascii: "-")) }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            let start = writeDecimal(value.magnitude, backwardsInto: digits)
            writer.append(UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

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
    private static func writeDecimal(_ value: UInt64, backwardsInto digits: UnsafeMutableBufferPointer<UInt8>) -> Int {
        var magnitude = value
        var start = digits.count
        repeat {
            start -= 1
            digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        } while magnitude != 0
        return start
    }

    static func writeString(_ value: String, to writer: inout ByteWriter) {
        // A native string's bytes where they are; a copy (made contiguous) only for one that has none.
        if value.utf8.withContiguousStorageIfAvailable({ writeQuoted($0, to: &writer) }) == nil {
            var value = value
            value.withUTF8 { writeQuoted($0, to: &writer) }
        }
    }

    /// Writes `utf8` as a JSON string, quotes included. Most strings (keys, IDs, a notification's text) need no
    /// escaping: those are copied with their quotes in one pass, eight bytes at a time, each word checked as it is
    /// copied (a message's `userInfo` is a dozen or more short strings, where a scan, then a copy through `memcpy`,
    /// then the quotes, cost several times the bytes). A string with a byte to escape is written again from its start,
    /// run by run.
    @inline(__always)
    private static func writeQuoted(_ utf8: UnsafeBufferPointer<UInt8>, to writer: inout ByteWriter) {
        let count = utf8.count
        let plain = writer.write(upTo: count + 2) { output -> Int? in
            output[0] = UInt8(ascii: "\"")
            if let source = utf8.baseAddress {
                let from = UnsafeRawPointer(source)
                let to = UnsafeMutableRawPointer(output + 1)
                var offset = 0
                while offset + 8 <= count {
                    let word = from.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    if specialBytes(in: word) != 0 { return nil }
                    to.storeBytes(of: word, toByteOffset: offset, as: UInt64.self)
                    offset += 8
                }
                if offset < count {
                    if count >= 8 {
                        // The last eight bytes at once, overlapping bytes already copied (written again, the same).
                        let word = from.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
                        if specialBytes(in: word) != 0 { return nil }
                        to.storeBytes(of: word, toByteOffset: count - 8, as: UInt64.self)
                    } else {
                        repeat {
                            let byte = source[offset]
                            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return nil }
                            output[1 + offset] = byte
                            offset += 1
                        } while offset < count
                    }
                }
            }
            output[1 + count] = UInt8(ascii: "\"")
            return count + 2
        }
        guard !plain else { return }
        writer.append(UInt8(ascii: "\""))
        writeEscaped(utf8, to: &writer)
        writer.append(UInt8(ascii: "\""))
    }

    /// The high bit of each byte of `word` that is below 0x20, `"` or `\` (see the parser's `specialBytes`), and
    /// possibly of bytes after the first such byte (a borrow): zero exactly when no byte of `word` needs escaping.
    /// Non-ASCII bytes are written as they are (`& ~word`).
    @inline(__always)
    private static func specialBytes(in word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let belowSpace = word &- ones &* 0x20
        let quotes = (word ^ (ones &* 0x22)) &- ones
        let backslashes = (word ^ (ones &* 0x5C)) &- ones
        return (belowSpace | quotes | backslashes) & ~word & (ones &* 0x80)
    }

    /// ``writeEscaped(_:into:)`` into `writer`.
    private static func writeEscaped(_ utf8: UnsafeBufferPointer<UInt8>, to writer: inout ByteWriter) {
        guard let base = utf8.baseAddress else { return }
        var runStart = 0
        while true {
            let index = firstByteToEscape(in: UnsafeRawPointer(base), count: utf8.count, from: runStart)
            writer.append(UnsafeBufferPointer(start: base + runStart, count: index - runStart))
            guard index < utf8.count else { return }
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 6) { escape in
                writer.append(UnsafeBufferPointer(rebasing: escape[..<escapeSequence(for: base[index], into: escape)]))
            }
            runStart = index + 1
        }
    }

    /// Writes the escape sequence of `byte` (`"`, `\` or a control character) into `escape` (6 bytes); returns its
    /// length.
    private static func escapeSequence(for byte: UInt8, into escape: UnsafeMutableBufferPointer<UInt8>) -> Int {
        escape[0] = UInt8(ascii: "\\")
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): escape[1] = byte
        case UInt8(ascii: "\n"): escape[1] = UInt8(ascii: "n")
        case UInt8(ascii: "\r"): escape[1] = UInt8(ascii: "r")
        case UInt8(ascii: "\t"): escape[1] = UInt8(ascii: "t")
        case 0x08: escape[1] = UInt8(ascii: "b")
        case 0x0C: escape[1] = UInt8(ascii: "f")
        default:
            // Only bytes below 0x20 get here: the first hex digit is 0 or 1.
            escape[1] = UInt8(ascii: "u")
            escape[2] = UInt8(ascii: "0")
            escape[3] = UInt8(ascii: "0")
            escape[4] = UInt8(ascii: "0") + byte >> 4
            let low = byte & 0xF
            escape[5] = low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10
            return 6
        }
        return 2
    }

    /// Appends `value` escaped as the inside of a JSON string (no quotes).
    package static func appendEscapedContents(_ value: String, to output: inout [UInt8]) {
        // A native string's bytes where they are; a copy (made contiguous) only for one that has none.
        if value.utf8.withContiguousStorageIfAvailable({ writeEscaped($0, into: &output) }) == nil {
            var value = value
            value.withUTF8 { utf8 in
                writeEscaped(utf8, into: &output)
            }
        }
    }

    /// Appends the UTF-8 text `utf8` escaped as the inside of a JSON string (no quotes), as
    /// ``appendEscapedContents(_:to:)-(String,_)`` does for a `String`.
    package static func appendEscapedContents(_ utf8: UnsafeRawBufferPointer, to output: inout [UInt8]) {
        writeEscaped(utf8.assumingMemoryBound(to: UInt8.self), into: &output)
    }

    /// Appends `utf8` with `"`, `\` and control characters escaped, copying the runs between them whole.
    private static func writeEscaped(_ utf8: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) {
        guard let base = utf8.baseAddress else { return }
        var runStart = 0
        while true {
            let index = firstByteToEscape(in: UnsafeRawPointer(base), count: utf8.count, from: runStart)
            output.append(contentsOf: UnsafeBufferPointer(start: base + runStart, count: index - runStart))
            guard index < utf8.count else { return }
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 6) { escape in
                output.append(contentsOf: escape[..<escapeSequence(for: base[index], into: escape)])
            }
            runStart = index + 1
        }
    }

    /// The offset of the first `"`, `\` or control character from `offset`, or `count` when there is none;
    /// eight bytes at a time while eight are left.
    package static func firstByteToEscape(in base: UnsafeRawPointer, count: Int, from offset: Int) -> Int {
        let start = offset
        var offset = offset
        while offset + 8 <= count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            // The first flag is the first byte to escape (a false flag from a borrow comes only after a true one).
            let special = specialBytes(in: word)
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
            let special = specialBytes(in: word)
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
