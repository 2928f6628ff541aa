import Glibc
public import Herald

/// Where an HTTP request goes: a plain `http://` URL whose host is a numeric IPv4 or IPv6 address or
/// `localhost`, as ``HTTPClient`` can reach it with no DNS and no TLS.
///
/// Accepted: `http://127.0.0.1:8080/hooks/token`, `http://localhost/token?app=weather`, `http://[::1]:9000/`.
/// Refused, with a ``HTTPClientError/unsupportedURL(_:reason:)`` that says what to do: `https://` (put a
/// TLS-terminating proxy on loopback in front of the app server), host names other than `localhost` (no DNS),
/// user information (`user:password@`), and paths with spaces, control or non-ASCII characters (percent-encode
/// them). A fragment (`#...`) is never sent.
public struct HTTPEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The host as written: a numeric address (IPv6 without its brackets) or `localhost`.
    public let host: String
    /// The TCP port (80 when the URL names none).
    public let port: Int
    /// The request target: the path and query, starting with `/`.
    public let target: String

    /// Parses `url`; throws ``HTTPClientError/unsupportedURL(_:reason:)`` for anything Herald's client cannot reach.
    ///
    /// One function on purpose: a step-by-step URL parser, scheme, authority, port and path in order.
    public init(parsing url: String) throws {
        func refuse(_ reason: String) -> HTTPClientError { .unsupportedURL(url, reason: reason) }
        let lowered = url.lowercased()
        if lowered.hasPrefix("https://") {
            throw refuse(
                "https is not supported: Herald's HTTP client speaks plain HTTP only. Reach the app server over loopback, or run a TLS-terminating proxy on this machine (nginx, HAProxy, stunnel) and give its http://127.0.0.1:PORT/ URL"
            )
        }
        guard lowered.hasPrefix("http://") else {
            throw refuse("only http:// URLs are supported (http://HOST:PORT/PATH with a numeric HOST or localhost)")
        }
        var rest = Substring(url.dropFirst("http://".count))
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var target = String(rest[authorityEnd...])
        if target.hasPrefix("?") { target = "/" + target }
        if target.isEmpty { target = "/" }
        guard !authority.contains("@") else {
            throw refuse("user information in the URL is not supported; give the secret as the bearer secret option instead")
        }
        let hostPart: Substring
        let portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw refuse("an IPv6 host needs its closing ']'") }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.isEmpty {
                portPart = nil
            } else {
                guard after.hasPrefix(":") else { throw refuse("only ':PORT' may follow an IPv6 host") }
                portPart = after.dropFirst()
            }
        } else if let colon = authority.firstIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
        } else {
            hostPart = authority
            portPart = nil
        }
        let host = String(hostPart)
        guard !host.isEmpty else { throw refuse("the URL names no host") }
        var port = 80
        if let portPart {
            guard !portPart.isEmpty, portPart.allSatisfy(\.isASCII), portPart.allSatisfy(\.isNumber),
                let value = Int(portPart), (1...65535).contains(value)
            else {
                throw refuse("the port must be a number in 1...65535")
            }
            port = value
        }
        if authority.hasPrefix("[") {
            guard Self.isNumeric(host, family: AF_INET6) else { throw refuse("'\(host)' is not a numeric IPv6 address") }
        } else if host.lowercased() != "localhost" {
            guard Self.isNumeric(host, family: AF_INET) else {
                throw refuse(
                    "the host must be a numeric address or localhost ('\(host)' would need DNS, which Herald's client does not do)")
            }
        }
        guard target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw refuse("the path may hold only visible ASCII characters; percent-encode the others")
        }
        self.host = host.lowercased() == "localhost" ? "localhost" : host
        self.port = port
        self.target = target
    }

    /// The address to connect to (`localhost` is 127.0.0.1).
    public var address: SocketAddress { .tcp(host: host == "localhost" ? "127.0.0.1" : host, port: port) }

    /// The `Host` header: `host:port`, with brackets around an IPv6 address.
    public var hostHeader: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The URL, without a fragment.
    public var description: String { "http://\(hostHeader)\(target)" }

    private static func isNumeric(_ host: String, family: Int32) -> Bool {
        var storage = sockaddr_in6()  // large enough for either family's address
        return withUnsafeMutableBytes(of: &storage) { inet_pton(family, host, $0.baseAddress) == 1 }
    }
}
