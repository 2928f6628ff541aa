import HeraldTesting
import Testing

@testable import HeraldJSON

/// One input the parser must refuse, with the error it must give.
struct JSONErrorCase: Sendable, CustomTestStringConvertible {
    let input: [UInt8]
    let kind: JSONParseError.Kind
    let offset: Int

    init(_ text: String, _ kind: JSONParseError.Kind, at offset: Int) {
        self.init(Array(text.utf8), kind, at: offset)
    }

    init(_ bytes: [UInt8], _ kind: JSONParseError.Kind, at offset: Int) {
        self.input = bytes
        self.kind = kind
        self.offset = offset
    }

    var testDescription: String {
        let shown = input.count > 40 ? Array(input.prefix(40)) : input
        let text = String(decoding: shown, as: UTF8.self)
        return text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F && $0 != "\u{FFFD}" })
            ? "'\(text)'\(input.count > 40 ? "…" : "")"
            : shown.map { String($0, radix: 16) }.joined(separator: " ")
    }
}

/// Parses `text`, failing the test with the error if it is refused.
func parseJSON(_ text: String, limits: JSONParser.Limits = .default) throws -> JSONValue {
    try JSONParser.parse(text, limits: limits)
}

/// The error `bytes` is refused with, or `nil` when it parses.
func parseError(_ bytes: [UInt8], limits: JSONParser.Limits = .default) -> JSONParseError? {
    do {
        _ = try JSONParser.parse(bytes, limits: limits)
        return nil
    } catch {
        return error
    }
}

func parseError(_ text: String, limits: JSONParser.Limits = .default) -> JSONParseError? {
    parseError(Array(text.utf8), limits: limits)
}

@Suite("JSONParser")
struct JSONParserTests {
    // MARK: Values

    @Test("literals, and whitespace around the value")
    func literals() throws {
        #expect(try parseJSON("null") == .null)
        #expect(try parseJSON("true") == .bool(true))
        #expect(try parseJSON("false") == .bool(false))
        #expect(try parseJSON(" \t\r\n null \t\r\n") == .null)
    }

    @Test(
        "numbers: integers that fit Int64 are .int, everything else .double",
        arguments: [
            ("0", JSONValue.int(0)),
            ("1", .int(1)),
            ("-1", .int(-1)),
            ("42", .int(42)),
            ("9223372036854775807", .int(.max)),
            ("-9223372036854775808", .int(.min)),
            ("9007199254740993", .int(9_007_199_254_740_993)),
            ("9223372036854775808", .double(9_223_372_036_854_775_808.0)),
            ("-9223372036854775809", .double(-9_223_372_036_854_775_809.0)),
            ("18446744073709551616", .double(18_446_744_073_709_551_616.0)),
            ("123456789012345678901234567890", .double(1.2345678901234568e29)),
            ("1.5", .double(1.5)),
            ("-1.5", .double(-1.5)),
            ("2.0", .double(2.0)),
            ("1e2", .double(100)),
            ("1E2", .double(100)),
            ("1e+2", .double(100)),
            ("1e-2", .double(0.01)),
            ("0.1", .double(0.1)),
            ("0e0", .double(0)),
            ("0.000001", .double(0.000001)),
            ("123.456e-7", .double(123.456e-7)),
            ("1e300", .double(1e300)),
            ("1e-300", .double(1e-300)),
            ("1e-400", .double(0)),
            ("5e-324", .double(Double.leastNonzeroMagnitude)),
            ("2.2250738585072014e-308", .double(Double.leastNormalMagnitude)),
            ("1.7976931348623157e308", .double(Double.greatestFiniteMagnitude)),
            ("0.30000000000000004", .double(0.1 + 0.2)),
            ("1.0000000000000002", .double(1.0.nextUp)),
            ("9007199254740993.0", .double(9_007_199_254_740_992)),
            ("3.14159265358979323846264338327950288", .double(.pi)),
            ("1e22", .double(1e22)),
            ("1e23", .double(1e23)),
        ]
    )
    func numbers(text: String, expected: JSONValue) throws {
        let value = try parseJSON(text)
        #expect(value == expected)
        if case .double(let parsed) = value, case .double(let wanted) = expected {
            #expect(parsed.bitPattern == wanted.bitPattern)
        }
    }

