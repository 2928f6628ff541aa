public import HeraldEventLoop

/// Herald's outgoing HTTP client: libcurl driven by an `EventLoop` through curl's multi-socket API, with no
/// thread of its own. HTTP/1.1 and HTTP/2 (when an `https` server offers it by ALPN), `http://` and `https://` with
/// the server's certificate verified (against the system's CAs, or ``Configuration/caFile``), connections kept and
/// reused across requests to the same server, a deadline and a response size limit per request, prompt
/// cancellation. Redirects are not followed.
///
/// One client per loop and purpose: the connections it keeps open are reused by its later requests. Requests may
/// be made from any context, any number at once; they all run on the loop. The client's sockets and timer are loop
/// handles: the loop's shutdown closes them and fails the requests under way with `EventLoopError.shutDown`.
///
/// ```swift
/// let client = HTTPClient(loop: herald.loop)
/// let response = try await client.request(
///     "POST", "https://push.example.com/hooks/token",
///     headers: [("Content-Type", "application/json")], body: Array(#"{"a":1}"#.utf8), timeout: .seconds(10))
/// print(response.status, response.value(of: "content-type") ?? "")
/// ```
public final class HTTPClient: Sendable {
    /// What every request of a client shares.
    public struct Configuration: Sendable, Equatable {
        /// A PEM file of the certificate authorities trusted for `https` instead of the system's (a private CA, a
        /// test's); `nil` trusts the system's store.
        public var caFile: String?
        /// The `User-Agent` sent when a request names none.
        public var userAgent: String
        /// The most connections open at once to one host and port; further requests wait for one of them (a
        /// request's timeout counts the wait). 0 for no limit.
        public var maximumConnectionsPerHost: Int
        /// A proxy every request goes through (`http://HOST:PORT`, `socks5h://HOST:PORT`, ...), but those to the
        /// hosts `no_proxy` names; `nil` for the proxy the environment names, as curl reads it: `https_proxy` (or
        /// `HTTPS_PROXY`) for `https` URLs, `http_proxy` (lower case only) for `http` ones, `all_proxy` (or
        /// `ALL_PROXY`) for both, none for the hosts in `no_proxy` (or `NO_PROXY`: host names, domain suffixes,
        /// addresses, CIDR ranges, `*` for all) — nor, whatever `no_proxy` says, for `localhost`, `127.0.0.1` and
        /// `::1`, as Go's clients do: a proxy the environment names for the way out never sees a request (and its
        /// bearer secret) meant for this machine, such as `herald send`'s to a local daemon.
        public var proxy: String?

        public init(caFile: String? = nil, userAgent: String = "Herald", maximumConnectionsPerHost: Int = 16, proxy: String? = nil) {
            self.caFile = caFile
            self.userAgent = userAgent
            self.maximumConnectionsPerHost = maximumConnectionsPerHost
            self.proxy = proxy
        }
    }

    /// The loop the requests run on.
    public let loop: EventLoop
    public let configuration: Configuration
    private let engine: CurlEngine

    /// A client on `loop`. Nothing is opened until the first request.
    public init(loop: EventLoop, configuration: Configuration = Configuration()) {
        self.loop = loop
        self.configuration = configuration
        self.engine = CurlEngine(loop: loop, configuration: configuration)
    }

    deinit {
        // The connections it kept are closed on the loop (a closed loop has closed them already).
        let engine = self.engine
        loop.execute { engine.close() }
    }

    /// Sends one request and returns the response, whatever its status. Callable from any context.
    ///
    /// - Parameters:
    ///   - method: An HTTP method token (`GET`, `POST`, `DELETE`, ...).
    ///   - url: An `http://` or `https://` URL (see ``HTTPURL``).
    ///   - headers: Header fields to send. The client writes `Host`, `Content-Length` and, unless given here,
    ///     `User-Agent`; it sends no `Content-Type` unless given, and never `Expect: 100-continue`.
    ///   - body: The request body; sent, with its length, when not empty or when the method is not `GET`/`HEAD`.
    ///   - timeout: The longest the whole exchange may take, from the wait for a connection to the end of the body.
    ///   - maximumResponseBytes: The longest response body accepted; a longer one ends the request with
    ///     ``HTTPClientError/responseTooLarge(_:limit:)``.
    /// - Throws: ``HTTPClientError``; `CancellationError` when the calling task is cancelled (the request is
    ///   abandoned at once); `EventLoopError.shutDown` when the loop is shutting down or has shut down.
    public func request(
        _ method: String, _ url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        timeout: Duration = .seconds(30), maximumResponseBytes: Int = 1 << 20
    ) async throws -> HTTPResponse {
        try Task.checkCancellation()
        let target = try HTTPURL(parsing: url)
        guard timeout > .zero else { throw HTTPClientError.invalidRequest("the timeout must be more than zero, not \(timeout)") }
        guard maximumResponseBytes >= 0 else {
            throw HTTPClientError.invalidRequest("the response limit must not be negative, not \(maximumResponseBytes)")
        }
        let transfer = CurlTransfer(
            request: try PreparedRequest(method: method, url: target, headers: headers, body: body, userAgent: configuration.userAgent),
            timeout: timeout, maximumResponseBytes: maximumResponseBytes)
        let engine = self.engine
        return try await withTaskCancellationHandler {
            try await loop.submit { engine.add(transfer) }
            return try await transfer.response()
        } onCancel: {
            transfer.markCancelled()
            loop.execute { engine.cancel(transfer) }
        }
    }

