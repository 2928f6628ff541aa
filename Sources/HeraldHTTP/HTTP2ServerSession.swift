import CNGHTTP2

/// The server side of one HTTP/2 connection on nghttp2, without I/O: bytes the peer sent go in through
/// ``receive(_:)``, complete requests come out through ``onRequest``, answers go in through
/// ``respond(to:_:)``, and the bytes to send come out of ``drainOutput(_:)``. ``HTTP2Session`` around it reads
/// and writes a socket; the fuzz target feeds it bytes in memory.
///
/// nghttp2 does the framing, HPACK, flow control and the protocol's checks (pseudo-headers, `content-length`
/// against the DATA received, stream states, the flood limits of its options); this class keeps each stream's
/// request, the limits of ``HTTPServerLimits`` and ``HTTP2Limits``, and the counters for what nghttp2 does not
/// bound by itself.
///
/// Not thread-safe: one thread (the loop's, in a server) uses it.
public final class HTTP2ServerSession {
    /// Why the session ended the connection on its own (a GOAWAY sent, or the peer's bytes not HTTP/2).
    public enum Failure: Equatable, Sendable, CustomStringConvertible {
        /// nghttp2 refused the bytes: not the client preface, a protocol error, or one of its floods.
        case protocolError(String)
        /// More streams cancelled by the peer before their answer than ``HTTP2Limits/peerResets`` allows
        /// (rapid reset).
        case tooManyResets
        /// More SETTINGS, PING and PRIORITY frames than ``HTTP2Limits/controlFrames`` allows.
        case tooManyControlFrames
        /// A header list so far past the limit that its stream is not worth refusing on its own (an HPACK bomb).
        case headerListFlood

        public var description: String {
            switch self {
            case .protocolError(let message): "HTTP/2 protocol error: \(message)"
            case .tooManyResets: "too many streams reset by the peer before their answer"
            case .tooManyControlFrames: "too many SETTINGS, PING or PRIORITY frames"
            case .headerListFlood: "a header list far over the limit"
            }
        }
    }

    /// The limits every HTTP session keeps, and HTTP/2's own.
    public let limits: HTTPServerLimits
    public let http2Limits: HTTP2Limits
    /// A request arrived whole (its stream's identifier, the request). Called after ``receive(_:)`` has handed
    /// nghttp2 the bytes, never from inside it.
    public var onRequest: (Int32, HTTPRequest) -> Void = { _, _ in }
    /// A stream was refused before its request was complete: answer it with the error's status (413, 431, 408).
    public var onRefusal: (Int32, HTTPRequestError) -> Void = { _, _ in }
    /// The session ended the connection (GOAWAY queued); the output still holds what should be sent.
    public private(set) var failure: Failure?

    private let session: OpaquePointer
    private var streams: [Int32: StreamState] = [:]
    /// Requests completed and refusals decided during the current ``receive(_:)``, handed out after it.
    private var completed: [(Int32, HTTPRequest)] = []
    private var refused: [(Int32, HTTPRequestError)] = []
    private var receiving = false
    /// Requests received whole on this connection.
    private var requestsTaken = 0
    private var resets: TokenBucket
    private var controlFrames: TokenBucket
    private let clock: () -> ContinuousClock.Instant

    /// What is kept of a stream between its first HEADERS and its close.
    private final class StreamState {
        var method: HTTPMethod?
        var target: [UInt8] = []
        var headers = HTTPHeaders()
        var headerListBytes = 0
        var body: [UInt8] = []
        var refused = false
        /// The request arrived whole and is the handler's: the request timeout no longer applies (as in HTTP/1.1,
        /// it bounds the request's arrival, not the handler's work).
        var arrived = false
        /// The answer's HEADERS are submitted: a reset after that is an ordinary cancel, not an abuse.
        var answered = false
        /// The answer's body, handed to nghttp2 chunk by chunk as flow control allows.
        var answerBody: [UInt8] = []
        var answerOffset = 0
        let opened: ContinuousClock.Instant
        init(opened: ContinuousClock.Instant) { self.opened = opened }
    }

