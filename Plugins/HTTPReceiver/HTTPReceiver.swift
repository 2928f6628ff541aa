import Glibc
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
/// (gateway mode), valid sends go to the forwarder instead of this instance's bus, and topic management too when it is a
/// `TopicForwarder`; the other routes answer 501.
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
        /// instead of the local bus; topic management (`/iid/v1:batchAdd`, `:batchRemove`, `/iid/info`, `.../topicSubscriptions`)
        /// goes to it too when it is a `TopicForwarder` (as `NATSGateway` is); every other route but `/healthz` (and
        /// `/token`, `/up/{token}` when set up) is answered 501 `UNIMPLEMENTED`. `nil` (the default): messages are for
        /// this instance.
        public var forwarder: (any SendForwarder)?
        /// The keys APNs provider tokens are verified with on `POST /3/device/{token}`: with any, that route needs
        /// `authorization: bearer <token>` (ES256, signed by one of them, at most an hour old) or the bearer secret
        /// when one is set, and answers APNs' 403 reasons otherwise. Empty (the default): the secret alone, as for
        /// every route.
        public var apnsKeys: [APNsProviderKey] = []
        /// TLS for the endpoint (HTTPS); `nil`: plain HTTP. The handshake offers ALPN `h2` and `http/1.1`, and
        /// the protocol the client picks serves the connection. With a client CA, an APNs provider certificate (a
        /// subject `UID`, Apple's topics extension) authorizes the APNs pushes on its connection to the topics it
        /// names, as on APNs; requests without one take a provider token or the secret, and APNs' 403 reasons.
        public var tls: TLSServerContext?
        /// Senders with credentials of their own (``SenderCredential``): each presents its secret as
        /// `Authorization: Bearer <secret>`, may do what its scopes allow (else 403 `PERMISSION_DENIED` naming the
        /// scope missing) and as often as its rate limit allows (else 429 `RESOURCE_EXHAUSTED`, `QUOTA_EXCEEDED`, with
        /// `Retry-After`). The bearer secret keeps every scope and no limit. `nil` (the default): no such senders.
        public var senders: SenderOptions?
        /// Service accounts: `POST /token` exchanges an assertion signed with a key Herald issued for an access token,
        /// which every route accepts beside the secret. `nil` (the default): the secret alone.
        public var serviceAccounts: ServiceAccountOptions?
        /// The FCM proxy: with a TLS context (a certificate for Google's FCM, IID and OAuth hosts, issued by a CA the
        /// app servers trust), the listener accepts `CONNECT` to exactly `fcm.googleapis.com:443`,
        /// `iid.googleapis.com:443` and `oauth2.googleapis.com:443` (any other target: 403), ends TLS inside the
        /// tunnel with it, and serves the same routes there, HTTP/1.1 or HTTP/2 by ALPN. Needs a plain listener (no
        /// ``tls``): `HTTPS_PROXY=http://...` is what HTTP clients take. `nil` (the default): `CONNECT` is refused.
        public var fcmProxy: TLSServerContext?
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
        /// The FCM proxy on a listener with TLS: HTTP clients speak to a proxy in clear (`HTTPS_PROXY=http://...`).
        case proxyNeedsPlainListener
        public var description: String {
            switch self {
            case .secretRequired(let address):
                "refusing to listen on \(address) without a secret: set one, or listen on a loopback address (127.0.0.1, ::1) only"
            case .emptySecret:
                "refusing an empty secret: set a real one, or none (nil) to listen on loopback only"
            case .proxyNeedsPlainListener:
                "the FCM proxy needs a listener without TLS: app servers reach a proxy in clear (HTTPS_PROXY=http://...) and TLS runs inside each tunnel"
            case .plaintextNetwork(let address):
                "refusing to serve plain HTTP on \(address) without TLS: the bearer secret and every payload would cross the network in clear; set a TLS certificate and key, listen on loopback, or allow it (allowPlaintextNetwork)"
            }
        }
    }

    public let options: Options
    /// The verifier of ``Options/apnsKeys``, once started with some.
    private(set) var apnsTokens: APNsTokenVerifier?
    private var context: PluginContext?
    /// The service-account keys and the access tokens issued, once started with ``Options/serviceAccounts``.
    private(set) var serviceAccountTokens: ServiceAccountTokens?
    private var refresher: Task<Void, Never>?
    private var sendersRefresher: Task<Void, Never>?
    /// The senders not revoked, by the SHA-256 of their secret (loop thread).
    private var senders: [String: KnownSender] = [:]
    private var listener: ReceiverListener<HTTPConnection>?
    /// The connections open, to be told of the end (loop thread).
    private var connections: [ObjectIdentifier: HTTPConnection] = [:]

    public init(options: Options = Options()) {
        self.options = options
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "http", summary: "FCM v1 HTTP endpoint")
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
        if options.fcmProxy != nil, options.tls != nil { throw ConfigurationError.proxyNeedsPlainListener }
        if let accounts = options.serviceAccounts {
            let tokens = ServiceAccountTokens(options: accounts)
            try tokens.reload()
            serviceAccountTokens = tokens
        }
        // Senders that cannot be read yet (the fleet's bucket out of reach) are read again at the next change or
        // refresh interval; until then only the secret and access tokens are taken.
        let loadedSenders: [SenderCredential]?
        do {
            loadedSenders = try options.senders.map { try $0.loadSenders() }
        } catch {
            context.logger.warning("cannot read the senders yet; trying again shortly", metadata: ["error": "\(error)"])
            loadedSenders = nil
        }
        self.context = context
        try await context.loop.submit {
            if let loadedSenders { self.install(loadedSenders) }
            let api = HTTPAPI(receiver: self, context: context)
            let limits = self.options.limits
            let proxy = self.options.fcmProxy
            let listener = ReceiverListener(
                context: context, maximumConnections: limits.maximumConnections, security: self.options.tls,
                applicationProtocols: Self.applicationProtocols
            ) { [unowned self] connection in
                // A provider certificate (mutual TLS) authorizes the APNs pushes of its connection: read once, here.
                let handler: any HTTPRequestHandler =
                    connection.tls?.peer.flatMap(APNsProviderCertificate.init).map {
                        ProviderCertificateConnection(api: api, certificate: $0)
                    }
                    ?? api
                let session = HTTPConnection(
                    HTTPServerSession(connection: connection, loop: context.loop, handler: handler, limits: limits), connection: connection,
                    negotiatedProtocol: connection.applicationProtocol,
                    preamble: proxy.map { ConnectPreamble(connection: connection, loop: context.loop, tls: $0, limits: limits) })
                let key = ObjectIdentifier(session)
                self.connections[key] = session
                session.onClosed = { [weak self] in self?.connections[key] = nil }
                return session
            }
            try listener.listen(on: [self.options.address])
            self.listener = listener
        }
        if let senders = options.senders {
            let logger = context.logger
            let loop = context.loop
            let reload = { @Sendable [self] in
                do {
                    let loaded = try senders.loadSenders()
                    loop.execute { self.install(loaded) }
                } catch {
                    logger.warning("cannot read the senders; the last ones read stay in use", metadata: ["error": "\(error)"])
                }
            }
            // Ends at stop(), which cancels it.
            sendersRefresher = Task.detached {
                if let changes = senders.changes {
                    for await _ in changes { reload() }
                } else {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: senders.refreshInterval)
                        reload()
                    }
                }
            }
        }
        if let tokens = serviceAccountTokens {
            let logger = context.logger
            let interval = tokens.options.refreshInterval
            refresher = Task.detached {
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    do {
                        try tokens.reload()
                    } catch {
                        logger.warning(
                            "cannot read the service-account keys; the last ones read stay in use", metadata: ["error": "\(error)"])
                    }
                }
            }
        }
    }

    public func stop() async {
        refresher?.cancel()
        sendersRefresher?.cancel()
        guard let context else { return }
        // Returns once every connection has closed, its answers out (or its peer took none of them for a second).
        await context.loop.submit { done in
            // HTTP/2 clients are told with a GOAWAY, sent as the connections close.
            for connection in self.connections.values { connection.shutdown() }
            guard let listener = self.listener else { return done() }
            self.listener = nil
            listener.close(completion: done)
        }
    }

    /// What the sessions speak, offered to TLS clients by ALPN in this order of preference.
    static let applicationProtocols = ["h2", "http/1.1"]

    public var openConnections: Int { listener?.connectionCount ?? 0 }

    public func pause() { listener?.pause() }

    public func resume() { listener?.resume() }

    /// Makes `loaded` the senders known (loop thread): those not revoked, a sender whose credential is unchanged
    /// keeping its token bucket.
    private func install(_ loaded: [SenderCredential]) {
        let now = ContinuousClock.now
        var known: [String: KnownSender] = [:]
        for credential in loaded where credential.revokedAt == nil {
            if let existing = senders[credential.secretHash], existing.credential == credential {
                known[credential.secretHash] = existing
            } else {
                known[credential.secretHash] = KnownSender(credential, now: now)
            }
        }
        senders = known
    }

    /// Who `header` says the request is from, and what it may do; `nil` when it is no one's: `Bearer <secret>` (the
    /// scheme in any case, as RFC 7235 has it; the secret compared in constant time) may do everything, `Bearer
    /// <access token>` of a service account (``Options/serviceAccounts``) what its key's scopes allow, `Bearer
    /// <secret of a sender>` (``Options/senders``, found by its SHA-256) what the sender's allow. Without a secret
    /// (loopback only), anyone may do anything, except that a sender's secret still has that sender's scopes and
    /// limit. Loop thread.
    func caller(_ header: String?) -> Caller? {
        let scheme = "bearer "
        guard let header, header.utf8.count >= scheme.utf8.count, header.prefix(scheme.count).lowercased() == scheme else {
            return options.secret == nil ? .everything : nil
        }
        let bearer = header.dropFirst(scheme.count)
        if let secret = options.secret {
            let expected = Array(secret.utf8)
            let given = Array(bearer.utf8)
            var difference = UInt8(expected.count == given.count ? 0 : 1)
            for index in 0..<expected.count {
                difference |= expected[index] ^ (index < given.count ? given[index] : 0)
            }
            if difference == 0 { return .everything }
        }
        // An access token of a service account; then a sender's secret (found by its hash).
        if let tokens = serviceAccountTokens, bearer.hasPrefix("ya29.herald."),
            let scopes = tokens.scopes(of: bearer, now: Int64(time(nil)))
        {
            return Caller(scopes: scopes, sender: nil)
        }
        if !senders.isEmpty, let sender = senders[SenderCredential.hash(secret: bearer)] {
            return Caller(scopes: sender.credential.scopes, sender: sender)
        }
        return options.secret == nil ? .everything : nil
    }
}

