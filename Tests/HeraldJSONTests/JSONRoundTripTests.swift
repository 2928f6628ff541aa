import Foundation
import HeraldTesting
import Testing

@testable import HeraldJSON

/// Random JSON values: every kind, nesting, strings with escapes, control characters and every UTF-8 length.
struct JSONValueGenerator {
    var random: SplitMix64

    mutating func value(depth: Int = 0) -> JSONValue {
        let kinds: UInt64 = depth >= 5 ? 5 : 7
        switch random.next(below: kinds) {
        case 0: return .null
        case 1: return .bool(random.next(below: 2) == 0)
        case 2: return .int(integer())
        case 3: return .double(double())
        case 4: return .string(string())
        case 5:
            return .array((0..<random.next(below: 6)).map { _ in value(depth: depth + 1) })
        default:
            var object = JSONObject()
            // Occasionally large enough to use the object's index.
            let count = random.next(below: 10) == 0 ? 10 + random.next(below: 30) : random.next(below: 6)
            for _ in 0..<count {
                object[string()] = value(depth: depth + 1)
            }
            return .object(object)
        }
    }

    mutating func integer() -> Int64 {
        switch random.next(below: 4) {
        case 0: return Int64(random.next(below: 201)) - 100
        case 1: return [Int64.min, .max, 0, -1, 1 << 53, -(1 << 53) - 1][Int(random.next(below: 6))]
        default: return Int64(bitPattern: random.next())
        }
    }

    mutating func double() -> Double {
        switch random.next(below: 5) {
        case 0:
            // Integral doubles must stay doubles.
            return Double(Int64(random.next(below: 2_000_001)) - 1_000_000)
        case 1:
            return [
                0.0, -0.0, 0.1, 1e300, -1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude,
                .leastNormalMagnitude, 1e22, 1e23, 9_007_199_254_740_994,
            ][Int(random.next(below: 11))]
        case 2:
            return Double(random.next(below: 1_000_000)) / Double(random.next(below: 999) + 1)
        default:
            while true {
                let candidate = Double(bitPattern: random.next())
                if candidate.isFinite { return candidate }
            }
        }
    }

    mutating func string() -> String {
        var scalars = String.UnicodeScalarView()
        for _ in 0..<random.next(below: 24) {
            let value: UInt32
            switch random.next(below: 10) {
            case 0: value = UInt32(random.next(below: 0x20))
            case 1: value = [0x22, 0x5C, 0x2F, 0x7F][Int(random.next(below: 4))]
            case 2: value = 0x80 + UInt32(random.next(below: 0x780))
            case 3:
                // Three-byte scalars, skipping the surrogate range.
                let raw = 0x800 + UInt32(random.next(below: 0x10000 - 0x800 - 0x800))
                value = raw >= 0xD800 ? raw + 0x800 : raw
            case 4: value = 0x10000 + UInt32(random.next(below: 0x100000))
            default: value = 0x20 + UInt32(random.next(below: 0x5F))
            }
            scalars.append(Unicode.Scalar(value)!)
        }
        return String(scalars)
    }
}

/// The folder of sample payloads kept with the message tests (Tests/HeraldTests/Resources/payloads), found from
/// this file's path so that no resource declaration is needed.
func payloadsDirectory(filePath: String = #filePath) -> URL {
    URL(fileURLWithPath: filePath)
        .deletingLastPathComponent()  // HeraldJSONTests
        .deletingLastPathComponent()  // Tests
        .appendingPathComponent("HeraldTests/Resources/payloads", isDirectory: true)
}

@Suite("JSON round trip")
struct JSONRoundTripTests {
    @Test("2,000 generated values survive write → parse unchanged, and write the same bytes again")
    func generatedCorpus() throws {
        var generator = JSONValueGenerator(random: SplitMix64(seed: 0x4845_5241_4C44))
        var kinds = Set<String>()
        for _ in 0..<2_000 {
            let value = generator.value()
            kinds.insert(Self.kind(of: value))
            let bytes = value.jsonBytes()
            let parsed = try JSONParser.parse(bytes)
            #expect(parsed == value)
            // Byte equality also catches what == forgives: the sign of zero and member order.
            #expect(parsed.jsonBytes() == bytes)
        }
        #expect(kinds == ["null", "bool", "int", "double", "string", "array", "object"])
    }

