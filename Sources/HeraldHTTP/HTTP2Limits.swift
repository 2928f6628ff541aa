/// The bounds of one HTTP/2 connection: what a client may ask of it before a stream is refused or the
/// connection ended with GOAWAY `ENHANCE_YOUR_CALM`.
public struct HTTP2Limits: Sendable, Equatable {
    /// A rate: `burst` events at once, `perSecond` more each second after.
    public struct Rate: Sendable, Equatable {
        public var burst: Int
        public var perSecond: Int

        public init(burst: Int, perSecond: Int) {
            self.burst = burst
            self.perSecond = perSecond
        }
    }

    /// Streams open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`); a stream past it is refused.
    public var maximumConcurrentStreams: Int = 100
    /// The most bytes of one request's header list, counted as RFC 9113 does (name, value and 32 per field),
    /// announced as `SETTINGS_MAX_HEADER_LIST_SIZE`; a longer list gets 431.
    public var maximumHeaderListBytes: Int = 16 * 1024
    /// The largest request body; a larger one (by its `content-length` or the DATA received) gets 413.
    public var maximumBodyBytes: Int = 64 * 1024
    /// Streams the peer may cancel (RST_STREAM) before their answer: the rapid reset attack opens and cancels
    /// streams to make the server work without ever waiting for an answer.
    public var peerResets = Rate(burst: 200, perSecond: 50)
    /// SETTINGS, PING and PRIORITY frames the peer may send.
    public var controlFrames = Rate(burst: 1000, perSecond: 200)
    /// How long a connection with no stream open may stay silent before it is ended (GOAWAY, then close).
    public var idleTimeout: Duration = .seconds(30)
    /// How long one request may take to arrive, from its HEADERS to its END_STREAM; then it is answered 408.
    public var requestTimeout: Duration = .seconds(10)

    /// A header list this many times over ``maximumHeaderListBytes`` ends the connection instead of the stream.
    static let headerFloodFactor = 16

    public init() {}
}