    @Test("-0 and -0.0 are the double -0.0, sign kept")
    func negativeZero() throws {
        for text in ["-0", "-0.0", "-0e5"] {
            let value = try parseJSON(text)
            #expect(value.doubleValue?.bitPattern == (-0.0).bitPattern, "\(text)")
        }
        #expect(try parseJSON("0") == .int(0))
    }

    @Test("random decimal texts convert exactly as Swift's own Double(String)")
    func numbersMatchStandardLibrary() throws {
        var random = SplitMix64(seed: 0x5EED_0001)
        for _ in 0..<5_000 {
            var text = random.next(below: 2) == 0 ? "-" : ""
            let integerDigits = 1 + Int(random.next(below: 22))
            for position in 0..<integerDigits {
                let digit =
                    position == 0
                    ? (integerDigits == 1 ? random.next(below: 10) : 1 + random.next(below: 9))
                    : random.next(below: 10)
                text += String(digit)
            }
            if random.next(below: 2) == 0 {
                text += "."
                for _ in 0..<1 + Int(random.next(below: 20)) { text += String(random.next(below: 10)) }
            }
            if random.next(below: 2) == 0 {
                text += ["e", "E", "e+", "e-", "E-"][Int(random.next(below: 5))]
                text += String(random.next(below: 330))
            }
            let expected = Double(text)!
            guard expected.isFinite else {
                #expect(parseError(text) == JSONParseError(.numberOutOfRange, at: 0), "\(text)")
                continue
            }
            let value = try parseJSON(text)
            if case .int(let integer) = value {
                #expect(Int64(text) == integer, "\(text)")
            } else {
                #expect(value.doubleValue?.bitPattern == expected.bitPattern, "\(text)")
            }
        }
    }

