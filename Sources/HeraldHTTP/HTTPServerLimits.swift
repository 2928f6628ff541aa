/// A server's limits and timeouts, in one place: every session (HTTP/1.1 and HTTP/2) enforces them, answering
/// the ``HTTPRequestError`` each names.
public struct HTTPServerLimits: Sendable, Equatable {
    /// The most bytes of one request's line and fields; more get 431 at once, and the connection closes.
    public var maximumHeaderBytes: Int = 16 * 1024
    /// The largest request body accepted; a larger one gets 413 as soon as its announced length or its chunks
    /// pass the limit, and the connection closes.
    public var maximumBodyBytes: Int = 64 * 1024
    /// How long a connection may stay silent before it is closed (a client stalled mid-request included).
    public var idleTimeout: Duration = .seconds(30)
    /// How long one request may take to arrive, from its first byte to its last (head and body): a client that
    /// trickles bytes, each within ``idleTimeout``, is answered 408 and closed when it passes.
    public var requestTimeout: Duration = .seconds(10)
    /// How many requests one connection may make; the connection closes after the answer to the last.
    public var maximumRequestsPerConnection: Int = 10_000
    /// The most connections open at once; more are closed as they are accepted (by the listener that accepts them).
    public var maximumConnections: Int = 1024

    public init(
        maximumHeaderBytes: Int = 16 * 1024, maximumBodyBytes: Int = 64 * 1024, idleTimeout: Duration = .seconds(30),
        requestTimeout: Duration = .seconds(10), maximumRequestsPerConnection: Int = 10_000, maximumConnections: Int = 1024
    ) {
        self.maximumHeaderBytes = maximumHeaderBytes
        self.maximumBodyBytes = maximumBodyBytes
        self.idleTimeout = idleTimeout
        self.requestTimeout = requestTimeout
        self.maximumRequestsPerConnection = maximumRequestsPerConnection
        self.maximumConnections = maximumConnections
    }
}
