import Glibc

/// A strict RFC 8259 JSON parser that reads raw bytes.
///
/// It is Herald's decoder for message bodies: one pass over the input (string contents are scanned eight
/// bytes at a time), no intermediate tokens. The only allocations are the values it returns (strings longer
/// than 15 UTF-8 bytes; arrays and objects, each allocated once at its final size) plus, per parse, one
/// stack that holds the contents of open containers and one scratch buffer for strings that contain escapes.
///
/// Numbers: an integer written without fraction or exponent that fits `Int64` becomes ``JSONValue/int(_:)``;
/// any other number becomes a correctly rounded ``JSONValue/double(_:)`` (`-0` stays the double `-0.0`).
/// A number too large for a `Double` (`1e400`) is an error; one too small underflows to zero or a subnormal,
/// as `strtod` does.
///
/// Strict means: no trailing commas, comments, leading zeros, `NaN` / `Infinity`, single quotes or
/// unknown escapes; no raw control characters or invalid UTF-8 inside strings; no lone surrogates in
/// `\u` escapes; whitespace is only space, tab, line feed and carriage return; exactly one value, followed
/// only by whitespace. A key that appears twice in one object is refused, because "which one wins" differs
/// between parsers and that difference can be exploited. Every refusal is a ``JSONParseError`` with the
/// byte offset of the problem.
///
/// Parsing is a pure function of its input: safe to call from any thread.
public struct JSONParser: Sendable {
    /// Bounds that protect the receiver from hostile input. Exceeding one is an error of its own kind.
    public struct Limits: Sendable, Hashable {
        /// The deepest nesting of arrays and objects allowed: `[[1]]` has depth 2, a lone scalar depth 0.
        /// The parser recurses once per level, so this also bounds its stack use.
        public var maximumDepth: Int
        /// The longest string or key allowed, in UTF-8 bytes after unescaping.
        public var maximumStringLength: Int
        /// The longest input allowed, in bytes.
        public var maximumInputLength: Int

        /// Limits with the given values; the defaults are those of ``default``.
        public init(
            maximumDepth: Int = 64,
            maximumStringLength: Int = 1 << 20,
            maximumInputLength: Int = 4 << 20
        ) {
            self.maximumDepth = maximumDepth
            self.maximumStringLength = maximumStringLength
            self.maximumInputLength = maximumInputLength
        }

        /// Depth 64, strings up to 1 MiB, input up to 4 MiB.
        public static let `default` = Limits()
    }

    /// Parses exactly one JSON value from `bytes`.
    ///
    /// - Throws: ``JSONParseError`` saying what was wrong and at which byte.
    public static func parse(
        _ bytes: UnsafeRawBufferPointer,
        limits: Limits = .default
    ) throws(JSONParseError) -> JSONValue {
        var reader = try JSONReader(bytes, limits: limits)
        return try reader.parseDocument()
    }

    /// Parses exactly one JSON value from `bytes` (an array, `Data`, a slice, ...). Contiguous collections
    /// are read in place; others are copied once.
    ///
    /// - Throws: ``JSONParseError`` saying what was wrong and at which byte.
    @inlinable
    public static func parse(
        _ bytes: some Collection<UInt8>,
        limits: Limits = .default
    ) throws(JSONParseError) -> JSONValue {
        let contiguous = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONParseError) in try parse(UnsafeRawBufferPointer(buffer), limits: limits) }
        }
        if let contiguous {
            return try contiguous.get()
        }
        return try parse(Array(bytes), limits: limits)
    }

    /// Parses exactly one JSON value from the UTF-8 of `text`.
    ///
    /// - Throws: ``JSONParseError`` saying what was wrong and at which byte of the UTF-8.
    public static func parse(_ text: String, limits: Limits = .default) throws(JSONParseError) -> JSONValue {
        var text = text
        let result = text.withUTF8 { buffer in
            Result { () throws(JSONParseError) in try parse(UnsafeRawBufferPointer(buffer), limits: limits) }
        }
        return try result.get()
    }
}

