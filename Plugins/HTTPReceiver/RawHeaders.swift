/// A request's header lines as they came from http_parser: every name and value in one byte buffer, with the
/// bounds of each line. Nothing is made per header (no String, no lowercased copy, no dictionary entry): the FCM
/// route only asks for `authorization`; the APNs route, which reads the `apns-*` headers, makes the dictionary.
/// Names compare without regard to ASCII case (http_parser accepts only token characters in names). A name that
/// comes twice answers its last value, as the dictionary did.
struct RawHeaders {
    private var bytes: [UInt8] = []
    private var lines: [(nameStart: Int, nameEnd: Int, valueEnd: Int)] = []
    /// The line being read: where its name starts, and where its value starts once one has come.
    private var open: (nameStart: Int, nameEnd: Int?)?

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
    func value(of name: StaticString) -> String? {
        let wanted = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        for line in lines.reversed() where line.nameEnd - line.nameStart == wanted.count {
            var same = true
            for offset in 0..<wanted.count where bytes[line.nameStart + offset] | 0x20 != wanted[offset] | 0x20 {
                same = false
                break
            }
            if same { return String(decoding: bytes[line.nameEnd..<line.valueEnd], as: UTF8.self) }
        }
        return nil
    }

    /// Every header, names lowercased; a name that came twice has its last value.
    func dictionary() -> [String: String] {
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