    /// Sends `request`; see ``request(_:_:headers:body:timeout:maximumResponseBytes:)``.
    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await self.request(
            request.method, request.url, headers: request.headers, body: request.body, timeout: request.timeout,
            maximumResponseBytes: request.maximumResponseBytes)
    }

    /// What the client has done so far. Callable from any thread.
    public var statistics: Statistics { engine.statistics }

    /// Counters of a client.
    public struct Statistics: Sendable, Equatable {
        /// Requests that ended (with a response or an error).
        public var completed = 0
        /// Connections opened (a request on a kept connection opens none).
        public var connectionsOpened = 0
        /// Sockets the loop watches for the client now.
        public var watchedSockets = 0
    }
}

/// One request, for ``HTTPClient/send(_:)``.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var timeout: Duration
    public var maximumResponseBytes: Int

    public init(
        method: String, url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        timeout: Duration = .seconds(30), maximumResponseBytes: Int = 1 << 20
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maximumResponseBytes = maximumResponseBytes
    }
}

/// A response: its status, header fields and body.
public struct HTTPResponse: Sendable {
    /// The status code (`200`, `404`, ...).
    public var status: Int
    /// The HTTP version it came in: `1.0`, `1.1` or `2`.
    public var version: String
    /// The header fields in the order received, names as the server wrote them (lower case over HTTP/2).
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// Whether the request went over a connection kept from an earlier one.
    public var reusedConnection: Bool

    public init(status: Int, version: String, headers: [(name: String, value: String)], body: [UInt8], reusedConnection: Bool) {
        self.status = status
        self.version = version
        self.headers = headers
        self.body = body
        self.reusedConnection = reusedConnection
    }

    /// The value of the first header field named `name` (compared without regard to case).
    public func value(of name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }
}

/// A request checked and written the way curl takes it. Built off the loop.
struct PreparedRequest: Sendable {
    let method: String
    let url: HTTPURL
    /// `Name: value` lines for curl's header list (`Name;` for an empty value; `Name:` removes curl's own).
    let headerLines: [String]
    let body: [UInt8]
    /// Whether a body (perhaps empty) and its length are sent.
    let sendsBody: Bool

    init(method: String, url: HTTPURL, headers: [(name: String, value: String)], body: [UInt8], userAgent: String) throws {
        guard Self.isToken(method) else { throw HTTPClientError.invalidRequest("the method '\(method)' is not an HTTP token") }
        var lines: [String] = []
        var named: Set<String> = []
        for (name, value) in headers {
            guard Self.isToken(name) else { throw HTTPClientError.invalidRequest("the header name '\(name)' is not an HTTP token") }
            guard value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                throw HTTPClientError.invalidRequest("the value of header '\(name)' holds a line end or control character")
            }
            let trimmed = value.trimmingSpaces
            lines.append(trimmed.isEmpty ? "\(name);" : "\(name): \(trimmed)")
            named.insert(name.lowercased())
        }
        if !named.contains("user-agent") { lines.append("User-Agent: \(userAgent)") }
        // curl would add a form Content-Type to a body, and Expect: 100-continue to a large one: neither is wanted.
        if !named.contains("content-type") { lines.append("Content-Type:") }
        if !named.contains("expect") { lines.append("Expect:") }
        self.method = method
        self.url = url
        self.headerLines = lines
        self.body = body
        self.sendsBody = !body.isEmpty || !["GET", "HEAD"].contains(method)
    }

    private static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
    }
}

extension String {
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
