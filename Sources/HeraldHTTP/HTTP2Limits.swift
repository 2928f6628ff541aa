/// The bounds of one HTTP/2 connection beyond ``HTTPServerLimits`` (which it keeps too: the header list and body
/// sizes, the timeouts, the requests per connection): what a client may ask of it before a stream is refused or
/// the connection ended with GOAWAY `ENHANCE_YOUR_CALM`.
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
    /// Streams the peer may cancel (RST_STREAM) before their answer: the rapid reset attack opens and cancels
    /// streams to make the server work without ever waiting for an answer.
    public var peerResets = Rate(burst: 200, perSecond: 50)
    /// SETTINGS, PING and PRIORITY frames the peer may send.
    public var controlFrames = Rate(burst: 1000, perSecond: 200)
    /// A header list this many times over ``HTTPServerLimits/maximumHeaderBytes`` ends the connection instead of the stream.
    static let headerFloodFactor = 16

    public init() {}
}
