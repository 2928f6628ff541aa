import CLibUV
import Glibc

/// Where a stream server listens or a connection goes: a TCP host and port, or a Unix domain socket path.
public enum SocketAddress: Sendable, Hashable, CustomStringConvertible {
    /// A numeric IPv4 or IPv6 address (`127.0.0.1`, `::1`, `0.0.0.0`; `localhost` means `127.0.0.1`) and a port.
    /// Port 0 asks the system for a free port when listening.
    case tcp(host: String, port: Int)
    /// A filesystem path for a Unix domain socket (at most 107 bytes).
    case unix(path: String)

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }

    /// Parses what a person writes on a command line or in a configuration file: `HOST:PORT` (a numeric
    /// IPv4 address or `localhost`), `[IPv6]:PORT`, `unix:PATH`, or a path with a `/` in it (a Unix socket).
    /// `nil` for anything else, including a port outside 0...65535.
    public init?(parsing text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { return nil }
            self = .unix(path: path)
            return
        }
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":"),
                let port = Int(text[text.index(close, offsetBy: 2)...]), (0...65535).contains(port)
            else { return nil }
            self = .tcp(host: String(text[text.index(after: text.startIndex)..<close]), port: port)
            return
        }
        if text.contains("/") {
            self = .unix(path: text)
            return
        }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        let host = String(text[..<colon])
        guard !host.isEmpty, !host.contains(":") else { return nil }
        self = .tcp(host: host, port: port)
    }

    /// The TCP port, or `nil` for a Unix socket.
    public var port: Int? {
        if case .tcp(_, let port) = self { return port }
        return nil
    }

    /// Whether only this machine can reach the address: a Unix socket, `localhost`, `::1` or an IPv4 address in
    /// 127.0.0.0/8. Listeners without authentication refuse anything else unless told otherwise.
    public var isLoopback: Bool {
        switch self {
        case .unix: return true
        case .tcp(let host, _):
            if host == "localhost" || host == "::1" { return true }
            let parts = host.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
        }
    }

    /// The longest Unix socket path the kernel takes (`sun_path` less its terminating zero).
    public static let maximumUnixPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Calls `body` with the `sockaddr` for a TCP address; throws `EINVAL` for a host that is not a numeric address.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>) throws -> R) throws -> R {
        guard case .tcp(let rawHost, let port) = self else { throw UVError(code: Int32(UV_EINVAL.rawValue), operation: "resolve \(self)") }
        let host = rawHost == "localhost" ? "127.0.0.1" : rawHost
        guard (0...65535).contains(port) else {
            throw UVError(code: Int32(UV_EINVAL.rawValue), operation: "port \(port) of \(self) is outside 0...65535")
        }
        var storage = sockaddr_storage()
        return try withUnsafeMutableBytes(of: &storage) { bytes in
            let address = bytes.baseAddress!
            if host.contains(":") {
                try UVError.check(
                    uv_ip6_addr(host, Int32(port), address.assumingMemoryBound(to: sockaddr_in6.self)),
                    "parse IPv6 address \(host) (a numeric address is needed)")
            } else {
                try UVError.check(
                    uv_ip4_addr(host, Int32(port), address.assumingMemoryBound(to: sockaddr_in.self)),
                    "parse IPv4 address \(host) (a numeric address is needed)")
            }
            return try body(address.assumingMemoryBound(to: sockaddr.self))
        }
    }

    /// Reads a TCP address back from a `sockaddr_storage` filled by the kernel.
    static func fromStorage(_ storage: inout sockaddr_storage) -> SocketAddress? {
        withUnsafeMutableBytes(of: &storage) { bytes -> SocketAddress? in
            let address = bytes.baseAddress!
            var name = [CChar](repeating: 0, count: 64)
            switch Int32(address.assumingMemoryBound(to: sockaddr.self).pointee.sa_family) {
            case AF_INET:
                let inet = address.assumingMemoryBound(to: sockaddr_in.self)
                uv_ip4_name(inet, &name, name.count)
                return .tcp(
                    host: String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                    port: Int(UInt16(bigEndian: inet.pointee.sin_port)))
            case AF_INET6:
                let inet6 = address.assumingMemoryBound(to: sockaddr_in6.self)
                uv_ip6_name(inet6, &name, name.count)
                return .tcp(
                    host: String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                    port: Int(UInt16(bigEndian: inet6.pointee.sin6_port)))
            default:
                return nil
            }
        }
    }

    /// Throws `ENAMETOOLONG` for a Unix path the kernel would cut short.
    static func checkUnixPath(_ path: String, operation: String) throws {
        if path.utf8.count > maximumUnixPathLength {
            throw UVError(
                code: Int32(UV_ENAMETOOLONG.rawValue),
                operation: "\(operation): path is \(path.utf8.count) bytes, at most \(maximumUnixPathLength) fit")
        }
    }
}
