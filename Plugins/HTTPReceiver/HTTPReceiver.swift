public import Herald
import HeraldHTTP
public import HeraldTLS

/// The FCM-compatible HTTP endpoint on Herald's loop, served by HeraldHTTP's session and its route table: HTTP/1.1
/// (Node's field-proven `http_parser`, with RFC 9112's checks, pipelining and the limits below) and HTTP/2 (nghttp2;
/// by prior knowledge in clear, by ALPN `h2` over TLS).
///
/// Routes: `POST /v1/projects/{project}/messages:send` (an FCM v1 send body; `{"name": ...}` or Google's error
/// shape); FCM v1 topic management (`POST /v1/projects/{project}/registrations/{token}/topicSubscriptions?topic_name=T`,
/// `DELETE .../topicSubscriptions/{T}?allow_missing=true`); the Instance ID API's `POST /iid/v1:batchAdd` and
/// `/iid/v1:batchRemove`, which older Admin SDK topic calls use; APNs provider style `POST /3/device/{token}`;
/// `POST /up/{token}` for UnifiedPush endpoints when ``Options/webPush`` is set; and `GET /healthz` (`ready`, or `draining` with 503 while the instance shuts down). With a secret,
/// every request but `/healthz` needs `Authorization: Bearer <secret>` (compared in constant time); without one,
/// the receiver refuses to listen on anything but loopback. With ``Options/tls`` the endpoint speaks HTTPS; beyond
/// loopback it must, unless ``Options/allowPlaintextNetwork`` says otherwise. With ``Options/forwarder`` set
/// (gateway mode), valid sends go to the forwarder instead of this instance's bus, and the other routes answer 501.
public final class HTTPReceiver: Receiver, @unchecked Sendable {
    // @unchecked Sendable: `options` is immutable; the rest is touched on the loop thread only.

    public struct Options: Sendable {
        /// The TCP address to listen on.
        public var address: SocketAddress = .tcp(host: "127.0.0.1", port: 8080)
        /// The bearer secret senders must present; `nil` allows loopback addresses only.
        public var secret: String?
        /// The largest request body accepted; a larger one gets 413 as soon as its Content-Length or its chunks
        /// pass the limit, and the connection closes.
        public var maximumBodyBytes: Int = 64 * 1024
        /// The most bytes of one request's line and headers; more get 431 at once, and the connection closes.
        public var maximumHeaderBytes: Int = 16 * 1024
        /// How long a connection may stay silent before it is closed (a client stalled mid-request included).
        public var idleTimeout: Duration = .seconds(30)
        /// How long one request may take to arrive, from its first byte to its last (head and body): a client
        /// that trickles bytes, each within `idleTimeout`, is answered 408 and closed when it passes.
        public var requestTimeout: Duration = .seconds(10)
        /// How many requests one connection may make before it is closed after the answer.
        public var maximumRequestsPerConnection: Int = 10_000
        /// The most connections open at once; more are closed as they are accepted.
        public var maximumConnections: Int = 1024
        /// Gateway mode: valid sends go to this forwarder (NATSReceiver's `NATSGateway` publishes them to the fleet)
        /// instead of the local bus, and every route but `messages:send` and `/healthz` is answered 501
        /// `UNIMPLEMENTED`. `nil` (the default): messages are for this instance.
        public var forwarder: (any SendForwarder)?
        /// The keys APNs provider tokens are verified with on `POST /3/device/{token}`: with any, that route needs
        /// `authorization: bearer <token>` (ES256, signed by one of them, at most an hour old) or the bearer secret
        /// when one is set, and answers APNs' 403 reasons otherwise. Empty (the default): the secret alone, as for
        /// every route.
        public var apnsKeys: [APNsProviderKey] = []
        /// TLS for the endpoint (HTTPS); `nil`: plain HTTP. The handshake offers ALPN `h2` and `http/1.1`, and
        /// the protocol the client picks serves the connection.
        public var tls: TLSServerContext?
        /// Plain HTTP beyond loopback sends the bearer secret and every payload in clear: an address that is not
        /// loopback is refused at start without ``tls`` unless this is `true` (a network you trust, or TLS ended in
        /// front of Herald), and the start then says so in the log.
        public var allowPlaintextNetwork = false
        /// Where pushes to UnifiedPush endpoints go (`POST /up/{token}`, open to any sender: an app server knows its
        /// endpoint's URL, not the secret); `nil` (the default): no such route.
        public var webPush: (any WebPushEndpoint)?

        public init(address: SocketAddress = .tcp(host: "127.0.0.1", port: 8080), secret: String? = nil) {
            self.address = address
            self.secret = secret
        }

        /// The limits and timeouts above, as the HTTP sessions take them.
        var limits: HTTPServerLimits {
            HTTPServerLimits(
                maximumHeaderBytes: maximumHeaderBytes, maximumBodyBytes: maximumBodyBytes, idleTimeout: idleTimeout,
                requestTimeout: requestTimeout, maximumRequestsPerConnection: maximumRequestsPerConnection,
                maximumConnections: maximumConnections)
        }
    }

