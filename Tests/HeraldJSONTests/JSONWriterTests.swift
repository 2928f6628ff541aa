import Testing

@testable import HeraldJSON

@Suite("JSONWriter")
struct JSONWriterTests {
    @Test("scalars")
    func scalars() {
        #expect(JSONValue.null.jsonString() == "null")
        #expect(JSONValue.bool(true).jsonString() == "true")
        #expect(JSONValue.bool(false).jsonString() == "false")
        #expect(JSONValue.int(0).jsonString() == "0")
        #expect(JSONValue.int(7).jsonString() == "7")
        #expect(JSONValue.int(-42).jsonString() == "-42")
        #expect(JSONValue.int(1_234_567_890).jsonString() == "1234567890")
        #expect(JSONValue.int(.max).jsonString() == "9223372036854775807")
        #expect(JSONValue.int(.min).jsonString() == "-9223372036854775808")
    }

    @Test(
        "doubles: shortest round-trip text, always with a fraction or an exponent",
        arguments: [
            (0.1, "0.1"),
            (2.0, "2.0"),
            (-2.0, "-2.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.5, "1.5"),
            (123_456_789.0, "123456789.0"),
            (1e16, "1e+16"),
            (1e300, "1e+300"),
            (1e-7, "1e-07"),
            (0.1 + 0.2, "0.30000000000000004"),
            (Double.leastNonzeroMagnitude, "5e-324"),
            (Double.greatestFiniteMagnitude, "1.7976931348623157e+308"),
            (9_007_199_254_740_992.0, "9007199254740992.0"),
        ]
    )
    func doubles(value: Double, text: String) throws {
        let written = JSONValue.double(value).jsonString()
        #expect(written == text)
        let reparsed = try JSONParser.parse(written)
        #expect(reparsed.doubleValue?.bitPattern == value.bitPattern)
        guard case .double = reparsed else {
            Issue.record("\(written) did not parse back as a double")
            return
        }
    }

    @Test("non-finite doubles, which JSON cannot express, are written as null")
    func nonFinite() {
        #expect(JSONValue.double(.infinity).jsonString() == "null")
        #expect(JSONValue.double(-.infinity).jsonString() == "null")
        #expect(JSONValue.double(.nan).jsonString() == "null")
    }

    @Test("the first byte to escape, found eight at a time, is the one a byte-by-byte search finds, from every start")
    func firstByteToEscapeAgreesWithBytes() {
        func reference(_ bytes: [UInt8], from start: Int) -> Int {
            bytes[start...].firstIndex { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") } ?? bytes.count
        }
        // Plain ASCII and non-ASCII fillers, with one or two bytes to escape anywhere (two: the second one after a
        // first that an earlier start skips).
        for filler: UInt8 in [UInt8(ascii: "x"), 0x7F, 0xC3, 0xFF] {
            for length in 0...24 {
                var cases: [[UInt8]] = [Array(repeating: filler, count: length)]
                for special: UInt8 in [0x22, 0x5C, 0x00, 0x0A, 0x1F] {
                    for position in 0..<length {
                        var bytes = Array(repeating: filler, count: length)
                        bytes[position] = special
                        cases.append(bytes)
                        if position + 3 < length {
                            bytes[position + 3] = 0x22
                            cases.append(bytes)
                        }
                    }
                }
                for bytes in cases {
                    for start in 0...length {
                        let found = bytes.withUnsafeBytes { raw in
                            JSONWriter.firstByteToEscape(
                                in: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: length, from: start)
                        }
                        #expect(found == reference(bytes, from: start), "\(bytes) from \(start)")
                    }
                }
            }
        }
    }

    @Test("a string is its bytes between quotes with exactly the escapes, at every length, a byte to escape anywhere")
    func stringsAtEveryLength() {
        func reference(_ text: String) -> [UInt8] {
            var bytes: [UInt8] = [UInt8(ascii: "\"")]
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), byte]
                case 0x0A: bytes += Array(#"\n"#.utf8)
                case 0x0D: bytes += Array(#"\r"#.utf8)
                case 0x09: bytes += Array(#"\t"#.utf8)
                case 0x08: bytes += Array(#"\b"#.utf8)
                case 0x0C: bytes += Array(#"\f"#.utf8)
                case 0..<0x20:
                    let hex = Array("0123456789abcdef".utf8)
                    bytes += Array(#"\u00"#.utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
                default: bytes.append(byte)
                }
            }
            return bytes + [UInt8(ascii: "\"")]
        }
        // One- to three-byte fillers: the strings are small (in the string's own bytes) and native, the words
        // copied whole and the last one overlapping; one or two characters to escape anywhere.
        for filler: Character in ["x", "\u{7F}", "é", "€"] {
            for length in 0...24 {
                var cases = [String(repeating: filler, count: length)]
                for special: Character in ["\"", "\\", "\u{0}", "\n", "\u{1F}"] {
                    for position in 0..<length {
                        var characters = Array(repeating: filler, count: length)
                        characters[position] = special
                        cases.append(String(characters))
                        if position + 3 < length {
                            characters[position + 3] = "\\"
                            cases.append(String(characters))
                        }
                    }
                }
                for text in cases {
                    #expect(JSONValue.string(text).jsonBytes() == reference(text), "\(Array(text.utf8))")
                    // As a key and a value, after other members: the writer's bytes before it are kept.
                    let object = JSONValue.object(["k": "v", text: .string(text)])
                    let member = reference(text) + [UInt8(ascii: ":")] + reference(text)
                    #expect(object.jsonBytes() == Array(#"{"k":"v","#.utf8) + member + [UInt8(ascii: "}")])
                }
            }
        }
    }

    @Test("strings escape quote, backslash and control characters only")
    func strings() {
        #expect(JSONValue.string("").jsonString() == #""""#)
        #expect(JSONValue.string("plain").jsonString() == #""plain""#)
        #expect(JSONValue.string("\"\\").jsonString() == #""\"\\""#)
        #expect(JSONValue.string("\n\r\t\u{8}\u{C}").jsonString() == #""\n\r\t\b\f""#)
        #expect(JSONValue.string("\u{0}\u{1}\u{1F}\u{B}").jsonString() == #""\u0000\u0001\u001f\u000b""#)
        #expect(JSONValue.string("a/b").jsonString() == #""a/b""#)
        #expect(JSONValue.string("\u{7F}").jsonString() == "\"\u{7F}\"")
        #expect(JSONValue.string("é€😀\u{2028}").jsonString() == "\"é€😀\u{2028}\"")
        #expect(JSONValue.string("é€😀").jsonBytes() == [0x22] + Array("é€😀".utf8) + [0x22])
        #expect(JSONValue.string("run\"run\\run\nrun").jsonString() == #""run\"run\\run\nrun""#)
    }

    @Test("arrays and objects are compact, members in stored order")
    func containers() throws {
        #expect(JSONValue.array([]).jsonString() == "[]")
        #expect(JSONValue.object([:]).jsonString() == "{}")
        #expect(JSONValue.array([1, "a", nil, true, 2.5]).jsonString() == #"[1,"a",null,true,2.5]"#)
        let value: JSONValue = ["z": 1, "a": ["nested": [[], [:]]], "m\"k": "v"]
        #expect(value.jsonString() == #"{"z":1,"a":{"nested":[[],{}]},"m\"k":"v"}"#)
        let reordered = try JSONParser.parse(#" { "b" : 2 , "a" : 1 } "#)
        #expect(reordered.jsonString() == #"{"b":2,"a":1}"#)
    }

    @Test("write(into:) appends to what is already there; the three outputs agree")
    func writeInto() {
        let value: JSONValue = ["message": ["token": "t", "data": ["k": "v"]]]
        var output = Array("prefix ".utf8)
        value.write(into: &output)
        value.write(into: &output)
        let text = #"{"message":{"token":"t","data":{"k":"v"}}}"#
        #expect(output == Array(("prefix " + text + text).utf8))
        #expect(value.jsonBytes() == Array(text.utf8))
        #expect(value.jsonString() == text)
        #expect(value.description == text)
        #expect(value.objectValue?.description == text)
    }

    @Test("text longer than the writer's first buffer (512 bytes) is written whole, escapes on either side of the edge")
    func longText() {
        for length in [510, 511, 512, 513, 1_000, 5_000] {
            let text = String(repeating: "a", count: length) + "\n\"" + String(repeating: "b", count: length)
            let expected = "\"" + String(repeating: "a", count: length) + #"\n\""# + String(repeating: "b", count: length) + "\""
            #expect(JSONValue.string(text).jsonString() == expected)
        }
        let numbers = JSONValue.array((0..<300).map { .int(Int64($0)) })
        #expect(numbers.jsonString() == "[" + (0..<300).map { String($0) }.joined(separator: ",") + "]")
        var members = JSONObject()
        for index in 0..<200 { members["k\(index)"] = .string("v\"\(index)") }
        let object = JSONValue.object(members)
        let objectText = "{" + (0..<200).map { #""k\#($0)":"v\"\#($0)""# }.joined(separator: ",") + "}"
        #expect(object.jsonString() == objectText)
        #expect(object.jsonByteCount == objectText.utf8.count)
        var output = Array(String(repeating: "p", count: 700).utf8)
        object.write(into: &output)
        #expect(output == Array((String(repeating: "p", count: 700) + objectText).utf8))
    }

    @Test("ByteWriter: bytes, literals and strings in order, past its first buffer and from none")
    func byteWriter() {
        for capacity in [0, 1, 7, 64] {
            let text = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
                var writer = ByteWriter(buffer)
                for index in 0..<100 {
                    writer.append(UInt8(ascii: "<"))
                    writer.append("literal" as StaticString)
                    writer.append("é\(index)")
                    Array("bytes".utf8).withUnsafeBufferPointer { writer.append($0) }
                }
                #expect(writer.byteCount == writer.withBytes { $0.count })
                return writer.withBytes { String(decoding: $0, as: UTF8.self) }
            }
            #expect(text == (0..<100).map { "<literalé\($0)bytes" }.joined())
        }
    }

    static let awkwardStrings = [
        "", "a", "0:1700000000000000%abc", "with \"quotes\" and \\ backslash", "tab\tnew\nline\r", "\u{01}\u{1f}\u{7f}",
        "café ☕️ — 東京", String(repeating: "x", count: 40) + "\"" + String(repeating: "y", count: 17), "ends with \\",
    ]

    @Test("the counted length of a string equals what writing it produces, escapes included", arguments: awkwardStrings)
    func escapedLengthMatchesWriting(text: String) {
        #expect(JSONValue.string(text).jsonByteCount == JSONValue.string(text).jsonBytes().count)
        // A string not stored contiguously (bridged or a substring's copy) takes the byte-by-byte path.
        #expect(JSONWriter.escapedLength(String(text[...])) == JSONValue.string(text).jsonBytes().count)
    }
}
