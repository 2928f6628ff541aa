import Foundation
public import Herald

/// A blocking client over a real Unix or TCP socket, for tests of receivers: send, half-close, read lines or
/// bytes with a 10 s receive timeout, and see end of file.
public final class TestSocketClient {
    public let fd: Int32

    public init(_ address: SocketAddress) throws {
        switch address {
        case .unix(let path):
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { raw in
                let bytes = Array(path.utf8)
                raw.copyBytes(from: bytes.prefix(raw.count - 1))
            }
            let result = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
        case .tcp(_, let port):
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = UInt16(port).bigEndian
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(fd) }

    public func send(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0, errno == EINTR { continue }
            if written <= 0 { return }
            offset += written
        }
    }

    public func halfClose() { shutdown(fd, Int32(SHUT_WR)) }

    /// Bytes read after the last whole line ``readLines(_:)`` returned: the start of the next line.
    private var partialLine: [UInt8] = []

    /// Reads until `count` lines arrived, end of file, or the 10 s receive timeout; returns the whole lines read
    /// (more than `count` when they came together), and at end of file or the timeout what there is of a last one.
    public func readLines(_ count: Int) -> [String] {
        var data = partialLine
        var lines = data.count { $0 == UInt8(ascii: "\n") }
        var buffer = [UInt8](repeating: 0, count: 65536)
        var ended = false
        while lines < count {
            let read = receive(&buffer, buffer.count)
            if read <= 0 {
                ended = true
                break
            }
            data.append(contentsOf: buffer[0..<read])
            lines += buffer[0..<read].count { $0 == UInt8(ascii: "\n") }
        }
        let end = ended ? data.endIndex : (data.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? data.startIndex)
        partialLine = Array(data[end...])
        return String(decoding: data[..<end], as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Reads until `predicate` holds for what was read, end of file, or the receive timeout.
    public func read(until predicate: ([UInt8]) -> Bool) -> [UInt8] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !predicate(data) {
            let read = receive(&buffer, buffer.count)
            if read <= 0 { break }
            data.append(contentsOf: buffer[0..<read])
        }
        return data
    }

    /// Whether the peer closed: a read returns end of file, or the connection was reset (the peer closed while
    /// bytes this client sent were still unread, as when a server hangs up on a client that keeps writing).
    public func readsClosed() -> Bool {
        var byte: UInt8 = 0
        let count = receive(&byte, 1)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// Whether the peer closed (a read returns end of file).
    public func readsEndOfFile() -> Bool {
        var byte: UInt8 = 0
        return receive(&byte, 1) == 0
    }

    /// `recv`, again when a signal interrupted it (EINTR): a process that gets signals while it waits (libFuzzer's
    /// timeout alarm every few seconds, say) would otherwise take an interrupted read for the end of the stream.
    private func receive(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
        while true {
            let read = recv(fd, buffer, count, 0)
            if read < 0, errno == EINTR { continue }
            return read
        }
    }
}
