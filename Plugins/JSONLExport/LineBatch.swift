import Herald

/// The lines of one batch, written one after another into a single growing byte buffer, with where each ends:
/// one allocation per batch instead of one per line, and written to the file without being copied again.
///
/// Writing is unchecked: ``reserve(_:)`` makes room for at least as many bytes as the next writes add (a line's
/// upper bound), and the writes after it store without checking. Not thread-safe: one sink call owns it.
final class LineBatch {
    private(set) var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    /// Bytes written.
    private(set) var count = 0
    /// The end offset of each line (its newline included).
    private(set) var lineEnds: [Int] = []

    init(capacity: Int) {
        self.capacity = max(64, capacity)
        base = UnsafeMutablePointer<UInt8>.allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    var lineCount: Int { lineEnds.count }
    var isEmpty: Bool { lineEnds.isEmpty }

    /// The bytes of lines `range` (whole lines, newlines included).
    func bytes(ofLines range: Range<Int>) -> UnsafeRawBufferPointer {
        let start = range.lowerBound == 0 ? 0 : lineEnds[range.lowerBound - 1]
        let end = range.isEmpty ? start : lineEnds[range.upperBound - 1]
        return UnsafeRawBufferPointer(start: base + start, count: end - start)
    }

    /// The length of line `index`, its newline included.
    func length(ofLine index: Int) -> Int {
        lineEnds[index] - (index == 0 ? 0 : lineEnds[index - 1])
    }

    /// Makes room for `size` more bytes.
    func reserve(_ size: Int) {
        guard count + size > capacity else { return }
        var grown = capacity * 2
        while count + size > grown { grown *= 2 }
        let moved = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        moved.update(from: base, count: count)
        base.deallocate()
        base = moved
        capacity = grown
    }

    /// Ends the line written since the last one (the newline is the caller's).
    func endLine() {
        lineEnds.append(count)
    }

    /// Appends one whole line (with its newline), room made for it.
    func appendLine(_ line: [UInt8]) {
        reserve(line.count)
        line.withUnsafeBufferPointer { append($0) }
        endLine()
    }

    // MARK: Unchecked writes (after reserve)

    func append(_ byte: UInt8) {
        base[count] = byte
        count += 1
    }

    func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        (base + count).update(from: source, count: bytes.count)
        count += bytes.count
    }

    func append(_ bytes: UnsafeRawBufferPointer) {
        append(bytes.assumingMemoryBound(to: UInt8.self))
    }

    func append(_ text: StaticString) {
        append(UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// `value` in decimal (at most 20 bytes).
    func appendDecimal(_ value: Int64) {
        if value < 0 { append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        var index = count + digits
        count = index
        repeat {
            index -= 1
            base[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
    }

    /// `bytes` as a JSON string, quoted, escaped as ``JSONValue`` escapes strings (at most 6 bytes per byte, plus 2).
    func appendJSONString(_ bytes: UnsafeRawBufferPointer) {
        append(UInt8(ascii: "\""))
        appendEscaped(bytes)
        append(UInt8(ascii: "\""))
    }

    /// `bytes` escaped as the inside of a JSON string: `"`, `\` and control characters, the runs between them
    /// copied whole (what ``JSONValue/write(into:)`` writes for a string, without the quotes).
    func appendEscaped(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress else { return }
        var runStart = 0
        while true {
            let index = JSONWriter.firstByteToEscape(in: source, count: bytes.count, from: runStart)
            append(UnsafeRawBufferPointer(start: source + runStart, count: index - runStart))
            guard index < bytes.count else { return }
            let byte = source.load(fromByteOffset: index, as: UInt8.self)
            append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): append(byte)
            case UInt8(ascii: "\n"): append(UInt8(ascii: "n"))
            case UInt8(ascii: "\r"): append(UInt8(ascii: "r"))
            case UInt8(ascii: "\t"): append(UInt8(ascii: "t"))
            case 0x08: append(UInt8(ascii: "b"))
            case 0x0C: append(UInt8(ascii: "f"))
            default:
                append("u00")
                append(UInt8(ascii: "0") + byte >> 4)
                let low = byte & 0xF
                append(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10)
            }
            runStart = index + 1
        }
    }
}
