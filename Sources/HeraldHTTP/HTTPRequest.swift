/// A request method, as it came (methods are case-sensitive: `get` is not `GET`).
public struct HTTPMethod: Hashable, Sendable, CustomStringConvertible {
    /// The method's name, `GET` or `POST` for example.
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }

    public static let get = HTTPMethod("GET")
    public static let head = HTTPMethod("HEAD")
    public static let post = HTTPMethod("POST")
    public static let put = HTTPMethod("PUT")
    public static let delete = HTTPMethod("DELETE")
    public static let patch = HTTPMethod("PATCH")
    public static let options = HTTPMethod("OPTIONS")

    public var description: String { rawValue }
}

/// The protocol version a request came in: 1.0, 1.1 or 2.
public struct HTTPVersion: Hashable, Sendable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    public static let http2 = HTTPVersion(major: 2, minor: 0)

    public var description: String { minor == 0 && major >= 2 ? "HTTP/\(major)" : "HTTP/\(major).\(minor)" }
}

/// One request as a session hands it to its ``HTTPRequestHandler``, whatever the protocol it came in (HTTP/1.1
/// framing, or an HTTP/2 stream's pseudo-headers and DATA frames).
///
/// The target, the header lines and the body are the session's own buffers, reused for the next request of the
/// connection: a handler that keeps the request (or its body) past `handle` makes them copy, nothing else.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    /// The request target as sent, path and query (`/v1/projects/demo/messages:send?x=1`), as bytes: routes that
    /// compare it whole need no `String`.
    public var targetBytes: [UInt8]
    /// The header fields, names compared without regard to case. An HTTP/2 request's pseudo-headers are not among
    /// them (`:method` and `:path` are ``method`` and ``targetBytes``; `:authority` is `host`).
    public var headers: HTTPHeaders
    /// The body, whole (a session reads it all before it calls the handler, up to ``HTTPServerLimits/maximumBodyBytes``).
    public var body: [UInt8]
    public var version: HTTPVersion

    public init(
        method: HTTPMethod, targetBytes: [UInt8], headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [],
        version: HTTPVersion = .http1_1
    ) {
        self.method = method
        self.targetBytes = targetBytes
        self.headers = headers
        self.body = body
        self.version = version
    }

    public init(
        method: HTTPMethod, target: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], version: HTTPVersion = .http1_1
    ) {
        self.init(method: method, targetBytes: Array(target.utf8), headers: headers, body: body, version: version)
    }

    /// The target as text (invalid UTF-8 repaired).
    public var target: String { String(decoding: targetBytes, as: UTF8.self) }

    /// The target up to its `?`.
    public var path: String {
        let end = targetBytes.firstIndex(of: UInt8(ascii: "?")) ?? targetBytes.endIndex
        return String(decoding: targetBytes[..<end], as: UTF8.self)
    }

    /// What follows the target's `?`, if it has one (still percent-encoded).
    public var query: String? {
        guard let mark = targetBytes.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        return String(decoding: targetBytes[(mark + 1)...], as: UTF8.self)
    }
}
