import Glibc

/// Lines from a pipe, read with poll and a time limit.
public final class LineReader {
    private let fd: Int32
    private var pending: [UInt8] = []

    public init(_ fd: Int32) { self.fd = fd }

    public func line(timeout milliseconds: Int32 = 10_000) -> String? {
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                return line
            }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, milliseconds) > 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &buffer, buffer.count)
            guard count > 0 else { return nil }
            pending += buffer[0..<count]
        }
    }

    /// The bytes read but not yet returned as a line; the reader forgets them (a caller takes over the pipe).
    public func takeBuffered() -> [UInt8] {
        defer { pending = [] }
        return pending
    }
}