    @Test("generated values also read back through Foundation's JSONSerialization")
    func foundationAgrees() throws {
        var generator = JSONValueGenerator(random: SplitMix64(seed: 0xF0F0))
        for _ in 0..<200 {
            let value: JSONValue = ["v": generator.value()]
            let object = try JSONSerialization.jsonObject(with: Data(value.jsonBytes()))
            #expect(object is [String: Any])
        }
    }

    @Test("mutated and truncated documents never crash: each is a value or an error inside the input")
    func mutations() throws {
        var generator = JSONValueGenerator(random: SplitMix64(seed: 0xBADC0DE))
        var random = SplitMix64(seed: 0x5EED)
        let interesting: [UInt8] = Array(#"{}[],:"\u0123456789.eE+-tfn "#.utf8) + [0x00, 0x1F, 0x80, 0xC3, 0xED, 0xF4, 0xFF]
        var refused = 0
        for _ in 0..<2_000 {
            var bytes = JSONValue.array([generator.value(), generator.value()]).jsonBytes()
            for _ in 0...random.next(below: 3) {
                let position = Int(random.next(below: UInt64(bytes.count)))
                switch random.next(below: 3) {
                case 0: bytes[position] = interesting[Int(random.next(below: UInt64(interesting.count)))]
                case 1: bytes.remove(at: position)
                default: bytes.removeSubrange(position...)
                }
                if bytes.isEmpty { break }
            }
            let value: JSONValue
            do {
                value = try JSONParser.parse(bytes)
            } catch {
                refused += 1
                #expect(error.offset >= 0 && error.offset <= bytes.count)
                continue
            }
            #expect(try JSONParser.parse(value.jsonBytes()) == value)
        }
        #expect(refused > 1_000)
    }

    @Test("escaped input is written back unescaped where JSON allows, with the same value")
    func normalization() throws {
        let value = try JSONParser.parse(#"{"a\u0062":"\u00e9\/\ud83d\ude00\u001F","n":[1E2,-0,0.50]}"#)
        #expect(value.jsonString() == "{\"ab\":\"é/😀\\u001f\",\"n\":[100.0,-0.0,0.5]}")
        #expect(try JSONParser.parse(value.jsonBytes()) == value)
    }

    @Test("the sample payloads parse and round-trip")
    func samplePayloads() throws {
        let directory = payloadsDirectory()
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".json") }
            .sorted()
        #expect(
            names == [
                "apns-provider-alert.json",
                "fcm-v1-data-condition.json",
                "fcm-v1-notification-token.json",
                "fcm-v1-silent-topic.json",
                "seed-alert-apns.json",
            ])
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("README.md").path))
        for name in names {
            let bytes = try Data(contentsOf: directory.appendingPathComponent(name))
            let value = try JSONParser.parse(bytes)
            #expect(value.objectValue != nil, "\(name)")
            #expect(try JSONParser.parse(value.jsonBytes()) == value, "\(name)")
            // Foundation reads the same structure.
            let foundation = try JSONSerialization.jsonObject(with: bytes) as? [String: Any]
            #expect(foundation?.keys.sorted() == value.objectValue?.keys.sorted(), "\(name)")
        }

        let token = try JSONParser.parse(Data(contentsOf: directory.appendingPathComponent("fcm-v1-notification-token.json")))
        #expect(token["message"]?["notification"]?["title"] == "Portugal vs. Denmark")
        #expect(token["message"]?["apns"]?["payload"]?["aps"]?["badge"] == 1)
        #expect(token["message"]?.objectValue?.keys == ["token", "notification", "data", "apns", "fcm_options"])

        let alert = try JSONParser.parse(Data(contentsOf: directory.appendingPathComponent("apns-provider-alert.json")))
        #expect(alert["aps"]?["relevance-score"] == .double(0.5))
        #expect(alert["build"] == "8121")

        let condition = try JSONParser.parse(Data(contentsOf: directory.appendingPathComponent("fcm-v1-data-condition.json")))
        #expect(condition["message"]?["condition"] == "'weather' in topics && ('news' in topics || !('sports' in topics))")
    }

    private static func kind(of value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}