    @Test(
        "strings: escapes, \\u escapes, surrogate pairs, raw UTF-8",
        arguments: [
            (#""""#, ""),
            (#""abc""#, "abc"),
            (#""\"\\\/\b\f\n\r\t""#, "\"\\/\u{8}\u{C}\n\r\t"),
            (#""\u0000""#, "\u{0}"),
            (#""a\u0000b""#, "a\u{0}b"),
            (#""\u00e9\u00E9""#, "éé"),
            (#""\u20AC""#, "€"),
            (#""\ud83d\ude00""#, "😀"),
            (#""\uD83D\uDE00""#, "😀"),
            (#""\uFFFF""#, "\u{FFFF}"),
            (#""é€😀""#, "é€😀"),
            (#""a/b""#, "a/b"),
            ("\"\u{7F}\"", "\u{7F}"),
            (#""Portugal vs. Denmark: \"great match!\"""#, "Portugal vs. Denmark: \"great match!\""),
            (#""long text before the escape\nand after it""#, "long text before the escape\nand after it"),
        ]
    )
    func strings(text: String, expected: String) throws {
        #expect(try parseJSON(text) == .string(expected))
    }

    @Test("every position of an escape, a multi-byte character or a control byte around the 8-byte scan")
    func stringPositions() throws {
        for length in 1..<26 {
            for position in 0..<length {
                let before = String(repeating: "a", count: position)
                let after = String(repeating: "b", count: length - position - 1)
                #expect(try parseJSON("\"\(before)\\n\(after)\"") == .string(before + "\n" + after))
                #expect(try parseJSON("\"\(before)é\(after)\"") == .string(before + "é" + after))
                #expect(try parseJSON("\"\(before)😀\(after)\"") == .string(before + "😀" + after))
                #expect(try parseJSON("[\"\(before)\",\"\(after)\"]") == .array([.string(before), .string(after)]))
                let control = parseError("\"\(before)\u{1}\(after)\"")
                #expect(control == JSONParseError(.controlCharacterInString, at: 1 + position))
                let invalid = parseError(Array("\"\(before)".utf8) + [0xC0, 0xAF] + Array("\(after)\"".utf8))
                #expect(invalid == JSONParseError(.invalidUTF8, at: 1 + position))
                let unterminated = parseError("\"\(before)\(after)")
                #expect(unterminated == JSONParseError(.unexpectedEnd, at: length))
            }
        }
    }

    @Test("arrays and objects, nested, keep their order")
    func containers() throws {
        #expect(try parseJSON("[]") == .array([]))
        #expect(try parseJSON("{}") == .object([:]))
        #expect(try parseJSON("[ ]") == .array([]))
        #expect(try parseJSON("{ \n}") == .object([:]))
        #expect(try parseJSON("[1,\"a\",null,true,[],{}]") == [1, "a", nil, true, [], [:]])
        let value = try parseJSON(#" { "b" : [ 1 , { "c" : [ [ ] ] } ] , "a" : { } } "#)
        #expect(value == ["b": [1, ["c": [[]]]], "a": [:]])
        #expect(value.objectValue?.keys == ["b", "a"])
        #expect(value["b"]?.arrayValue?[1]["c"] == [[]])
    }

    @Test("an object with many members: lookups and the duplicate check use the index")
    func largeObject() throws {
        let members = (0..<1_000).map { "\"key\($0)\":\($0)" }
        let value = try parseJSON("{" + members.joined(separator: ",") + "}")
        let object = try #require(value.objectValue)
        #expect(object.count == 1_000)
        #expect(object["key0"] == 0)
        #expect(object["key999"] == 999)
        #expect(object.keys == (0..<1_000).map { "key\($0)" })
        let duplicated = "{" + members.joined(separator: ",") + ",\"key500\":1}"
        let offset = duplicated.utf8.count - "\"key500\":1}".utf8.count
        #expect(parseError(duplicated) == JSONParseError(.duplicateKey("key500"), at: offset))
    }

    @Test("the convenience entry points read the same bytes")
    func entryPoints() throws {
        let text = #"{"a":[1,2.5,"é"]}"#
        let expected: JSONValue = ["a": [1, 2.5, "é"]]
        #expect(try JSONParser.parse(text) == expected)
        #expect(try JSONParser.parse(Array(text.utf8)) == expected)
        #expect(try JSONParser.parse(Array(("xx" + text).utf8).dropFirst(2)) == expected)
        #expect(try JSONParser.parse(text.utf8.lazy.map { $0 }) == expected)
        let fromRaw = try Array(text.utf8).withUnsafeBytes { buffer in try JSONParser.parse(buffer) }
        #expect(fromRaw == expected)
        #expect(throws: JSONParseError(.unexpectedByte(UInt8(ascii: "x")), at: 0)) {
            try JSONParser.parse("x".utf8.lazy.map { $0 })
        }
    }

    // MARK: Errors

    static let errorCases: [JSONErrorCase] = [
        // End of input.
        JSONErrorCase("", .unexpectedEnd, at: 0),
        JSONErrorCase("   ", .unexpectedEnd, at: 3),
        JSONErrorCase("[", .unexpectedEnd, at: 1),
        JSONErrorCase("[1", .unexpectedEnd, at: 2),
        JSONErrorCase("[1,", .unexpectedEnd, at: 3),
        JSONErrorCase("{", .unexpectedEnd, at: 1),
        JSONErrorCase(#"{"a""#, .unexpectedEnd, at: 4),
        JSONErrorCase(#"{"a":"#, .unexpectedEnd, at: 5),
        JSONErrorCase(#"{"a":1"#, .unexpectedEnd, at: 6),
        JSONErrorCase(#"{"a":1,"#, .unexpectedEnd, at: 7),
        JSONErrorCase(#""abc"#, .unexpectedEnd, at: 4),
        JSONErrorCase(#""\"#, .unexpectedEnd, at: 2),
        JSONErrorCase(#""\u12"#, .unexpectedEnd, at: 5),
        JSONErrorCase("nul", .unexpectedEnd, at: 3),
        JSONErrorCase([0x22, 0xE2, 0x82], .unexpectedEnd, at: 3),
        // Unexpected bytes.
        JSONErrorCase("nulx", .unexpectedByte(UInt8(ascii: "x")), at: 3),
        JSONErrorCase("[truex]", .unexpectedByte(UInt8(ascii: "x")), at: 5),
        JSONErrorCase("tru e", .unexpectedByte(UInt8(ascii: " ")), at: 3),
        JSONErrorCase("True", .unexpectedByte(UInt8(ascii: "T")), at: 0),
        JSONErrorCase(#"{"a" 1}"#, .unexpectedByte(UInt8(ascii: "1")), at: 5),
        JSONErrorCase(#"{"a":1 "b":2}"#, .unexpectedByte(UInt8(ascii: "\"")), at: 7),
        JSONErrorCase("[1 2]", .unexpectedByte(UInt8(ascii: "2")), at: 3),
        JSONErrorCase("[1:2]", .unexpectedByte(UInt8(ascii: ":")), at: 2),
        JSONErrorCase("{1:2}", .unexpectedByte(UInt8(ascii: "1")), at: 1),
        JSONErrorCase("{'a':1}", .unexpectedByte(UInt8(ascii: "'")), at: 1),
        JSONErrorCase("{a:1}", .unexpectedByte(UInt8(ascii: "a")), at: 1),
        JSONErrorCase("[,1]", .unexpectedByte(UInt8(ascii: ",")), at: 1),
        JSONErrorCase("[1,,2]", .unexpectedByte(UInt8(ascii: ",")), at: 3),
        JSONErrorCase("{,}", .unexpectedByte(UInt8(ascii: ",")), at: 1),
        JSONErrorCase("[}", .unexpectedByte(UInt8(ascii: "}")), at: 1),
        JSONErrorCase("'a'", .unexpectedByte(UInt8(ascii: "'")), at: 0),
        JSONErrorCase("NaN", .unexpectedByte(UInt8(ascii: "N")), at: 0),
        JSONErrorCase("Infinity", .unexpectedByte(UInt8(ascii: "I")), at: 0),
        JSONErrorCase(".5", .unexpectedByte(UInt8(ascii: ".")), at: 0),
        JSONErrorCase("+1", .unexpectedByte(UInt8(ascii: "+")), at: 0),
        JSONErrorCase("/* comment */ 1", .unexpectedByte(UInt8(ascii: "/")), at: 0),
        JSONErrorCase("[1 /* comment */]", .unexpectedByte(UInt8(ascii: "/")), at: 3),
        JSONErrorCase("\u{C}1", .unexpectedByte(0x0C), at: 0),
        JSONErrorCase("[1,\u{A0}2]", .unexpectedByte(0xC2), at: 3),
        JSONErrorCase([0xEF, 0xBB, 0xBF, 0x31], .unexpectedByte(0xEF), at: 0),
        JSONErrorCase([0xC3, 0xA9], .unexpectedByte(0xC3), at: 0),
        // Trailing commas.
        JSONErrorCase("[1,]", .trailingComma, at: 2),
        JSONErrorCase("[1, ]", .trailingComma, at: 2),
        JSONErrorCase(#"{"a":1,}"#, .trailingComma, at: 6),
        JSONErrorCase(#"{"a":1 , }"#, .trailingComma, at: 7),
        // Numbers.
        JSONErrorCase("01", .invalidNumber, at: 1),
        JSONErrorCase("-01", .invalidNumber, at: 2),
        JSONErrorCase("00", .invalidNumber, at: 1),
        JSONErrorCase("1.", .invalidNumber, at: 2),
        JSONErrorCase("1.e3", .invalidNumber, at: 2),
        JSONErrorCase("-", .invalidNumber, at: 1),
        JSONErrorCase("[-]", .invalidNumber, at: 2),
        JSONErrorCase("-a", .invalidNumber, at: 1),
        JSONErrorCase("-Infinity", .invalidNumber, at: 1),
        JSONErrorCase("1e", .invalidNumber, at: 2),
        JSONErrorCase("1e+", .invalidNumber, at: 3),
        JSONErrorCase("1E-x", .invalidNumber, at: 3),
        JSONErrorCase("1E400", .numberOutOfRange, at: 0),
        JSONErrorCase("-1e309", .numberOutOfRange, at: 0),
        JSONErrorCase("[1, 1e999999999999999]", .numberOutOfRange, at: 4),
        JSONErrorCase("1" + String(repeating: "0", count: 309), .numberOutOfRange, at: 0),
        // Escapes.
        JSONErrorCase(#""\x""#, .invalidEscape, at: 1),
        JSONErrorCase(#""ab\'""#, .invalidEscape, at: 3),
        JSONErrorCase(#""\U0041""#, .invalidEscape, at: 1),
        JSONErrorCase(#""\u12""#, .invalidUnicodeEscape, at: 1),
        JSONErrorCase(#""\u12G4""#, .invalidUnicodeEscape, at: 1),
        JSONErrorCase(#""\u-123""#, .invalidUnicodeEscape, at: 1),
        JSONErrorCase(#""\ud83d\u12""#, .invalidUnicodeEscape, at: 7),
        // Surrogates.
        JSONErrorCase(#""\ud800""#, .loneSurrogate, at: 1),
        JSONErrorCase(#""\udc00""#, .loneSurrogate, at: 1),
        JSONErrorCase(#""a\ud83d""#, .loneSurrogate, at: 2),
        JSONErrorCase(#""\ud800\u0041""#, .loneSurrogate, at: 1),
        JSONErrorCase(#""\ud800\ud800""#, .loneSurrogate, at: 1),
        JSONErrorCase(#""\ud800\n""#, .loneSurrogate, at: 1),
        JSONErrorCase(#""\ude00\ud83d""#, .loneSurrogate, at: 1),
        // Control characters.
        JSONErrorCase("\"a\tb\"", .controlCharacterInString, at: 2),
        JSONErrorCase("\"a\nb\"", .controlCharacterInString, at: 2),
        JSONErrorCase("\"\u{0}\"", .controlCharacterInString, at: 1),
        JSONErrorCase("\"\u{1F}\"", .controlCharacterInString, at: 1),
        JSONErrorCase("\"\\n\t\"", .controlCharacterInString, at: 3),
        // UTF-8.
        JSONErrorCase([0x22, 0xC3, 0x28, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xC0, 0xAF, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xC1, 0xBF, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xE0, 0x80, 0xAF, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xED, 0xA0, 0x80, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xF5, 0x80, 0x80, 0x80, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0x61, 0x80, 0x22], .invalidUTF8, at: 2),
        JSONErrorCase([0x22, 0xFF, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xE2, 0x82, 0x22], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0xE2, 0x28], .invalidUTF8, at: 1),
        JSONErrorCase([0x22, 0x5C, 0x6E, 0xC3, 0x28, 0x22], .invalidUTF8, at: 3),
        // Duplicate keys.
        JSONErrorCase(#"{"title":1,"title":2}"#, .duplicateKey("title"), at: 11),
        JSONErrorCase(#"{"a":1,"\u0061":2}"#, .duplicateKey("a"), at: 7),
        JSONErrorCase(#"{"a":{"b":1,"b":1}}"#, .duplicateKey("b"), at: 12),
        // Trailing data.
        JSONErrorCase("1 2", .trailingData, at: 2),
        JSONErrorCase("truex", .trailingData, at: 4),
        JSONErrorCase("{} x", .trailingData, at: 3),
        JSONErrorCase("[]]", .trailingData, at: 2),
        JSONErrorCase("[1] // comment", .trailingData, at: 4),
        JSONErrorCase("\"a\"\"b\"", .trailingData, at: 3),
        JSONErrorCase("1\u{0}", .trailingData, at: 1),
    ]

    @Test("refused inputs give the right error at the right byte", arguments: errorCases)
    func errors(_ errorCase: JSONErrorCase) {
        #expect(parseError(errorCase.input) == JSONParseError(errorCase.kind, at: errorCase.offset))
    }

    @Test("a value with nested JSON text in a string is just a string")
    func nestedTextIsInert() throws {
        #expect(try parseJSON(#""{\"a\":1,}""#) == .string(#"{"a":1,}"#))
    }

    // MARK: Limits

    @Test("nesting: the default depth of 64 is allowed, 65 is refused at the 65th bracket")
    func depthLimit() throws {
        let atLimit = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(try parseJSON(atLimit).arrayValue != nil)
        let objects = String(repeating: #"{"a":"#, count: 64) + "1" + String(repeating: "}", count: 64)
        #expect(try parseJSON(objects)["a"] != nil)

        let overLimit = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(parseError(overLimit) == JSONParseError(.tooDeep(limit: 64), at: 64))
        let objectsOver = String(repeating: #"{"a":"#, count: 65) + "1" + String(repeating: "}", count: 65)
        #expect(parseError(objectsOver) == JSONParseError(.tooDeep(limit: 64), at: 64 * 5))
        // Depth is nesting, not the number of containers.
        let wide = "[" + Array(repeating: "[[]]", count: 1_000).joined(separator: ",") + "]"
        #expect(try parseJSON(wide, limits: .init(maximumDepth: 3)).arrayValue?.count == 1_000)
        #expect(parseError("[[[]]]", limits: .init(maximumDepth: 2)) == JSONParseError(.tooDeep(limit: 2), at: 2))
        #expect(try parseJSON("1", limits: .init(maximumDepth: 0)) == 1)
        #expect(parseError("[]", limits: .init(maximumDepth: 0)) == JSONParseError(.tooDeep(limit: 0), at: 0))
        // A deep hostile input fails quickly instead of exhausting the stack.
        let hostile = String(repeating: "[", count: 1_000_000)
        #expect(parseError(hostile) == JSONParseError(.tooDeep(limit: 64), at: 64))
    }

    @Test("string length is counted in UTF-8 bytes after unescaping, for values and keys")
    func stringLimit() throws {
        let limits = JSONParser.Limits(maximumStringLength: 4)
        #expect(try parseJSON(#""abcd""#, limits: limits) == "abcd")
        #expect(try parseJSON(#""\u00e9\u00e9""#, limits: limits) == "éé")
        #expect(try parseJSON(#""a\nbc""#, limits: limits) == "a\nbc")
        #expect(parseError(#""abcde""#, limits: limits) == JSONParseError(.stringTooLong(limit: 4), at: 0))
        #expect(parseError(#"["ééé"]"#, limits: limits) == JSONParseError(.stringTooLong(limit: 4), at: 1))
        #expect(parseError(#""ab\ncd""#, limits: limits) == JSONParseError(.stringTooLong(limit: 4), at: 0))
        #expect(parseError(#""abcd\n""#, limits: limits) == JSONParseError(.stringTooLong(limit: 4), at: 0))
        #expect(parseError(#"{"abcde":1}"#, limits: limits) == JSONParseError(.stringTooLong(limit: 4), at: 1))

        let megabyte = String(repeating: "x", count: 1 << 20)
        #expect(try parseJSON("\"\(megabyte)\"").stringValue?.utf8.count == 1 << 20)
        #expect(parseError("\"\(megabyte)y\"") == JSONParseError(.stringTooLong(limit: 1 << 20), at: 0))
    }

    @Test("input length is checked before anything is read")
    func inputLimit() throws {
        let limits = JSONParser.Limits(maximumInputLength: 4)
        #expect(try parseJSON("1234", limits: limits) == 1234)
        #expect(parseError("12345", limits: limits) == JSONParseError(.inputTooLarge(limit: 4), at: 4))
        #expect(parseError("[[[[[", limits: limits) == JSONParseError(.inputTooLarge(limit: 4), at: 4))

        let large = [UInt8](repeating: UInt8(ascii: " "), count: 4 << 20) + [UInt8(ascii: "1")]
        #expect(parseError(large) == JSONParseError(.inputTooLarge(limit: 4 << 20), at: 4 << 20))
        #expect(try JSONParser.parse(large.dropLast(2) + [UInt8(ascii: "1")]) == 1)
    }

    // MARK: Messages

    @Test("error descriptions name the byte and the problem")
    func descriptions() {
        #expect(parseError(#"{"title":1,"title":2}"#)?.description == #"invalid JSON at byte 11: duplicate key "title""#)
        #expect(parseError("[1,]")?.description == "invalid JSON at byte 2: trailing comma")
        #expect(parseError("[1 x]")?.description == "invalid JSON at byte 3: unexpected character 'x'")
        #expect(parseError([0xC3])?.description == "invalid JSON at byte 0: unexpected byte 0xC3")
        #expect(parseError("[")?.description == "invalid JSON at byte 1: unexpected end of input")
        #expect(parseError(#"{"a\nb":1,"a\nb":2}"#)?.description == #"invalid JSON at byte 10: duplicate key "a\nb""#)
        let longKey = String(repeating: "k", count: 100)
        let description = parseError("{\"\(longKey)\":1,\"\(longKey)\":2}")?.description ?? ""
        #expect(description.hasSuffix(#"duplicate key ""# + String(repeating: "k", count: 64) + #"…""#))
        #expect(
            JSONParseError(.tooDeep(limit: 64), at: 64).description
                == "invalid JSON at byte 64: arrays and objects nested deeper than 64 levels")
    }
}

@Suite("JSONValue and JSONObject")
struct JSONValueTests {
    @Test("object equality and hashing do not depend on member order")
    func orderIndependentEquality() throws {
        let first = try parseJSON(#"{"a":1,"b":{"x":[1,2],"y":null},"c":"s"}"#)
        let second = try parseJSON(#"{"c":"s","b":{"y":null,"x":[1,2]},"a":1}"#)
        #expect(first == second)
        #expect(first.hashValue == second.hashValue)
        #expect(Set([first, second]).count == 1)
        #expect(first.objectValue?.keys != second.objectValue?.keys)
        // Arrays do depend on order, and values must match.
        #expect(try parseJSON("[1,2]") != parseJSON("[2,1]"))
        #expect(try parseJSON(#"{"a":1}"#) != parseJSON(#"{"a":2}"#))
        #expect(try parseJSON(#"{"a":1}"#) != parseJSON(#"{"a":1,"b":1}"#))
        #expect(try parseJSON(#"{"a":1}"#) != parseJSON(#"{"b":1}"#))
        // Large objects (with an index) compare the same way.
        let keys = (0..<100).map { "k\($0)" }
        let forward = JSONObject(uniqueKeysWithValues: keys.map { ($0, JSONValue.string($0)) })
        let backward = JSONObject(uniqueKeysWithValues: keys.reversed().map { ($0, JSONValue.string($0)) })
        #expect(forward == backward)
        #expect(forward.hashValue == backward.hashValue)
    }

    @Test("1 and 1.0 are different values; intValue reads both")
    func numberKinds() {
        #expect(JSONValue.int(1) != .double(1))
        #expect(JSONValue.double(3).intValue == 3)
        #expect(JSONValue.double(3.5).intValue == nil)
        #expect(JSONValue.double(1e300).intValue == nil)
        #expect(JSONValue.int(3).doubleValue == 3)
        #expect(JSONValue.string("3").intValue == nil)
    }

    @Test("accessors return nil for the wrong kind")
    func accessors() throws {
        let value = try parseJSON(#"{"s":"x","i":1,"d":1.5,"b":true,"n":null,"a":[1],"o":{"k":"v"}}"#)
        #expect(value["s"]?.stringValue == "x")
        #expect(value["i"]?.intValue == 1)
        #expect(value["d"]?.doubleValue == 1.5)
        #expect(value["b"]?.boolValue == true)
        #expect(value["n"]?.isNull == true)
        #expect(value["a"]?.arrayValue == [1])
        #expect(value["o"]?.objectValue == ["k": "v"])
        #expect(value["o"]?["k"] == "v")
        #expect(value["missing"] == nil)
        #expect(value["s"]?["k"] == nil)
        #expect(value["s"]?.intValue == nil)
        #expect(value["i"]?.stringValue == nil)
        #expect(value["i"]?.boolValue == nil)
        #expect(value["b"]?.isNull == false)
        #expect(value["a"]?.objectValue == nil)
        #expect(value["o"]?.arrayValue == nil)
    }

    @Test("literals build the matching cases")
    func literals() {
        let value: JSONValue = ["n": nil, "b": false, "i": -3, "d": 0.25, "s": "t", "a": [1, "x"], "o": ["k": [:]]]
        #expect(
            value
                == .object(
                    JSONObject(uniqueKeysWithValues: [
                        ("n", .null), ("b", .bool(false)), ("i", .int(-3)), ("d", .double(0.25)), ("s", .string("t")),
                        ("a", .array([.int(1), .string("x")])), ("o", .object(["k": .object(JSONObject())])),
                    ])))
        #expect(value.objectValue?.keys == ["n", "b", "i", "d", "s", "a", "o"])
    }

    @Test("subscript set replaces in place, appends new keys, and nil removes")
    func objectMutation() {
        var object: JSONObject = ["a": 1, "b": 2, "c": 3]
        object["b"] = "two"
        #expect(object.keys == ["a", "b", "c"])
        #expect(object["b"] == "two")
        object["d"] = 4
        #expect(object.keys == ["a", "b", "c", "d"])
        object["a"] = nil
        #expect(object.keys == ["b", "c", "d"])
        #expect(object.removeValue(forKey: "c") == 3)
        #expect(object.removeValue(forKey: "c") == nil)
        #expect(object.keys == ["b", "d"])
        #expect(object.count == 2)
        #expect(!object.isEmpty)
        #expect(JSONObject().isEmpty)
        #expect(Array(object.map(\.key)) == ["b", "d"])

        // Across the index threshold, both ways.
        var large = JSONObject()
        for number in 0..<40 { large["k\(number)"] = .int(Int64(number)) }
        for number in stride(from: 0, to: 40, by: 2) { large["k\(number)"] = nil }
        #expect(large.count == 20)
        #expect(large.keys == stride(from: 1, to: 40, by: 2).map { "k\($0)" })
        for number in 0..<40 { #expect(large["k\(number)"] == (number % 2 == 1 ? .int(Int64(number)) : nil)) }
        for number in stride(from: 1, to: 35, by: 2) { large.removeValue(forKey: "k\(number)") }
        #expect(large.keys == ["k35", "k37", "k39"])
        large["k37"] = "x"
        #expect(large == ["k39": 39, "k37": "x", "k35": 35])
    }

    @Test("merge: the other object wins, nested objects merge, new keys are appended")
    func merge() throws {
        var userInfo = try #require(
            parseJSON(
                #"""
                {"aps":{"alert":{"title":"T","body":"B"},"badge":1},"customKey":"customValue","list":[1,2]}
                """#
            ).objectValue)
        let payload = try #require(
            parseJSON(
                #"""
                {"aps":{"alert":{"body":"B2","subtitle":"S"},"sound":"default"},"list":[3],"extra":{"x":1}}
                """#
            ).objectValue)
        let merged = userInfo.merging(payload)
        userInfo.merge(payload)
        #expect(userInfo == merged)
        #expect(
            JSONValue.object(userInfo) == [
                "aps": [
                    "alert": ["title": "T", "body": "B2", "subtitle": "S"],
                    "badge": 1,
                    "sound": "default",
                ],
                "customKey": "customValue",
                "list": [3],
                "extra": ["x": 1],
            ])
        #expect(userInfo.keys == ["aps", "customKey", "list", "extra"])
        #expect(userInfo["aps"]?.objectValue?.keys == ["alert", "badge", "sound"])
        #expect(userInfo["aps"]?["alert"]?.objectValue?.keys == ["title", "body", "subtitle"])

        // A non-object replaces an object and the other way round.
        var replaced: JSONObject = ["a": ["x": 1], "b": 2]
        replaced.merge(["a": 5, "b": ["y": 2]])
        #expect(replaced == ["a": 5, "b": ["y": 2]])
        // Merging an empty object changes nothing; merging into an empty object copies.
        #expect(replaced.merging([:]) == replaced)
        #expect(JSONObject().merging(replaced) == replaced)
    }
}
