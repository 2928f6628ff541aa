/// An HTTP/1.1 response as ``HTTPClient`` read it.
public struct HTTPResponse: Sendable {
    /// The status code (200, 503, ...).
    public var status: Int
    /// The reason phrase of the status line (informative only).
    public var reason: String
    /// The header fields in the order received, names as sent.
    public var headers: [(name: String, value: String)]
    /// The body, decoded from chunked transfer coding; at most ``HTTPClient/maximumBodyBytes`` are kept.
    public var body: [UInt8]
    /// Whether the body was longer than what is kept in ``body``.
    public var bodyTruncated: Bool

    /// The value of the first header field named `name` (compared without case).
    public func value(of name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// Reads an HTTP/1.1 response from the bytes of a connection, as they come: the status line and header fields,
/// then the body framed as RFC 9112 §6.3 says for the answer to a POST — none for 204 and 304, chunked transfer
/// coding, `Content-Length`, or up to the end of the connection. Interim (1xx) responses are skipped.
struct HTTPResponseParser {
    /// The longest head (status line and header fields) and the longest chunk-size or trailer line.
    static let maximumHeadBytes = 64 * 1024

    private enum Phase {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
    }

    private var phase = Phase.head
    /// Bytes received and not yet parsed (the body is taken out as it comes).
    private var buffer: [UInt8] = []
    private var response = HTTPResponse(status: 0, reason: "", headers: [], body: [], bodyTruncated: false)
    private let maximumBodyBytes: Int

    init(maximumBodyBytes: Int) {
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// Takes the next bytes of the connection; returns the response once it is complete. Throws
    /// ``HTTPClientError/malformedResponse(_:)`` for bytes that are not an HTTP/1.x response.
    mutating func feed(_ bytes: some Collection<UInt8>) throws -> HTTPResponse? {
        if case .done = phase { return response }
        buffer.append(contentsOf: bytes)
        var position = 0
        defer { buffer.removeFirst(position) }
        while true {
            switch phase {
            case .head:
                guard let lines = Self.headLines(in: buffer, from: position) else {
                    if buffer.count - position > Self.maximumHeadBytes {
                        throw HTTPClientError.malformedResponse("the response head is longer than \(Self.maximumHeadBytes) bytes")
                    }
                    return nil
                }
                position = lines.end
                try parseHead(lines.lines)
            case .fixed(let remaining):
                let taken = takeBody(upTo: remaining, at: &position)
                guard taken == remaining else {
                    phase = .fixed(remaining: remaining - taken)
                    return nil
                }
                phase = .done
            case .chunkSize:
                guard let line = try nextLine(at: &position) else { return nil }
                let sizeText = line.prefix { $0 != UInt8(ascii: ";") }.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
                guard !sizeText.isEmpty, sizeText.count <= 15,
                    let size = Int(String(decoding: sizeText, as: UTF8.self), radix: 16), size >= 0
                else {
                    throw HTTPClientError.malformedResponse("bad chunk size line '\(String(decoding: line.prefix(40), as: UTF8.self))'")
                }
                phase = size == 0 ? .trailers : .chunkData(remaining: size)
            case .chunkData(let remaining):
                let taken = takeBody(upTo: remaining, at: &position)
                guard taken == remaining else {
                    phase = .chunkData(remaining: remaining - taken)
                    return nil
                }
                phase = .chunkDataEnd
            case .chunkDataEnd:
                guard let line = try nextLine(at: &position) else { return nil }
                guard line.isEmpty else { throw HTTPClientError.malformedResponse("a chunk is longer than its size says") }
                phase = .chunkSize
            case .trailers:
                guard let line = try nextLine(at: &position) else { return nil }
                if line.isEmpty { phase = .done }  // trailer fields themselves are not kept
            case .untilClose:
                _ = takeBody(upTo: buffer.count - position, at: &position)
                return nil
            case .done:
                return response
            }
        }
    }

    /// The connection ended: the response, when the end of the connection is where it ends; otherwise throws
    /// ``HTTPClientError/connectionClosed(_:)``.
    mutating func finish() throws -> HTTPResponse {
        switch phase {
        case .untilClose, .done:
            phase = .done
            return response
        case .head:
            throw HTTPClientError.connectionClosed(
                buffer.isEmpty
                    ? "the server closed the connection without answering"
                    : "the server closed the connection in the middle of the response head")
        default:
            throw HTTPClientError.connectionClosed(
                "the server closed the connection before the end of the response body (status \(response.status))")
        }
    }

    // MARK: Head

    private mutating func parseHead(_ lines: [ArraySlice<UInt8>]) throws {
        guard let statusLine = lines.first else { throw HTTPClientError.malformedResponse("empty response head") }
        let text = String(decoding: statusLine, as: UTF8.self)
        let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, parts[1].allSatisfy({ $0.isASCII && $0.isNumber }),
            let status = Int(parts[1]), status >= 100
        else {
            throw HTTPClientError.malformedResponse("not an HTTP/1.x status line: '\(text.prefix(80))'")
        }
        var headers: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            if let first = line.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
                // An obsolete folded line continues the previous field's value.
                guard !headers.isEmpty else { throw HTTPClientError.malformedResponse("a folded header line comes first") }
                headers[headers.count - 1].value += " " + Self.trimmed(String(decoding: line, as: UTF8.self))
                continue
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
                throw HTTPClientError.malformedResponse(
                    "a header line without a name and ':': '\(String(decoding: line.prefix(80), as: UTF8.self))'")
            }
            headers.append(
                (
                    name: Self.trimmed(String(decoding: line[..<colon], as: UTF8.self)),
                    value: Self.trimmed(String(decoding: line[(colon + 1)...], as: UTF8.self))
                ))
        }
        if status < 200 {
            guard status != 101 else {
                throw HTTPClientError.malformedResponse("the server switched protocols (101), which was not asked for")
            }
            return  // an interim response (100 Continue, 103 Early Hints): the final one follows
        }
        response = HTTPResponse(
            status: status, reason: parts.count > 2 ? String(parts[2]) : "", headers: headers, body: [], bodyTruncated: false)
        phase = try Self.framing(status: status, headers: headers)
    }

    private static func framing(status: Int, headers: [(name: String, value: String)]) throws -> Phase {
        if status == 204 || status == 304 { return .done }
        let transferCodings = headers.filter { $0.name.lowercased() == "transfer-encoding" }
            .flatMap { $0.value.split(separator: ",").map { trimmed(String($0)).lowercased() } }
        if !transferCodings.isEmpty {
            return transferCodings.last == "chunked" ? .chunkSize : .untilClose
        }
        let lengths = Set(
            headers.filter { $0.name.lowercased() == "content-length" }
                .flatMap { $0.value.split(separator: ",").map { trimmed(String($0)) } })
        guard let text = lengths.first else { return .untilClose }
        guard lengths.count == 1, !text.isEmpty, text.count <= 18, text.allSatisfy({ $0.isASCII && $0.isNumber }), let length = Int(text)
        else {
            throw HTTPClientError.malformedResponse("bad Content-Length '\(lengths.sorted().joined(separator: ", "))'")
        }
        return length == 0 ? .done : .fixed(remaining: length)
    }

    /// The lines of a complete head starting at `start` (line ends `\r\n`, or a bare `\n`), and where the bytes
    /// after it begin; `nil` while the empty line that ends the head has not arrived.
    private static func headLines(in buffer: [UInt8], from start: Int) -> (lines: [ArraySlice<UInt8>], end: Int)? {
        var lines: [ArraySlice<UInt8>] = []
        var lineStart = start
        var index = start
        while index < buffer.count {
            if buffer[index] == UInt8(ascii: "\n") {
                var lineEnd = index
                if lineEnd > lineStart, buffer[lineEnd - 1] == UInt8(ascii: "\r") { lineEnd -= 1 }
                if lineEnd == lineStart {
                    if lines.isEmpty {
                        // Empty lines before a status line are tolerated (RFC 9112 §2.2).
                        lineStart = index + 1
                        index += 1
                        continue
                    }
                    return (lines, index + 1)
                }
                lines.append(buffer[lineStart..<lineEnd])
                lineStart = index + 1
            }
            index += 1
        }
        return nil
    }

    /// The next line (without its end) at `position`, moving past it; `nil` while it is incomplete.
    private func nextLine(at position: inout Int) throws -> ArraySlice<UInt8>? {
        guard let newline = buffer[position...].firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.count - position > Self.maximumHeadBytes {
                throw HTTPClientError.malformedResponse("a chunk-size or trailer line is longer than \(Self.maximumHeadBytes) bytes")
            }
            return nil
        }
        var end = newline
        if end > position, buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        let line = buffer[position..<end]
        position = newline + 1
        return line
    }

    /// Moves up to `count` available body bytes out of the buffer, keeping what fits; returns how many were taken.
    private mutating func takeBody(upTo count: Int, at position: inout Int) -> Int {
        let taken = min(count, buffer.count - position)
        let room = max(0, maximumBodyBytes - response.body.count)
        if taken > room { response.bodyTruncated = true }
        response.body.append(contentsOf: buffer[position..<(position + min(taken, room))])
        position += taken
        return taken
    }

    private static func trimmed(_ text: String) -> String {
        var slice = Substring(text)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