/// The parser's state for one input: a cursor over borrowed bytes.
///
/// Besides the whole-document parse behind ``JSONParser``, decoders of a known shape pull from it member by member
/// (``enterObject()``, ``readKey()``, ``readColon()``, ``readValue()``, ``closesObject()``, ``finish()``), so
/// that they make only the values they keep. Read in the same order, the pull methods check exactly what the
/// parser checks and throw the same errors at the same offsets; what the parser does with an object's keys
/// (refusing one that appears twice) is then the caller's job.
package struct JSONReader: ~Copyable {
    private let base: UnsafeRawPointer
    private let count: Int
    private let limits: JSONParser.Limits
    private var position = 0
    private var depth = 0
    /// Unescaped UTF-8 of the string being read, used only by strings that contain escapes.
    private var scratch = ParseStack<UInt8>()
    /// Elements of the arrays being read, innermost last; each array takes its elements off the top when it
    /// closes, so it is allocated once, at its final size.
    private var elements = ParseStack<JSONValue>()
    /// Members of the objects being read, in the same way.
    private var members = ParseStack<JSONObject.Member>()

    /// A reader of `bytes`, which must stay valid while it is used. Refuses an input over the limit or empty.
    package init(_ bytes: UnsafeRawBufferPointer, limits: JSONParser.Limits = .default) throws(JSONParseError) {
        guard bytes.count <= limits.maximumInputLength else {
            throw JSONParseError(.inputTooLarge(limit: limits.maximumInputLength), at: limits.maximumInputLength)
        }
        guard let base = bytes.baseAddress, !bytes.isEmpty else {
            throw JSONParseError(.unexpectedEnd, at: 0)
        }
        self.base = base
        self.count = bytes.count
        self.limits = limits
    }

    // MARK: Bytes

    @inline(__always)
    private func byte(at offset: Int) -> UInt8 {
        base.load(fromByteOffset: offset, as: UInt8.self)
    }

    @inline(__always)
    private mutating func skipWhitespace() {
        while position < count {
            switch byte(at: position) {
            case .space, .tab, .lineFeed, .carriageReturn:
                position += 1
            default:
                return
            }
        }
    }

    // MARK: Pulling

    /// The offset of the next byte to read.
    package var offset: Int { position }

    /// The next byte to read, or `nil` at the end of the input.
    package var nextByte: UInt8? { position < count ? byte(at: position) : nil }

    /// Enters the object whose `{` is the next byte and skips the whitespace after it; returns `false`, having
    /// left it again, when it is empty.
    package mutating func enterObject() throws(JSONParseError) -> Bool {
        try enterContainer()
        position += 1
        skipWhitespace()
        if position < count && byte(at: position) == .closeBrace {
            position += 1
            depth -= 1
            return false
        }
        return true
    }

    /// Reads the key that starts at ``offset`` and returns its unescaped UTF-8, valid until the next string is read.
    package mutating func readKey() throws(JSONParseError) -> UnsafeRawBufferPointer {
        guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
        guard byte(at: position) == .quote else {
            throw JSONParseError(.unexpectedByte(byte(at: position)), at: position)
        }
        return try scanString()
    }

    /// Reads the string that starts at ``offset``, with the checks ``readValue()`` makes of a string.
    package mutating func readString() throws(JSONParseError) -> String {
        String(decoding: try readKey(), as: UTF8.self)
    }

    /// Reads the `:` after a key and the whitespace around it.
    package mutating func readColon() throws(JSONParseError) {
        skipWhitespace()
        guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
        guard byte(at: position) == .colon else {
            throw JSONParseError(.unexpectedByte(byte(at: position)), at: position)
        }
        position += 1
        skipWhitespace()
    }

    /// Reads the value that starts at ``offset``, whole.
    package mutating func readValue() throws(JSONParseError) -> JSONValue {
        try parseValue()
    }

    /// After a member's value: reads the `,` and the whitespace after it and returns `false`, or reads the `}`
    /// that closes the object and returns `true`.
    package mutating func closesObject() throws(JSONParseError) -> Bool {
        try closesAfterMember(.closeBrace)
    }

    /// After the document's value: only whitespace may follow.
    package mutating func finish() throws(JSONParseError) {
        skipWhitespace()
        guard position == count else { throw JSONParseError(.trailingData, at: position) }
    }

    /// Skips whitespace before the document's value.
    package mutating func start() {
        skipWhitespace()
    }

    // MARK: Values

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard position == count else { throw JSONParseError(.trailingData, at: position) }
        return value
    }

    /// Parses the value that starts at `position` (whitespace already skipped).
    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
        switch byte(at: position) {
        case .quote:
            return .string(try parseString())
        case .openBrace:
            return try parseObject()
        case .openBracket:
            return try parseArray()
        case .t:
            try expectLiteral("true")
            return .bool(true)
        case .f:
            try expectLiteral("false")
            return .bool(false)
        case .n:
            try expectLiteral("null")
            return .null
        case .minus, .zero ... .nine:
            return try parseNumber()
        case let other:
            throw JSONParseError(.unexpectedByte(other), at: position)
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let text = UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        for expected in text {
            guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
            let actual = byte(at: position)
            guard actual == expected else { throw JSONParseError(.unexpectedByte(actual), at: position) }
            position += 1
        }
    }

    private mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        guard depth <= limits.maximumDepth else {
            throw JSONParseError(.tooDeep(limit: limits.maximumDepth), at: position)
        }
    }

    /// After a member of an array or object: consumes `,` (refusing a trailing one before `close`) and returns
    /// `false`, or consumes `close`, leaves the container and returns `true`.
    @inline(__always)
    private mutating func closesAfterMember(_ close: UInt8) throws(JSONParseError) -> Bool {
        skipWhitespace()
        guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
        switch byte(at: position) {
        case .comma:
            let comma = position
            position += 1
            skipWhitespace()
            if position < count && byte(at: position) == close {
                throw JSONParseError(.trailingComma, at: comma)
            }
            return false
        case close:
            position += 1
            depth -= 1
            return true
        case let other:
            throw JSONParseError(.unexpectedByte(other), at: position)
        }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        position += 1
        skipWhitespace()
        if position < count && byte(at: position) == .closeBracket {
            position += 1
            depth -= 1
            return .array([])
        }
        let base = elements.count
        while true {
            elements.append(try parseValue())
            if try closesAfterMember(.closeBracket) { return .array(elements.popArray(from: base)) }
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        position += 1
        skipWhitespace()
        if position < count && byte(at: position) == .closeBrace {
            position += 1
            depth -= 1
            return .object(JSONObject())
        }
        let base = members.count
        // Key → position from `base`, built only once the object is too large to search linearly.
        var index: [String: Int]?
        while true {
            guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
            let keyStart = position
            guard byte(at: keyStart) == .quote else {
                throw JSONParseError(.unexpectedByte(byte(at: keyStart)), at: keyStart)
            }
            let key = try parseString()
            if let index {
                if index[key] != nil { throw JSONParseError(.duplicateKey(key), at: keyStart) }
            } else if members.containsKey(key, from: base) {
                throw JSONParseError(.duplicateKey(key), at: keyStart)
            }
            skipWhitespace()
            guard position < count else { throw JSONParseError(.unexpectedEnd, at: position) }
            guard byte(at: position) == .colon else {
                throw JSONParseError(.unexpectedByte(byte(at: position)), at: position)
            }
            position += 1
            skipWhitespace()
            members.append(JSONObject.Member(key: key, value: try parseValue()))
            let memberCount = members.count - base
            if index != nil {
                index![key] = memberCount - 1
            } else if memberCount > JSONObject.linearSearchLimit {
                index = members.keyIndex(from: base)
            }
            if try closesAfterMember(.closeBrace) {
                return .object(JSONObject(uniqueEntries: members.popArray(from: base), index: index))
            }
        }
    }

    // MARK: Strings

    /// Parses the string whose opening quote is at `position`.
    private mutating func parseString() throws(JSONParseError) -> String {
        String(decoding: try scanString(), as: UTF8.self)
    }

    /// Reads the string whose opening quote is at `position` and returns its unescaped UTF-8: the input's own
    /// bytes, or for a string with escapes the scratch buffer's, valid until the next string is read. Inlined into
    /// its two callers (`readKey` and `parseString`), which run for every key and string.
    @inline(__always)
    private mutating func scanString() throws(JSONParseError) -> UnsafeRawBufferPointer {
        let quote = position
        let start = quote + 1
        var offset = start
        while true {
            offset = skipPlainBytes(from: offset)
            guard offset < count else { throw JSONParseError(.unexpectedEnd, at: offset) }
            let byte = byte(at: offset)
            if byte == .quote {
                break
            } else if byte == .backslash {
                return try parseEscapedString(quote: quote, escape: offset)
            } else if byte < 0x20 {
                throw JSONParseError(.controlCharacterInString, at: offset)
            } else if byte < 0x80 {
                offset += 1
            } else {
                offset = try validateUTF8Sequence(at: offset)
            }
        }
        let length = offset - start
        guard length <= limits.maximumStringLength else {
            throw JSONParseError(.stringTooLong(limit: limits.maximumStringLength), at: quote)
        }
        position = offset + 1
        return UnsafeRawBufferPointer(start: base + start, count: length)
    }

    /// The offset of the first byte from `offset` that needs a closer look in a string (`"`, `\`, a control
    /// character or a non-ASCII byte), found eight bytes at a time; or, near the end of the input, the offset
    /// where fewer than eight bytes are left.
    @inline(__always)
    private func skipPlainBytes(from offset: Int) -> Int {
        var offset = offset
        while offset + 8 <= count {
            let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            let special = Self.specialBytes(word)
            guard special == 0 else {
                return offset + special.trailingZeroBitCount / 8
            }
            offset += 8
        }
        return offset
    }

    /// The high bit of each byte of `word` (first byte lowest) that is `"`, `\`, below 0x20 or at or above
    /// 0x80, exactly for the first such byte; bytes after it may be flagged falsely.
    @inline(__always)
    private static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // In each term a byte's high bit is set when the byte is, respectively, below 0x20, '"' or '\' (the
        // usual "has zero byte" tricks). A subtraction borrows only out of a byte that matched, so a false
        // flag only ever follows a true one. `& ~word` drops flags of non-ASCII bytes; `| word` flags those.
        let belowSpace = word &- ones &* 0x20
        let quotes = (word ^ (ones &* 0x22)) &- ones
        let backslashes = (word ^ (ones &* 0x5C)) &- ones
        return ((belowSpace | quotes | backslashes) & ~word | word) & highs
    }

    /// Continues a string after its first backslash, collecting the unescaped UTF-8 in `scratch`.
    private mutating func parseEscapedString(quote: Int, escape: Int) throws(JSONParseError) -> UnsafeRawBufferPointer {
        let start = quote + 1
        scratch.removeAll()
        scratch.append(contentsOf: UnsafeRawBufferPointer(start: base + start, count: escape - start))
        var offset = escape
        var runStart = escape
        while true {
            offset = skipPlainBytes(from: offset)
            guard offset < count else { throw JSONParseError(.unexpectedEnd, at: offset) }
            let byte = byte(at: offset)
            if byte == .quote {
                break
            } else if byte == .backslash {
                scratch.append(contentsOf: UnsafeRawBufferPointer(start: base + runStart, count: offset - runStart))
                offset = try appendEscape(at: offset)
                runStart = offset
            } else if byte < 0x20 {
                throw JSONParseError(.controlCharacterInString, at: offset)
            } else if byte < 0x80 {
                offset += 1
            } else {
                offset = try validateUTF8Sequence(at: offset)
            }
            if scratch.count > limits.maximumStringLength {
                throw JSONParseError(.stringTooLong(limit: limits.maximumStringLength), at: quote)
            }
        }
        scratch.append(contentsOf: UnsafeRawBufferPointer(start: base + runStart, count: offset - runStart))
        guard scratch.count <= limits.maximumStringLength else {
            throw JSONParseError(.stringTooLong(limit: limits.maximumStringLength), at: quote)
        }
        position = offset + 1
        return scratch.bytes
    }

    /// Appends the character of the escape whose backslash is at `offset`; returns the offset after it.
    private mutating func appendEscape(at offset: Int) throws(JSONParseError) -> Int {
        guard offset + 1 < count else { throw JSONParseError(.unexpectedEnd, at: offset + 1) }
        let unescaped: UInt8
        switch byte(at: offset + 1) {
        case .quote: unescaped = .quote
        case .backslash: unescaped = .backslash
        case .slash: unescaped = .slash
        case .b: unescaped = 0x08
        case .f: unescaped = 0x0C
        case .n: unescaped = .lineFeed
        case .r: unescaped = .carriageReturn
        case .t: unescaped = .tab
        case .u: return try appendUnicodeEscape(at: offset)
        default: throw JSONParseError(.invalidEscape, at: offset)
        }
        scratch.append(unescaped)
        return offset + 2
    }

    /// Appends the scalar of the `\uXXXX` escape (or surrogate pair of two) at `offset`.
    private mutating func appendUnicodeEscape(at offset: Int) throws(JSONParseError) -> Int {
        let unit = try hexQuad(at: offset)
        var scalar = UInt32(unit)
        var next = offset + 6
        switch unit {
        case 0xD800...0xDBFF:
            // A high surrogate must be followed at once by an escaped low surrogate.
            guard next + 1 < count, byte(at: next) == .backslash, byte(at: next + 1) == .u else {
                throw JSONParseError(.loneSurrogate, at: offset)
            }
            let low = try hexQuad(at: next)
            guard (0xDC00...0xDFFF).contains(low) else { throw JSONParseError(.loneSurrogate, at: offset) }
            scalar = 0x10000 + ((UInt32(unit) - 0xD800) << 10) + (UInt32(low) - 0xDC00)
            next += 6
        case 0xDC00...0xDFFF:
            throw JSONParseError(.loneSurrogate, at: offset)
        default:
            break
        }
        switch scalar {
        case ..<0x80:
            scratch.append(UInt8(scalar))
        case ..<0x800:
            scratch.append(UInt8(0xC0 | scalar >> 6))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        case ..<0x10000:
            scratch.append(UInt8(0xE0 | scalar >> 12))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | scalar >> 18))
            scratch.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            scratch.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | scalar & 0x3F))
        }
        return next
    }

    /// The four hexadecimal digits of the `\u` escape whose backslash is at `offset`.
    private func hexQuad(at offset: Int) throws(JSONParseError) -> UInt16 {
        guard offset + 6 <= count else {
            // Report a bad digit before the end if there is one, the end otherwise.
            for digit in offset + 2..<count where Self.hexValue(byte(at: digit)) == nil {
                throw JSONParseError(.invalidUnicodeEscape, at: offset)
            }
            throw JSONParseError(.unexpectedEnd, at: count)
        }
        var value: UInt16 = 0
        for digit in offset + 2..<offset + 6 {
            guard let nibble = Self.hexValue(byte(at: digit)) else {
                throw JSONParseError(.invalidUnicodeEscape, at: offset)
            }
            value = value << 4 | UInt16(nibble)
        }
        return value
    }

    @inline(__always)
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case .zero ... .nine: return byte - .zero
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Checks the multi-byte UTF-8 sequence whose lead byte is at `offset` (Unicode table 3-7: no overlong
    /// forms, no surrogates, nothing above U+10FFFF); returns the offset after it.
    private func validateUTF8Sequence(at offset: Int) throws(JSONParseError) -> Int {
        let lead = byte(at: offset)
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF:
            length = 2
        case 0xE0:
            length = 3
            secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF:
            length = 3
        case 0xED:
            length = 3
            secondHigh = 0x9F
        case 0xF0:
            length = 4
            secondLow = 0x90
        case 0xF1...0xF3:
            length = 4
        case 0xF4:
            length = 4
            secondHigh = 0x8F
        default:
            throw JSONParseError(.invalidUTF8, at: offset)
        }
        guard offset + length <= count else {
            // A truncated sequence at the very end: invalid if what is there is already wrong.
            for continuation in offset + 1..<count {
                let byte = byte(at: continuation)
                let low = continuation == offset + 1 ? secondLow : 0x80
                let high = continuation == offset + 1 ? secondHigh : 0xBF
                guard byte >= low && byte <= high else { throw JSONParseError(.invalidUTF8, at: offset) }
            }
            throw JSONParseError(.unexpectedEnd, at: count)
        }
        let second = byte(at: offset + 1)
        guard second >= secondLow && second <= secondHigh else { throw JSONParseError(.invalidUTF8, at: offset) }
        for continuation in offset + 2..<offset + length where byte(at: continuation) & 0xC0 != 0x80 {
            throw JSONParseError(.invalidUTF8, at: offset)
        }
        return offset + length
    }

    // MARK: Numbers

    /// Parses the number that starts at `position`.
    ///
    /// Up to 19 significant digits are gathered in a `UInt64` while the grammar is checked. An integer
    /// (no fraction, no exponent) that fits `Int64` is returned as is. Other numbers whose digits fit in
    /// 53 bits with a decimal exponent within ±22 are converted exactly with one multiplication or division
    /// (both operands are exact doubles, so IEEE rounding makes the result correctly rounded); the rest
    /// go to the C library's `strtod`, which rounds correctly.
    ///
    /// One function on purpose: RFC 8259's number grammar read in one pass over the bytes, fuzzed and on every message's path.
    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = position
        var offset = start
        let negative = byte(at: offset) == .minus
        if negative { offset += 1 }

        var significand: UInt64 = 0
        var significantDigits = 0
        var droppedDigits = false
        var exponent = 0

        guard offset < count else { throw JSONParseError(.invalidNumber, at: offset) }
        let first = byte(at: offset)
        if first == .zero {
            offset += 1
            if offset < count && byte(at: offset).isDigit {
                throw JSONParseError(.invalidNumber, at: offset)
            }
        } else if first.isDigit {
            while offset < count {
                let digit = byte(at: offset) &- .zero
                guard digit < 10 else { break }
                if significantDigits < 19 {
                    significand = significand &* 10 &+ UInt64(digit)
                    significantDigits += 1
                } else {
                    droppedDigits = true
                    exponent += 1
                }
                offset += 1
            }
        } else {
            throw JSONParseError(.invalidNumber, at: offset)
        }

        var isInteger = true
        if offset < count && byte(at: offset) == .period {
            isInteger = false
            offset += 1
            guard offset < count && byte(at: offset).isDigit else { throw JSONParseError(.invalidNumber, at: offset) }
            while offset < count {
                let digit = byte(at: offset) &- .zero
                guard digit < 10 else { break }
                if significantDigits < 19 {
                    if significand != 0 || digit != 0 {
                        significand = significand &* 10 &+ UInt64(digit)
                        significantDigits += 1
                    }
                    exponent -= 1
                } else {
                    droppedDigits = true
                }
                offset += 1
            }
        }

        if offset < count && (byte(at: offset) == .e || byte(at: offset) == .upperE) {
            isInteger = false
            offset += 1
            var exponentNegative = false
            if offset < count && (byte(at: offset) == .plus || byte(at: offset) == .minus) {
                exponentNegative = byte(at: offset) == .minus
                offset += 1
            }
            guard offset < count && byte(at: offset).isDigit else { throw JSONParseError(.invalidNumber, at: offset) }
            var written = 0
            while offset < count {
                let digit = byte(at: offset) &- .zero
                guard digit < 10 else { break }
                // Saturate: anything this large is far outside Double's range either way.
                if written < 1_000_000 { written = written * 10 + Int(digit) }
                offset += 1
            }
            exponent += exponentNegative ? -written : written
        }
        position = offset

        if isInteger && !droppedDigits {
            if !negative && significand <= UInt64(Int64.max) {
                return .int(Int64(significand))
            }
            if negative && significand != 0 && significand <= UInt64(Int64.max) + 1 {
                return .int(Int64(bitPattern: 0 &- significand))
            }
            // -0 keeps its sign as a double; larger integers are doubles.
        }
        if !droppedDigits && significand <= 1 << 53 && (-22...22).contains(exponent) {
            var value = Double(significand)
            if exponent < 0 {
                value /= Self.powersOfTen[-exponent]
            } else {
                value *= Self.powersOfTen[exponent]
            }
            return .double(negative ? -value : value)
        }
        if significand == 0 && !droppedDigits {
            return .double(negative ? -0.0 : 0.0)
        }
        let value = Self.strtodC(base + start, count: offset - start)
        guard value.isFinite else { throw JSONParseError(.numberOutOfRange, at: start) }
        return .double(value)
    }

    private static let powersOfTen: [Double] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ]

    /// `strtod` of the `count` bytes at `text` (already checked against the JSON grammar), in the C locale
    /// whatever the process's locale is, on a NUL-terminated copy (on the stack when it is small).
    private static func strtodC(_ text: UnsafeRawPointer, count: Int) -> Double {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: count + 1) { buffer in
            let copy = buffer.baseAddress!
            UnsafeMutableRawPointer(copy).copyMemory(from: text, byteCount: count)
            copy[count] = 0
            let previous = uselocale(cNumericLocale)
            defer { uselocale(previous) }
            return strtod(copy, nil)
        }
    }
}