    /// A server session within `limits` and `http2Limits`; `clock` tells the time for the request timeout and the
    /// rate limits. The server's SETTINGS are queued: ``drainOutput(_:)`` gives them.
    public init(
        limits: HTTPServerLimits, http2Limits: HTTP2Limits = HTTP2Limits(), clock: @escaping () -> ContinuousClock.Instant = { .now }
    ) {
        self.limits = limits
        self.http2Limits = http2Limits
        self.clock = clock
        self.resets = TokenBucket(http2Limits.peerResets, now: clock())
        self.controlFrames = TokenBucket(http2Limits.controlFrames, now: clock())
        var option: OpaquePointer?
        nghttp2_option_new(&option)
        // nghttp2's own bounds, built into Debian's 1.52 by its security updates: CONTINUATION frames per header
        // block (CVE-2024-28182), RST_STREAM rate (CVE-2023-44487), queued SETTINGS and PING acknowledgements, and
        // SETTINGS entries per frame.
        nghttp2_option_set_max_continuations(option, 8)
        nghttp2_option_set_stream_reset_rate_limit(option, UInt64(http2Limits.peerResets.burst), UInt64(http2Limits.peerResets.perSecond))
        nghttp2_option_set_max_outbound_ack(option, 1000)
        nghttp2_option_set_max_settings(option, 32)
        var created: OpaquePointer?
        let result = nghttp2_session_server_new2(&created, HTTP2ServerSession.callbacks, nil, option)
        nghttp2_option_del(option)
        precondition(result == 0, "nghttp2_session_server_new2 failed: \(String(cString: nghttp2_strerror(result)))")
        session = created!
        nghttp2_session_set_user_data(session, Unmanaged.passUnretained(self).toOpaque())
        var settings = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue),
                value: UInt32(clamping: http2Limits.maximumConcurrentStreams)),
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(clamping: limits.maximumHeaderBytes)),
        ]
        nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
    }

    deinit { nghttp2_session_del(session) }

    /// Hands the peer's bytes to nghttp2, then the requests they completed to ``onRequest`` and the streams they
    /// got refused to ``onRefusal``. Returns `false` when the session has ended (``failure`` says why): send what
    /// ``drainOutput(_:)`` gives (a GOAWAY, when there is one), then close.
    @discardableResult
    public func receive(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard failure == nil, let base = bytes.baseAddress else { return failure == nil }
        receiving = true
        let result = nghttp2_session_mem_recv(session, base.assumingMemoryBound(to: UInt8.self), bytes.count)
        receiving = false
        if result < 0, failure == nil {
            failure = .protocolError(String(cString: nghttp2_strerror(Int32(result))))
            // nghttp2 stops at a fatal error without a GOAWAY of its own: the peer is told why, unless what it
            // sent was not HTTP/2 at all.
            let flood = [NGHTTP2_ERR_FLOODED, NGHTTP2_ERR_TOO_MANY_CONTINUATIONS].contains { $0.rawValue == Int32(result) }
            if Int32(result) != NGHTTP2_ERR_BAD_CLIENT_MAGIC.rawValue {
                nghttp2_session_terminate_session(session, (flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR).rawValue)
            }
        }
        let requests = completed
        let refusals = refused
        completed.removeAll(keepingCapacity: true)
        refused.removeAll(keepingCapacity: true)
        for (streamID, error) in refusals { onRefusal(streamID, error) }
        for (streamID, request) in requests { onRequest(streamID, request) }
        return failure == nil
    }

    /// Gives the bytes nghttp2 has to send (frames, answers as far as flow control allows), in pieces valid only
    /// during each call, until `write` returns `false` (the rest stays in nghttp2 for the next call).
    public func drainOutput(_ write: (UnsafeRawBufferPointer) -> Bool) {
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &data)
            guard count > 0, let data else {
                if count < 0, failure == nil { failure = .protocolError(String(cString: nghttp2_strerror(Int32(count)))) }
                return
            }
            guard write(UnsafeRawBufferPointer(start: data, count: count)) else { return }
        }
    }

    /// Whether the session is over: nothing more to read or to send (after a GOAWAY and the last stream's
    /// answer, or a failure).
    public var isFinished: Bool {
        failure != nil || (nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0)
    }

    /// Streams open now (a request being received or waiting for its answer).
    public var openStreams: Int { streams.count }

    /// Answers stream `streamID`: HEADERS with `:status`, `content-type`, `content-length` and the response's
    /// fields (names lowercased, as HTTP/2 requires; HTTP/1.1's connection fields left out), then the body in
    /// DATA frames as flow control allows (none for a HEAD request, whose `content-length` is the body's). Does
    /// nothing for a stream already closed (the peer cancelled it) or answered.
    public func respond(to streamID: Int32, _ response: HTTPResponse) {
        guard let stream = streams[streamID], !stream.answered else { return }
        stream.answered = true
        let body = stream.method == .head ? [] : response.body
        stream.answerBody = body
        stream.answerOffset = 0
        var fields: [(String, String)] = [(":status", String(response.status))]
        if let contentType = response.contentType { fields.append(("content-type", contentType)) }
        fields.append(("content-length", String(response.body.count)))
        for (name, value) in response.headers {
            let name = name.lowercased()
            if Self.connectionFields.contains(name) { continue }
            fields.append((name, value))
        }
        // nghttp2 copies the names and values: the storage only has to outlive the call.
        var storage: [UInt8] = []
        var ranges: [(name: Range<Int>, value: Range<Int>)] = []
        for (name, value) in fields {
            let nameStart = storage.count
            storage.append(contentsOf: name.utf8)
            let valueStart = storage.count
            storage.append(contentsOf: value.utf8)
            ranges.append((nameStart..<valueStart, valueStart..<storage.count))
        }
        storage.withUnsafeMutableBufferPointer { bytes in
            let base = bytes.baseAddress ?? UnsafeMutablePointer(bitPattern: 1)!
            var nva = ranges.map { range in
                nghttp2_nv(
                    name: base + range.name.lowerBound, value: base + range.value.lowerBound, namelen: range.name.count,
                    valuelen: range.value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue))
            }
            if body.isEmpty {
                nghttp2_submit_response(session, streamID, &nva, nva.count, nil)
            } else {
                var provider = nghttp2_data_provider(
                    source: nghttp2_data_source(ptr: nil),
                    read_callback: { session, streamID, buffer, length, flags, _, userData in
                        HTTP2ServerSession.from(userData).readAnswer(streamID: streamID, into: buffer!, length: length, flags: flags!)
                    })
                nghttp2_submit_response(session, streamID, &nva, nva.count, &provider)
            }
        }
    }

    /// HTTP/1.1's connection-specific fields, which an HTTP/2 message must not have (RFC 9113, 8.2.2).
    private static let connectionFields: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "content-length",
    ]

    /// Starts a graceful end: a GOAWAY naming the last stream taken; those streams are still answered, the
    /// session finishes after the last one.
    public func shutdown() {
        guard failure == nil else { return }
        nghttp2_submit_goaway(
            session, UInt8(NGHTTP2_FLAG_NONE.rawValue), nghttp2_session_get_last_proc_stream_id(session), NGHTTP2_NO_ERROR.rawValue, nil, 0)
    }

    /// Refuses (408) every stream whose request has not arrived whole within `timeout` of its first HEADERS.
    /// Returns the earliest time a stream whose request has not arrived whole will pass the timeout, if any.
    public func expireRequests() -> ContinuousClock.Instant? {
        let timeout = limits.requestTimeout
        let now = clock()
        var next: ContinuousClock.Instant?
        var expired: [Int32] = []
        for (id, stream) in streams where !stream.refused && !stream.arrived && !stream.answered {
            let deadline = stream.opened + timeout
            if deadline <= now {
                expired.append(id)
            } else {
                next = min(next ?? deadline, deadline)
            }
        }
        for id in expired.sorted() {
            streams[id]?.refused = true
            onRefusal(id, .timedOut(timeout))
        }
        return next
    }

    /// Ends the session at once with GOAWAY and `errorCode`, for abuse nghttp2 does not see as such.
    private func terminate(_ reason: Failure, errorCode: nghttp2_error_code = NGHTTP2_ENHANCE_YOUR_CALM) {
        guard failure == nil else { return }
        failure = reason
        nghttp2_session_terminate_session(session, errorCode.rawValue)
    }

    private func refuse(_ streamID: Int32, _ stream: StreamState, _ error: HTTPRequestError) {
        guard !stream.refused else { return }
        stream.refused = true
        stream.headers = HTTPHeaders()
        stream.body = []
        refused.append((streamID, error))
    }

    // MARK: nghttp2 callbacks (0 goes on; NGHTTP2_ERR_CALLBACK_FAILURE ends the session)

    private func beginHeaders(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        guard frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue), frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
        streams[frame.pointee.hd.stream_id] = StreamState(opened: clock())
        return 0
    }

    private func header(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Int32 {
        let streamID = frame.pointee.hd.stream_id
        guard let stream = streams[streamID] else { return 0 }
        // RFC 9113's size of a field: its name and value and 32 bytes of overhead (so that a list of empty
        // fields counts too).
        stream.headerListBytes += name.count + value.count + 32
        let limit = limits.maximumHeaderBytes
        if stream.headerListBytes > limit {
            // Far past the limit is a bomb (a small header block that HPACK makes large), not a mistake: the
            // connection ends rather than decoding the rest.
            if stream.headerListBytes > limit * HTTP2Limits.headerFloodFactor {
                terminate(.headerListFlood)
                return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
            }
            refuse(streamID, stream, .headerTooLarge(limit: limit))
            return 0
        }
        if stream.refused || frame.pointee.headers.cat != NGHTTP2_HCAT_REQUEST { return 0 }
        if name.first == UInt8(ascii: ":") {
            switch name.count {
            case 5 where name.elementsEqual(":path".utf8): stream.target = Array(value)
            case 7 where name.elementsEqual(":method".utf8): stream.method = HTTPMethod(String(decoding: value, as: UTF8.self))
            // `:authority` is the request's `host`, for handlers that read it as HTTP/1.1's.
            case 10 where name.elementsEqual(":authority".utf8):
                stream.headers.append(name: UnsafeRawBufferPointer(start: ("host" as StaticString).utf8Start, count: 4), value: value)
            default: break  // :scheme (nghttp2 checks it is there), and what nghttp2 refuses before us
            }
            return 0
        }
        if name.elementsEqual("content-length".utf8), let length = Int(String(decoding: value, as: UTF8.self)),
            length > limits.maximumBodyBytes
        {
            refuse(streamID, stream, .bodyTooLarge(size: length, limit: limits.maximumBodyBytes))
            return 0
        }
        stream.headers.append(name: name, value: value)
        return 0
    }

    private func dataChunk(streamID: Int32, _ data: UnsafeRawBufferPointer) -> Int32 {
        guard let stream = streams[streamID], !stream.refused else { return 0 }
        let size = stream.body.count + data.count
        guard size <= limits.maximumBodyBytes else {
            refuse(streamID, stream, .bodyTooLarge(size: size, limit: limits.maximumBodyBytes))
            return 0
        }
        stream.body.append(contentsOf: data)
        return 0
    }

    private func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) -> Int32 {
        let header = frame.pointee.hd
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
            guard header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0, let stream = streams[header.stream_id], !stream.refused
            else {
                return 0
            }
            requestsTaken += 1
            stream.arrived = true
            // The last request a connection may make: the GOAWAY that ends it goes out with its answer.
            if requestsTaken == limits.maximumRequestsPerConnection { shutdown() }
            completed.append(
                (
                    header.stream_id,
                    HTTPRequest(
                        method: stream.method ?? .get, targetBytes: stream.target, headers: stream.headers, body: stream.body,
                        version: .http2)
                ))
            stream.headers = HTTPHeaders()
            stream.body = []
        case NGHTTP2_SETTINGS.rawValue, NGHTTP2_PING.rawValue, NGHTTP2_PRIORITY.rawValue:
            if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { return 0 }
            if !controlFrames.take(now: clock()) {
                terminate(.tooManyControlFrames)
                return NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
            }
        default:
            break
        }
        return 0
    }

    private func streamClosed(_ streamID: Int32, errorCode: UInt32) -> Int32 {
        guard let stream = streams.removeValue(forKey: streamID) else { return 0 }
        // A request the peer cancelled before it was answered: cheap for the peer, not for us (CVE-2023-44487).
        if !stream.answered, errorCode != NGHTTP2_NO_ERROR.rawValue, !resets.take(now: clock()) {
            terminate(.tooManyResets)
            return receiving ? NGHTTP2_ERR_CALLBACK_FAILURE.rawValue : 0
        }
        return 0
    }

    private func readAnswer(streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>)
        -> Int
    {
        guard let stream = streams[streamID] else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let count = min(length, stream.answerBody.count - stream.answerOffset)
        stream.answerBody.withUnsafeBytes { bytes in
            UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + stream.answerOffset, byteCount: count)
        }
        stream.answerOffset += count
        if stream.answerOffset == stream.answerBody.count {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            stream.answerBody = []
        }
        return count
    }

    private static func from(_ userData: UnsafeMutableRawPointer?) -> HTTP2ServerSession {
        Unmanaged<HTTP2ServerSession>.fromOpaque(userData!).takeUnretainedValue()
    }

    /// The callbacks, shared by every session (nghttp2 copies them at session creation).
    nonisolated(unsafe) private static let callbacks: OpaquePointer = {
        var callbacks: OpaquePointer?
        nghttp2_session_callbacks_new(&callbacks)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, userData in
            from(userData).beginHeaders(frame!)
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, userData in
            from(userData).header(
                frame!, name: UnsafeRawBufferPointer(start: name, count: nameLength),
                value: UnsafeRawBufferPointer(start: value, count: valueLength))
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, length, userData in
            from(userData).dataChunk(streamID: streamID, UnsafeRawBufferPointer(start: data, count: length))
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, userData in
            from(userData).frameReceived(frame!)
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, userData in
            from(userData).streamClosed(streamID, errorCode: errorCode)
        }
        return callbacks!
    }()
}

/// A token bucket: `burst` tokens at first and at most, `perSecond` more each second.
struct TokenBucket {
    private let capacity: Double
    private let perSecond: Double
    private var tokens: Double
    private var last: ContinuousClock.Instant

    init(_ rate: HTTP2Limits.Rate, now: ContinuousClock.Instant) {
        capacity = Double(rate.burst)
        perSecond = Double(rate.perSecond)
        tokens = capacity
        last = now
    }

    /// Takes a token; `false` when none is left.
    mutating func take(now: ContinuousClock.Instant) -> Bool {
        let elapsed = now - last
        last = now
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        tokens = min(capacity, tokens + seconds * perSecond)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
