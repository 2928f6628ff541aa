import FuzzSupport
import HeraldHTTP

/// The HTTP/2 server session in memory: the client preface, then the input after its first byte in the chunks
/// that byte picks, go through nghttp2 and the session's limits and counters; every complete request is answered
/// at once (an echo of its size), every refused one with its error, and the output drained after each chunk.
/// Small limits (2 KB of header list, 4 KB of body, 8 streams, 16 resets) so that inputs reach them.
private let limits = HTTPServerLimits(
    maximumHeaderBytes: 2048, maximumBodyBytes: 4096, requestTimeout: .seconds(1), maximumRequestsPerConnection: 32)

private let http2Limits: HTTP2Limits = {
    var limits = HTTP2Limits()
    limits.maximumConcurrentStreams = 8
    limits.peerResets = .init(burst: 16, perSecond: 1)
    limits.controlFrames = .init(burst: 64, perSecond: 1)
    return limits
}()

/// A clock that moves a millisecond each time it is read: the rate limits and the request timeout see time pass
/// the same way for the same input.
private final class SteppingClock {
    var now = ContinuousClock.now
    func tick() -> ContinuousClock.Instant {
        now += .milliseconds(1)
        return now
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let clock = SteppingClock()
    let session = HTTP2ServerSession(limits: limits, http2Limits: http2Limits, clock: clock.tick)
    session.onRequest = { [unowned session] streamID, request in
        session.respond(to: streamID, .text(200, "\(request.method) \(request.target) \(request.body.count)", headers: [("X-Echo", "1")]))
    }
    session.onRefusal = { [unowned session] streamID, error in session.respond(to: streamID, .text(error.status, error.message)) }
    var output = 0
    let drain = {
        session.drainOutput { bytes in
            output += bytes.count
            return true
        }
    }
    _ = HTTP2Session.preface.withUnsafeBytes { session.receive($0) }
    drain()
    for chunk in FuzzInput.chunked(FuzzInput.bytes(start, count)) {
        guard chunk.withUnsafeBytes({ session.receive($0) }) else { break }
        drain()
    }
    _ = session.expireRequests()
    session.shutdown()
    drain()
    precondition(output > 0, "the session sent nothing, not even its SETTINGS")
    return 0
}

@_cdecl("FuzzHTTP2_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