/// A stack of values that lives for one parse: containers push their contents while they are read and
/// move them, at the final size, into the array they return. One buffer serves every container, so a
/// container costs one allocation (its own storage) instead of one per growth step.
private struct ParseStack<Element>: ~Copyable {
    private var storage: UnsafeMutablePointer<Element>?
    private var capacity = 0
    private(set) var count = 0

    init() {}

    deinit {
        // Elements are left here only when the parse failed.
        storage?.deinitialize(count: count)
        storage?.deallocate()
    }

    mutating func append(_ element: Element) {
        if count == capacity { grow() }
        (storage.unsafelyUnwrapped + count).initialize(to: element)
        count += 1
    }

    /// Moves the elements from `start` to the top into a new array, leaving `start` elements.
    mutating func popArray(from start: Int) -> [Element] {
        let moved = count - start
        guard moved > 0, let storage else { return [] }
        let source = storage + start
        count = start
        // Appending into reserved capacity, rather than `init(unsafeUninitializedCapacity:)`, keeps the array
        // allocation specialized; the unspecialized path looks up the storage class's metadata every time.
        var array: [Element] = []
        array.reserveCapacity(moved)
        for offset in 0..<moved {
            array.append((source + offset).move())
        }
        return array
    }

    private mutating func grow() {
        let newCapacity = Swift.max(16, capacity * 2)
        let newStorage = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        if let storage {
            newStorage.moveInitialize(from: storage, count: count)
            storage.deallocate()
        }
        storage = newStorage
        capacity = newCapacity
    }
}

