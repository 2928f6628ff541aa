import Glibc

/// Lines from a pipe, read with poll and a time limit.
public final class LineReader {
    private let fd: Int32
    private var pending: [UInt8] = []

    public init(_ fd: Int32) { self.fd = fd }

    public func line(timeout milliseconds: Int32 = 10_000) -> String? {
        while true {
            if let line = takeLine() { return line }
            guard Self.readable(fd, within: milliseconds), readChunk() else { return nil }
        }
    }

    /// As the synchronous `line(timeout:)`, for an async test: the wait for the pipe to have something is on a thread
    /// of its own (``onOwnThread(_:)``), not on one of the cooperative pool's few threads, which a child slow to start
    /// or to answer (seconds under a sanitizer) would otherwise hold from every other test meanwhile.
    public func line(timeout milliseconds: Int32 = 10_000) async -> String? {
        while true {
            if let line = takeLine() { return line }
            let fd = fd
            // Something to read already: no thread needed.
            if !Self.readable(fd, within: 0) {
                // The work throws nothing, so neither does onOwnThread here.
                guard (try? await onOwnThread { Self.readable(fd, within: milliseconds) }) == true else { return nil }
            }
            guard readChunk() else { return nil }
        }
    }

    /// The bytes read but not yet returned as a line; the reader forgets them (a caller takes over the pipe).
    public func takeBuffered() -> [UInt8] {
        defer { pending = [] }
        return pending
    }

    /// The first whole line of what was read, taken out of it.
    private func takeLine() -> String? {
        guard let newline = pending.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
        let line = String(decoding: pending[..<newline], as: UTF8.self)
        pending.removeSubrange(...newline)
        return line
    }

    /// Reads what the pipe has; `false` at end of file or on an error.
    private func readChunk() -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return false }
        pending += buffer[0..<count]
        return true
    }

    /// Whether `fd` has something to read (or its end) within `milliseconds`.
    private static func readable(_ fd: Int32, within milliseconds: Int32) -> Bool {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, milliseconds) > 0
    }
}
