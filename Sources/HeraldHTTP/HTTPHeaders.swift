/// A request's header fields as they came: every name and value in one byte buffer, with the bounds of each line.
/// Nothing is made per header (no String, no lowercased copy, no dictionary entry): a route that asks for one
/// field (`authorization`) finds it by comparing bytes; one that reads many (the `apns-*` fields) makes
/// ``dictionary()``. Names compare without regard to ASCII case. A name that comes twice answers its last value.
///
/// The HTTP/1.1 session fills it piece by piece as http_parser hands names and values over; an HTTP/2 session
/// appends whole fields with ``append(name:value:)-(String,String)`` or ``append(name:value:)-(UnsafeRawBufferPointer,UnsafeRawBufferPointer)``.
public struct HTTPHeaders: Sendable {
    private var bytes: [UInt8] = []
    private var lines: [(nameStart: Int, nameEnd: Int, valueEnd: Int)] = []
    /// The line being read: where its name starts, and where its value starts once one has come.
    private var open: (nameStart: Int, nameEnd: Int?)?

    public init() {}

    /// Appends a whole field (an HTTP/2 session's decoded header, or a test's).
    public mutating func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        close()
        let nameStart = bytes.count
        bytes.append(contentsOf: name)
        let nameEnd = bytes.count
        bytes.append(contentsOf: value)
        if nameEnd > nameStart { lines.append((nameStart, nameEnd, bytes.count)) }
    }

    /// Appends a whole field.
    public mutating func append(name: String, value: String) {
        var name = name
        var value = value
        name.withUTF8 { name in value.withUTF8 { value in append(name: UnsafeRawBufferPointer(name), value: UnsafeRawBufferPointer(value)) }
        }
    }

    /// How many fields there are.
    public var count: Int { lines.count }

    /// Every field in the order it came, names as sent.
    public var fields: [(name: String, value: String)] {
        lines.map {
            (
                String(decoding: bytes[$0.nameStart..<$0.nameEnd], as: UTF8.self),
                String(decoding: bytes[$0.nameEnd..<$0.valueEnd], as: UTF8.self)
            )
        }
    }

    /// The value of the field `name` (any case), the last one when it came more than once.
    public subscript(name: String) -> String? {
        var name = name
        return name.withUTF8 { wanted in
            guard let line = lines.last(where: { has(UnsafeRawBufferPointer(wanted), $0) }) else { return nil }
            return String(decoding: bytes[line.nameEnd..<line.valueEnd], as: UTF8.self)
        }
    }

    /// Every header line, for the next request (the storage is kept).
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        lines.removeAll(keepingCapacity: true)
        open = nil
    }

    /// A piece of a header name (http_parser may hand one name over in several pieces).
    mutating func appendName(_ piece: UnsafeRawBufferPointer) {
        if let line = open, line.nameEnd != nil { close() }
        if open == nil { open = (bytes.count, nil) }
        bytes.append(contentsOf: piece)
    }

    /// A piece of the value of the name before it.
    mutating func appendValue(_ piece: UnsafeRawBufferPointer) {
        if open == nil { open = (bytes.count, bytes.count) }  // a value with no name: kept nameless, never found
        if open?.nameEnd == nil { open?.nameEnd = bytes.count }
        bytes.append(contentsOf: piece)
    }

    /// Ends the line being read (the headers are complete, or a new name begins).
    mutating func close() {
        guard let line = open else { return }
        open = nil
        let nameEnd = line.nameEnd ?? bytes.count
        if nameEnd > line.nameStart { lines.append((line.nameStart, nameEnd, bytes.count)) }
    }

    /// The value of the header `name` (lowercase letters, digits and `-` only: the comparison folds ASCII case by
    /// setting bit 5, exact for those), the last one when it came more than once.
    public func value(of name: StaticString) -> String? {
        guard let line = lines.last(where: { has(name, $0) }) else { return nil }
        return String(decoding: bytes[line.nameEnd..<line.valueEnd], as: UTF8.self)
    }

    /// How many lines have the header `name` (as in ``value(of:)``).
    public func count(of name: StaticString) -> Int {
        var count = 0
        for line in lines where has(name, line) { count += 1 }
        return count
    }

    /// Whether the last `Host` value is `uri-host [":" port]` as RFC 9112 has it (empty allowed): only the
    /// characters of a registered name, an IP literal and a port, no space, `/`, `@`, `?` or `#`.
    var hasValidHost: Bool {
        guard let line = lines.last(where: { has("host", $0) }) else { return true }
        // http_parser leaves the whitespace after a value in it.
        var end = line.valueEnd
        while end > line.nameEnd, bytes[end - 1] == UInt8(ascii: " ") || bytes[end - 1] == UInt8(ascii: "\t") { end -= 1 }
        for byte in bytes[line.nameEnd..<end] {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                continue
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "%"), UInt8(ascii: ":"): continue
            case UInt8(ascii: "["), UInt8(ascii: "]"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"): continue
            case UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"): continue
            case UInt8(ascii: "="): continue
            default: return false
            }
        }
        return true
    }

    /// Whether `line` is a header `name`.
    private func has(_ name: StaticString, _ line: (nameStart: Int, nameEnd: Int, valueEnd: Int)) -> Bool {
        has(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), line)
    }

    /// Whether `line` is a header named `wanted` (any ASCII case; exact for token characters).
    private func has(_ wanted: UnsafeRawBufferPointer, _ line: (nameStart: Int, nameEnd: Int, valueEnd: Int)) -> Bool {
        guard line.nameEnd - line.nameStart == wanted.count else { return false }
        for offset in 0..<wanted.count where bytes[line.nameStart + offset] | 0x20 != wanted[offset] | 0x20 { return false }
        return true
    }

    /// Every header, names lowercased; a name that came twice has its last value.
    public func dictionary() -> [String: String] {
        var result: [String: String] = [:]
        result.reserveCapacity(lines.count)
        for line in lines {
            let name = String(
                decoding: bytes[line.nameStart..<line.nameEnd].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
            result[name] = String(decoding: bytes[line.nameEnd..<line.valueEnd], as: UTF8.self)
        }
        return result
    }
}