extension ParseStack where Element == UInt8 {
    /// The bytes held, valid until the stack changes.
    var bytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage, count: count)
    }

    mutating func append(contentsOf bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        while capacity - count < bytes.count { grow() }
        UnsafeMutableRawPointer(storage.unsafelyUnwrapped + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    /// Empties the stack, keeping its storage.
    mutating func removeAll() {
        count = 0
    }
}

extension ParseStack where Element == JSONObject.Member {
    /// Whether a member from `start` to the top has `key`.
    func containsKey(_ key: String, from start: Int) -> Bool {
        guard let storage else { return false }
        for position in start..<count where storage[position].key == key {
            return true
        }
        return false
    }

    /// Key → position from `start`, for the members from `start` to the top.
    func keyIndex(from start: Int) -> [String: Int] {
        var index = [String: Int](minimumCapacity: 2 * (count - start))
        for position in start..<count {
            index[storage.unsafelyUnwrapped[position].key] = position - start
        }
        return index
    }
}

/// The "C" locale for number conversion; created once and never freed or changed.
private nonisolated(unsafe) let cNumericLocale = newlocale(LC_NUMERIC_MASK, "C", nil)

extension UInt8 {
    fileprivate static let tab = UInt8(ascii: "\t")
    fileprivate static let lineFeed = UInt8(ascii: "\n")
    fileprivate static let carriageReturn = UInt8(ascii: "\r")
    fileprivate static let space = UInt8(ascii: " ")
    fileprivate static let quote = UInt8(ascii: "\"")
    fileprivate static let plus = UInt8(ascii: "+")
    fileprivate static let comma = UInt8(ascii: ",")
    fileprivate static let minus = UInt8(ascii: "-")
    fileprivate static let period = UInt8(ascii: ".")
    fileprivate static let slash = UInt8(ascii: "/")
    fileprivate static let zero = UInt8(ascii: "0")
    fileprivate static let nine = UInt8(ascii: "9")
    fileprivate static let colon = UInt8(ascii: ":")
    fileprivate static let upperE = UInt8(ascii: "E")
    fileprivate static let openBracket = UInt8(ascii: "[")
    fileprivate static let backslash = UInt8(ascii: "\\")
    fileprivate static let closeBracket = UInt8(ascii: "]")
    fileprivate static let b = UInt8(ascii: "b")
    fileprivate static let e = UInt8(ascii: "e")
    fileprivate static let f = UInt8(ascii: "f")
    fileprivate static let n = UInt8(ascii: "n")
    fileprivate static let r = UInt8(ascii: "r")
    fileprivate static let t = UInt8(ascii: "t")
    fileprivate static let u = UInt8(ascii: "u")
    fileprivate static let openBrace = UInt8(ascii: "{")
    fileprivate static let closeBrace = UInt8(ascii: "}")

    fileprivate var isDigit: Bool { self &- .zero < 10 }
}

/// Why a JSON text was refused, and where: the byte offset from the start of the input.
///
/// The ``description`` is written for the person who sent the text, for example
/// `invalid JSON at byte 17: duplicate key "title"`, and is safe to return to them in an error response.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public enum Kind: Sendable, Hashable {
        /// The input ended inside a value (or was empty).
        case unexpectedEnd
        /// A byte that cannot start or continue the value being read.
        case unexpectedByte(UInt8)
        /// A backslash followed by something other than `" \ / b f n r t u`.
        case invalidEscape
        /// `\u` not followed by four hexadecimal digits.
        case invalidUnicodeEscape
        /// A `\u` escape of a UTF-16 surrogate that is not part of a high-low pair.
        case loneSurrogate
        /// A byte below 0x20 written raw inside a string (it must be escaped).
        case controlCharacterInString
        /// String bytes that are not well-formed UTF-8 (including overlong forms and encoded surrogates).
        case invalidUTF8
        /// A number that does not follow the JSON grammar (leading zero, missing digits, ...).
        case invalidNumber
        /// A number too large in magnitude for a `Double`.
        case numberOutOfRange
        /// A comma directly before `]` or `}`.
        case trailingComma
        /// The same key twice in one object.
        case duplicateKey(String)
        /// Something other than whitespace after the top-level value.
        case trailingData
        /// Arrays and objects nested deeper than the limit.
        case tooDeep(limit: Int)
        /// A string (or key) longer than the limit, in UTF-8 bytes after unescaping.
        case stringTooLong(limit: Int)
        /// An input longer than the limit, in bytes.
        case inputTooLarge(limit: Int)
    }

    /// What was wrong.
    public var kind: Kind
    /// The byte offset, from the start of the input, where the problem was found.
    public var offset: Int

    /// An error of `kind` at byte `offset`.
    public init(_ kind: Kind, at offset: Int) {
        self.kind = kind
        self.offset = offset
    }

    public var description: String {
        "invalid JSON at byte \(offset): \(reason)"
    }

    private var reason: String {
        switch kind {
        case .unexpectedEnd:
            return "unexpected end of input"
        case .unexpectedByte(let byte):
            if byte > 0x20 && byte < 0x7F {
                return "unexpected character '\(Character(Unicode.Scalar(byte)))'"
            }
            return "unexpected byte 0x\(hex(byte))"
        case .invalidEscape:
            return "invalid escape sequence in string"
        case .invalidUnicodeEscape:
            return "invalid \\u escape (four hexadecimal digits expected)"
        case .loneSurrogate:
            return "unpaired UTF-16 surrogate in \\u escape"
        case .controlCharacterInString:
            return "control character in string (it must be escaped)"
        case .invalidUTF8:
            return "invalid UTF-8 in string"
        case .invalidNumber:
            return "invalid number"
        case .numberOutOfRange:
            return "number out of range"
        case .trailingComma:
            return "trailing comma"
        case .duplicateKey(let key):
            return "duplicate key \(Self.quoted(key))"
        case .trailingData:
            return "unexpected data after the JSON value"
        case .tooDeep(let limit):
            return "arrays and objects nested deeper than \(limit) levels"
        case .stringTooLong(let limit):
            return "string longer than \(limit) bytes"
        case .inputTooLarge(let limit):
            return "input longer than \(limit) bytes"
        }
    }

    private func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }

    /// `key` as a JSON string literal, shortened so that a huge key does not make a huge message.
    private static func quoted(_ key: String) -> String {
        let shown = key.count > 64 ? String(key.prefix(64)) + "…" : key
        return JSONValue.string(shown).jsonString()
    }
}