/// One connection of the receiver, for the listener: HeraldHTTP's session (HTTP/1.1, or HTTP/2 for a client
/// that begins with its preface), which knows nothing of receivers.
final class HTTPConnection: ReceiverSession {
    private let session: HTTPServerSession
    private let connection: StreamConnection
    /// The protocol the TLS handshake agreed on (ALPN); `nil` in clear, where the first bytes decide.
    private let negotiatedProtocol: String?
    /// With the FCM proxy on: what comes before the session (a `CONNECT` and the tunnel's TLS handshake, or nothing).
    private let preamble: ConnectPreamble?

    /// Runs once the connection has closed.
    var onClosed: () -> Void = {}

    init(_ session: HTTPServerSession, connection: StreamConnection, negotiatedProtocol: String?, preamble: ConnectPreamble?) {
        self.session = session
        self.connection = connection
        self.negotiatedProtocol = negotiatedProtocol
        self.preamble = preamble
    }

    func start() {
        guard let preamble else { return session.start(negotiatedProtocol: negotiatedProtocol) }
        preamble.start { [weak self] negotiated, initial in
            guard let self else { return }
            self.session.start(negotiatedProtocol: negotiated)
            // The bytes the preamble read that were not a CONNECT go the way the session's own reads go.
            if !initial.isEmpty, self.connection.isOpen { initial.withUnsafeBytes { self.connection.onRead?($0) } }
        }
    }

    func closed() {
        preamble?.closed()
        session.closed()
        onClosed()
    }

    /// The receiver stops: an HTTP/2 client gets a GOAWAY.
    func shutdown() { session.shutdown() }
}