    /// Refused configurations.
    public enum ConfigurationError: Error, CustomStringConvertible {
        case secretRequired(SocketAddress)
        /// An empty secret would let `Authorization: Bearer ` in.
        case emptySecret
        /// An address beyond loopback without TLS and without ``Options/allowPlaintextNetwork``.
        case plaintextNetwork(SocketAddress)
        public var description: String {
            switch self {
            case .secretRequired(let address):
                "refusing to listen on \(address) without a secret: set one, or listen on a loopback address (127.0.0.1, ::1) only"
            case .emptySecret:
                "refusing an empty secret: set a real one, or none (nil) to listen on loopback only"
            case .plaintextNetwork(let address):
                "refusing to serve plain HTTP on \(address) without TLS: the bearer secret and every payload would cross the network in clear; set a TLS certificate and key, listen on loopback, or allow it (allowPlaintextNetwork)"
            }
        }
    }

    public let options: Options
    /// The verifier of ``Options/apnsKeys``, once started with some.
    private(set) var apnsTokens: APNsTokenVerifier?
    private var context: PluginContext?
    private var listener: ReceiverListener<HTTPConnection>?
    /// The connections open, to be told of the end (loop thread).
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]

    public init(options: Options = Options()) {
        self.options = options
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "http", summary: "FCM v1 HTTP endpoint",
            options: [
                .init(name: "listen", defaultValue: "127.0.0.1:8080", help: "TCP address to listen on"),
                .init(name: "secret", defaultValue: "", help: "bearer secret; empty allows loopback only"),
                .init(name: "max-body-bytes", defaultValue: "65536", help: "larger bodies get 413"),
                .init(name: "idle-timeout", defaultValue: "30s", help: "close connections silent this long"),
                .init(
                    name: "request-timeout", defaultValue: "10s", help: "answer 408 to a request not whole this long after its first byte"),
            ])
    }

    /// The address listened on (port 0 replaced by the chosen port), once started.
    public func listeningAddress() async throws -> SocketAddress? {
        guard let context else { return nil }
        return try await context.loop.submit { self.listener?.localAddresses.first }
    }

    public func start(_ context: PluginContext) async throws {
        if options.secret?.isEmpty == true { throw ConfigurationError.emptySecret }
        apnsTokens = try APNsTokenVerifier(keys: options.apnsKeys)
        if options.secret == nil {
            guard options.address.isLoopback else {
                throw ConfigurationError.secretRequired(options.address)
            }
            context.logger.warning("no secret configured: the HTTP receiver accepts unauthenticated requests, on loopback only")
        }
        if options.tls == nil, !options.address.isLoopback {
            guard options.allowPlaintextNetwork else { throw ConfigurationError.plaintextNetwork(options.address) }
            context.logger.warning(
                "serving plain HTTP beyond loopback, as allowed: the bearer secret and payloads cross the network in clear",
                metadata: ["address": "\(options.address)"])
        }
        self.context = context
        try await context.loop.submit {
            let api = HTTPAPI(receiver: self, context: context)
            let limits = self.options.limits
            let listener = ReceiverListener(
                context: context, maximumConnections: limits.maximumConnections, security: self.options.tls,
                applicationProtocols: Self.applicationProtocols
            ) { [unowned self] connection in
                let session = HTTPConnection(
                    HTTPServerSession(connection: connection, loop: context.loop, handler: api, limits: limits),
                    negotiatedProtocol: connection.applicationProtocol)
                let key = ObjectIdentifier(session)
                self.connections[key] = session
                session.onClosed = { [weak self] in self?.connections[key] = nil }
                return session
            }
            try listener.listen(on: [self.options.address])
            self.listener = listener
        }
    }

    public func stop() async {
        guard let context else { return }
        try? await context.loop.submit {
            // HTTP/2 clients are told with a GOAWAY, sent as the connections close.
            for connection in self.connections.values { connection.shutdown() }
            self.listener?.close()
            self.listener = nil
        }
    }

    /// What the sessions speak, offered to TLS clients by ALPN in this order of preference.
    static let applicationProtocols = ["h2", "http/1.1"]

    public var openConnections: Int { listener?.connectionCount ?? 0 }

    public func pause() { listener?.pause() }

    public func resume() { listener?.resume() }

    /// Whether `header` is `Bearer <secret>` (the scheme in any case, as RFC 7235 has it; the secret compared
    /// in constant time).
    func authorized(_ header: String?) -> Bool {
        guard let secret = options.secret else { return true }
        let scheme = "bearer "
        guard let header, header.utf8.count >= scheme.utf8.count, header.prefix(scheme.count).lowercased() == scheme else { return false }
        let expected = Array(secret.utf8)
        let given = Array(header.utf8.dropFirst(scheme.utf8.count))
        var difference = UInt8(expected.count == given.count ? 0 : 1)
        for index in 0..<expected.count {
            difference |= expected[index] ^ (index < given.count ? given[index] : 0)
        }
        return difference == 0
    }
}

/// One connection of the receiver, for the listener: HeraldHTTP's session (HTTP/1.1, or HTTP/2 for a client
/// that begins with its preface), which knows nothing of receivers.
final class HTTPConnection: ReceiverSession {
    private let session: HTTPServerSession
    /// The protocol the TLS handshake agreed on (ALPN); `nil` in clear, where the first bytes decide.
    private let negotiatedProtocol: String?

    /// Runs once the connection has closed.
    var onClosed: () -> Void = {}

    init(_ session: HTTPServerSession, negotiatedProtocol: String?) {
        self.session = session
        self.negotiatedProtocol = negotiatedProtocol
    }

    func start() { session.start(negotiatedProtocol: negotiatedProtocol) }

    func closed() {
        session.closed()
        onClosed()
    }

    /// The receiver stops: an HTTP/2 client gets a GOAWAY.
    func shutdown() { session.shutdown() }
}
