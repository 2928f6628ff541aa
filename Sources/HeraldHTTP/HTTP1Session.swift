import CHTTPParser
public import HeraldEventLoop

/// One HTTP/1.1 connection on http_parser: reads each request whole, hands it to the handler, writes the answers
/// in request order (pipelining, however they complete), keeps the connection alive as HTTP/1.1 says, and
/// enforces the ``HTTPServerLimits``.
///
/// What http_parser lets through and RFC 9112 says a server must refuse is refused with 400 (folded header lines,
/// whitespace before a colon, no or several `Host` fields, a bad chunked framing); `Expect: 100-continue` is
/// answered `100 Continue` before the body is read, or with the final answer when the handler refuses the request
/// from its head (``HTTPRequestHandler/handleHead(_:responder:)``). A connection ends with a lingering close: its
/// write side shut, what the peer still sends read and dropped for a while, so that a refusal is read before a
/// reset could destroy it.
///
/// Loop thread only: create it in the listener's accept callback, call ``start()``, and ``closed()`` from the
/// connection's `onClose`.
public final class HTTP1Session: HTTPResponseSink, @unchecked Sendable {
    // @unchecked Sendable: only the timers' closures cross into a @Sendable context, and they fire on the loop
    // thread, where all of the session's state lives.
    private let connection: StreamConnection
    private let loop: EventLoop
    private let handler: any HTTPRequestHandler
    /// The limits, copied once per connection.
    private let options: HTTPServerLimits
    private let parser = UnsafeMutablePointer<http_parser>.allocate(capacity: 1)
    // Unchecked for exclusivity: touched on the loop thread only, and no access to them spans a call that could
    // come back to this session (each is changed by its own methods; waiting answers are collected, then written):
    // the run-time checks cost about 100 instructions each, a dozen per request.
    @exclusivity(unchecked) private var url: [UInt8] = []
    @exclusivity(unchecked) private var headers = HTTPHeaders()
    @exclusivity(unchecked) private var headerBytes = 0
    @exclusivity(unchecked) private var body: [UInt8] = []
    @exclusivity(unchecked) private var answers = OrderedAnswers<(bytes: [UInt8], close: Bool)>()
    /// The place in the answer order of the last request of the connection, once known: its answer closes it.
    private var lastSequence: Int?
    private var isClosed = false
    /// No further request is parsed: the last one ended the connection, a limit was passed, or the peer ended.
    /// Bytes still arriving are read and dropped.
    private var closing = false
    private var peerHasEnded = false
    /// The last answer is written and the write side is shut down (or being shut down).
    private var finishing = false
    /// A request has begun and not yet ended.
    private var requestInProgress = false
    /// The parser is in a request's head (request line and header lines): the bytes it reads are scanned for
    /// what http_parser lets through and RFC 9112 says a server must refuse.
    private var inHead = false
    /// The last head byte scanned was a line feed: a space or tab after it begins a folded line (obs-fold) or a
    /// whitespace-preceded first header line.
    private var afterLineFeed = false
    /// A header line of this head began with whitespace.
    private var foldedLine = false
    /// A header name of this head holds a space: whitespace between a name and its colon (http_parser, built
    /// lenient, takes the space into the name).
    private var spaceInName = false
    /// The request's body is chunked: the bytes around its data (chunk-size lines, the CRLF after each chunk's
    /// data, trailers) are scanned, as http_parser, built lenient, takes any two bytes after a chunk's data for
    /// its CRLF and any byte after a CR in a chunk-size line for its LF.
    private var chunkedBody = false
    /// Where the bytes not yet scanned of the current read begin (chunked bodies only).
    private var framingStart: UnsafeRawPointer?
    /// The last framing byte was a CR (a LF must follow).
    private var framingCR = false
    /// How many bytes of the CRLF after a chunk's data are still to come.
    private var chunkEndBytes = 0
    /// A bare CR, or a chunk's data not followed by CRLF.
    private var badFraming = false
    /// The parser paused where a chunked request ends: it is answered once its last framing bytes are checked.
    private var chunkedRequestEnded = false
    /// The place in the answer order taken by a request answered from its head (`Expect: 100-continue`) whose
    /// route then needed its body after all.
    private var reservedSequence: Int?
    private var idleTimer: ScheduledTask?
    /// When the connection closes for idleness: ``HTTPServerLimits/idleTimeout`` after its last read. A read only
    /// moves it; the timer, armed once, looks at it when it fires and waits the rest (cancelling the timer and
    /// scheduling a new one at each read cost two allocations and a timer-heap insertion per request).
    private var idleDeadline = Deadline(uptimeNanoseconds: 0)
    /// Runs while a request takes more than the read it began in; most never need it.
    private var requestTimer: ScheduledTask?
    /// When the connection began lingering (its answers written, its write side shut), and when the peer last
    /// sent something since.
    private var lingerStart: ContinuousClock.Instant?
    private var lastLingerRead: ContinuousClock.Instant?
    /// A lingering connection closes after this much silence from the peer...
    private var lingerSilence: Duration { min(options.idleTimeout, .seconds(2)) }
    /// ...or this long after it began lingering, whatever the peer does.
    private var lingerLimit: Duration { min(options.idleTimeout, .seconds(30)) }

    /// A session for `connection` (on `loop`), answering with `handler` within `limits`.
    public init(connection: StreamConnection, loop: EventLoop, handler: any HTTPRequestHandler, limits: HTTPServerLimits) {
        self.options = limits
        self.connection = connection
        self.loop = loop
        self.handler = handler
        http_parser_init(parser, HTTP_REQUEST)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit { parser.deallocate() }

    /// Sets the connection's read callbacks, starts reading and the idle timer.
    public func start() {
        connection.onRead = { [weak self] bytes in self?.read(bytes) }
        connection.onEnd = { [weak self] in self?.peerEnded() }
        connection.startReading()
        idleDeadline = loop.now + options.idleTimeout
        armIdleTimer()
    }

    /// The connection has closed: cancels the timers.
    public func closed() {
        isClosed = true
        idleTimer?.cancel()
        requestTimer?.cancel()
    }

    private func armIdleTimer() {
        idleTimer = loop.scheduleTask(deadline: idleDeadline) { [weak self] in
            guard let self, !self.isClosed else { return }
            if self.loop.now < self.idleDeadline {
                self.armIdleTimer()
            } else {
                self.connection.close()
            }
        }
    }

    private func read(_ bytes: UnsafeRawBufferPointer) {
        guard !closing else {
            if lingerStart != nil { lastLingerRead = .now }
            return
        }
        idleDeadline = loop.now + options.idleTimeout
        guard let base = bytes.baseAddress else { return }
        // The parser pauses where a request begins and where its head ends: the bytes between are the head,
        // scanned here, and the head is checked before its body is read.
        var offset = 0
        var errno = HPE_OK
        while offset < bytes.count {
            let scanning = inHead
            let scanningFraming = chunkedBody
            framingStart = UnsafeRawPointer(base + offset)
            let parsed = http_parser_execute(
                parser, HTTP1Session.settings, (base + offset).assumingMemoryBound(to: CChar.self), bytes.count - offset)
            if scanning { scanHead(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + parsed])) }
            if scanningFraming, let start = framingStart {
                scanFraming(UnsafeRawBufferPointer(start: start, count: base + offset + parsed - start))
            }
            offset += parsed
            if closing { return }
            errno = herald_http_errno(parser)
            guard errno == HPE_PAUSED else { break }
            errno = HPE_OK
            http_parser_pause(parser, 0)
            if chunkedRequestEnded {
                chunkedRequestEnded = false
                chunkedBody = false
                if badFraming || framingCR {
                    _ = refuseMalformed("A bare CR in the chunked body's framing, or a chunk's data not followed by CRLF.")
                    return
                }
                if !finishMessage() { return }
                continue
            }
            // Paused on the head's last line feed: anything after it is the body.
            if !inHead, requestInProgress, !acceptHead(bodyBytesRead: offset + 1 < bytes.count) { return }
        }
        if errno == HPE_HEADER_OVERFLOW {
            refuseHead()
        } else if parser.pointee.upgrade == 1 || errno != HPE_OK || offset != bytes.count {
            refuse(.unparsable(String(cString: http_errno_name(errno))))
        } else if requestInProgress, requestTimer == nil {
            armRequestTimer()
        }
    }

    /// A request that does not arrive whole within `requestTimeout` of the read it began in (a client trickling
    /// bytes, each within the idle timeout) is answered 408 and the connection closed.
    private func armRequestTimer() {
        let timeout = options.requestTimeout
        requestTimer = loop.scheduleTask(in: timeout) { [weak self] in
            guard let self, !self.isClosed, !self.closing, self.requestInProgress else { return }
            self.refuse(.timedOut(timeout))
        }
    }

    private func peerEnded() {
        peerHasEnded = true
        requestTimer?.cancel()
        if finishing {
            connection.close()
            return
        }
        closing = true
        finishIfDone()
    }

    /// The place in the answer order of the request being read: the one its head took, if it took one.
    private func takeSequence() -> Int {
        guard let sequence = reservedSequence else { return answers.reserve() }
        reservedSequence = nil
        return sequence
    }

    // MARK: Parser callbacks (each returns nonzero to stop the parser: a limit was passed, or the connection is closing)

    fileprivate func beginMessage() -> Int32 {
        if closing { return 1 }
        url.removeAll(keepingCapacity: true)
        headers.removeAll()
        headerBytes = 0
        body.removeAll(keepingCapacity: true)
        requestInProgress = true
        inHead = true
        afterLineFeed = false
        foldedLine = false
        spaceInName = false
        chunkedBody = false
        framingCR = false
        chunkEndBytes = 0
        badFraming = false
        http_parser_pause(parser, 1)
        return 0
    }

    /// Notes a line of the head that begins with a space or tab: a folded line (obs-fold), or whitespace before
    /// the first header line. The head's last line feed is not scanned (the parser pauses on it).
    private func scanHead(_ bytes: UnsafeRawBufferPointer) {
        var afterLineFeed = self.afterLineFeed
        for byte in bytes {
            if afterLineFeed, byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { foldedLine = true }
            afterLineFeed = byte == UInt8(ascii: "\n")
        }
        self.afterLineFeed = afterLineFeed
    }

    /// Checks bytes of a chunked body outside its data: every CR is followed by a LF, and a chunk's data by CRLF.
    private func scanFraming(_ bytes: UnsafeRawBufferPointer) {
        for byte in bytes {
            if chunkEndBytes > 0 {
                if byte != (chunkEndBytes == 2 ? UInt8(ascii: "\r") : UInt8(ascii: "\n")) { badFraming = true }
                chunkEndBytes -= 1
                continue
            }
            if framingCR, byte != UInt8(ascii: "\n") { badFraming = true }
            framingCR = byte == UInt8(ascii: "\r")
        }
    }

    fileprivate func urlData(_ data: UnsafeRawBufferPointer) -> Int32 {
        headerBytes += data.count
        guard headerBytes <= options.maximumHeaderBytes else { return refuseHead() }
        url.append(contentsOf: data)
        return 0
    }

    fileprivate func headerData(_ data: UnsafeRawBufferPointer, field: Bool) -> Int32 {
        headerBytes += data.count
        guard headerBytes <= options.maximumHeaderBytes else { return refuseHead() }
        if field {
            if data.contains(UInt8(ascii: " ")) { spaceInName = true }
            headers.appendName(data)
        } else {
            headers.appendValue(data)
        }
        return 0
    }

    fileprivate func headersComplete() -> Int32 {
        headers.close()
        inHead = false
        http_parser_pause(parser, 1)
        return 0
    }

    /// The head of a request is complete and its body not yet read: refuses (400 and a close) what RFC 9112 says
    /// a server must refuse and http_parser lets through, a body announced too large (413, without waiting for
    /// it), and answers `Expect`. Returns whether the request goes on.
    private func acceptHead(bodyBytesRead: Bool) -> Bool {
        if foldedLine {
            return refuseMalformed("A header line begins with whitespace (obs-fold line folding, or whitespace before the first header).")
        }
        if spaceInName { return refuseMalformed("Whitespace between a header field name and its colon.") }
        let http11 = parser.pointee.http_major == 1 && parser.pointee.http_minor >= 1
        switch headers.count(of: "host") {
        case 0 where http11: return refuseMalformed("An HTTP/1.1 request needs a Host header.")
        case 0: break
        case 1: if !headers.hasValidHost { return refuseMalformed("The Host header is not a host and port.") }
        default: return refuseMalformed("More than one Host header.")
        }
        let chunked = parser.pointee.flags & UInt32(F_CHUNKED.rawValue) != 0
        chunkedBody = chunked
        let length = parser.pointee.content_length
        if !chunked, length != UInt64.max, length > UInt64(options.maximumBodyBytes) {
            refuseBody(size: Int(clamping: length))
            return false
        }
        guard http11, let expectation = headers.value(of: "expect") else { return true }
        guard expectation.lowercased() == "100-continue" else {
            refuse(.unsupportedExpectation(expectation))
            return false
        }
        guard chunked || (length != 0 && length != UInt64.max), !bodyBytesRead else { return true }
        // A request refused from its head is answered now, and its body never read: the connection closes.
        let sequence = takeSequence()
        lastSequence = sequence
        if handler.handleHead(request(), responder: HTTPResponder(sink: self, slot: sequence)) {
            closing = true
            return false
        }
        lastSequence = nil
        reservedSequence = sequence
        if answers.isNextToWrite(sequence) {
            connection.write { $0.append(contentsOf: "HTTP/1.1 100 Continue\r\n\r\n".utf8) }
        }
        return true
    }

    /// 400 for a request http_parser took but RFC 9112 says a server must refuse; the connection closes.
    private func refuseMalformed(_ message: String) -> Bool {
        refuse(.malformed(message))
        return false
    }

    /// Answers the request being read with the handler's answer to `error`; the connection closes.
    private func refuse(_ error: HTTPRequestError) {
        write(handler.response(to: error), sequence: takeSequence(), close: true)
    }

    fileprivate func bodyData(_ data: UnsafeRawBufferPointer) -> Int32 {
        guard body.count + data.count <= options.maximumBodyBytes else { return refuseBody(size: body.count + data.count) }
        body.append(contentsOf: data)
        if chunkedBody, let start = framingStart, let dataStart = data.baseAddress {
            scanFraming(UnsafeRawBufferPointer(start: start, count: dataStart - start))
            framingStart = dataStart + data.count
            // The chunk's data is complete: its CRLF comes next.
            if parser.pointee.content_length == 0 { chunkEndBytes = 2 }
        }
        return 0
    }

    /// 431 for a request head over `maximumHeaderBytes`, answered at once; the connection closes.
    @discardableResult
    private func refuseHead() -> Int32 {
        refuse(.headerTooLarge(limit: options.maximumHeaderBytes))
        return 1
    }

    /// 413 for a body over `maximumBodyBytes` (announced, or counted as it comes), answered at once; the
    /// connection closes.
    @discardableResult
    private func refuseBody(size: Int) -> Int32 {
        refuse(.bodyTooLarge(size: size, limit: options.maximumBodyBytes))
        return 1
    }

    fileprivate func completeMessage() -> Int32 {
        if chunkedBody {
            // Answered in read(), once the last framing bytes are checked.
            chunkedRequestEnded = true
            http_parser_pause(parser, 1)
            return 0
        }
        return finishMessage() ? 0 : 1
    }

    /// Answers the request just read; returns whether the connection goes on.
    private func finishMessage() -> Bool {
        requestInProgress = false
        requestTimer?.cancel()
        requestTimer = nil
        let sequence = takeSequence()
        let keepAlive = http_should_keep_alive(parser) != 0 && sequence + 1 < options.maximumRequestsPerConnection
        // The last request of the connection: what is pipelined after it is neither parsed nor delivered.
        if !keepAlive {
            closing = true
            lastSequence = sequence
        }
        handler.handle(request(), responder: HTTPResponder(sink: self, slot: sequence))
        // The target's and body's storage is kept for the next request, unless a large request grew it.
        KeptStorage.releaseIfGrown(&body)
        KeptStorage.releaseIfGrown(&url)
        return keepAlive
    }

    /// The request being read, on the session's buffers (a handler that keeps them makes them copy).
    private func request() -> HTTPRequest {
        let version = HTTPVersion(major: Int(parser.pointee.http_major), minor: Int(parser.pointee.http_minor))
        return HTTPRequest(method: method, targetBytes: url, headers: headers, body: body, version: version)
    }

    /// The request's method; the common ones without making a `String`.
    private var method: HTTPMethod {
        switch http_method(rawValue: UInt32(parser.pointee.method)) {
        case HTTP_POST: .post
        case HTTP_GET: .get
        case HTTP_DELETE: .delete
        case HTTP_PUT: .put
        case HTTP_HEAD: .head
        case let other: HTTPMethod(String(cString: http_method_str(other)))
        }
    }

    // MARK: Answers

    /// A handler's answer for place `slot`; it closes the connection when its request was the last.
    public func respond(_ response: HTTPResponse, slot: Int) {
        write(response, sequence: slot, close: slot == lastSequence)
    }

    /// Writes `response` when it is next in order, built in place in the connection's outgoing bytes (every
    /// answer of a connection that waits for each, as HTTP/1.1 clients do); keeps it until its turn otherwise.
    private func write(_ response: HTTPResponse, sequence: Int, close: Bool) {
        guard !isClosed, !finishing else { return }
        if close { closing = true }
        guard answers.isNextToWrite(sequence) else {
            var bytes: [UInt8] = []
            Self.append(response, close: close, to: &bytes)
            write(answers.fill(sequence, with: (bytes, close)))
            return
        }
        connection.write { Self.append(response, close: close, to: &$0) }
        if close {
            answers.written(sequence) { _ in }
            answers.discardWaiting()
            finish()
            return
        }
        // Answers that were waiting for this one (rare: requests pipelined ahead of their answers).
        var ready: [(bytes: [UInt8], close: Bool)] = []
        answers.written(sequence) { ready.append($0) }
        write(ready)
    }

    /// The answer as HTTP/1.1 writes it: status line, `Content-Type`, `Content-Length`, the other fields,
    /// `Connection: close` when it is the last, and the body. The head is written into a buffer on the stack and
    /// appended once: appending each piece to the array cost more than the rest of the answer.
    static func append(_ response: HTTPResponse, close: Bool, to output: inout [UInt8]) {
        var capacity = 512
        while true {
            let written = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
                var head = HeadWriter(buffer)
                head.write("HTTP/1.1 ")
                head.write(decimal: response.status)
                head.write(" ")
                head.write(HTTPStatus.reasonPhrase(response.status))
                if let type = response.contentType {
                    head.write("\r\nContent-Type: ")
                    head.write(type)
                }
                head.write("\r\nContent-Length: ")
                head.write(decimal: response.body.count)
                for field in response.headers {
                    head.write("\r\n")
                    head.write(field.name)
                    head.write(": ")
                    head.write(field.value)
                }
                if close { head.write("\r\nConnection: close") }
                head.write("\r\n\r\n")
                guard head.count <= buffer.count else {
                    capacity = head.count
                    return false
                }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[..<head.count]))
                return true
            }
            if written { break }
        }
        output.append(contentsOf: response.body)
    }

    /// Writes answers now ready, in order; after one that closes the connection, the rest are dropped.
    private func write(_ ready: [(bytes: [UInt8], close: Bool)]) {
        for answer in ready {
            connection.write(answer.bytes)
            if answer.close {
                answers.discardWaiting()
                finish()
                return
            }
        }
        finishIfDone()
    }

    private func finishIfDone() {
        guard closing, answers.allWritten else { return }
        finish()
    }

    /// Ends the connection once its last answer is written: shuts the write side down (the peer reads the
    /// answers, then end of file), then closes when the peer ends too. A peer still sending (a refused 10 MB
    /// body) is read and dropped meanwhile, until it is silent for `lingerSilence` or for at most `lingerLimit`:
    /// closing with unread bytes would reset the connection, and a reset can destroy the answer before the peer
    /// reads it. (nginx's lingering close, for the same reason.)
    private func finish() {
        guard !finishing, !isClosed else { return }
        finishing = true
        closing = true
        requestTimer?.cancel()
        connection.shutdownWriting { [weak self] _ in
            guard let self, !self.isClosed else { return }
            if self.peerHasEnded {
                self.connection.close()
                return
            }
            self.lingerStart = .now
            self.lastLingerRead = .now
            self.checkLinger(in: self.lingerSilence)
        }
    }

    private func checkLinger(in delay: Duration) {
        idleTimer?.cancel()
        idleTimer = loop.scheduleTask(in: delay) { [weak self] in
            guard let self, !self.isClosed, let start = self.lingerStart, let last = self.lastLingerRead else { return }
            let now = ContinuousClock.now
            let left = min(self.lingerSilence - (now - last), self.lingerLimit - (now - start))
            if left <= .zero {
                self.connection.close()
            } else {
                self.checkLinger(in: left)
            }
        }
    }

    // MARK: C callbacks

    /// Runs `body` with the session parsing with `parser`, without retaining it: the session is parsing, so it is alive
    /// for the callback, and it is weakly referenced (its closures), so each retain and release would go through its
    /// side table, eleven pairs a request.
    private static func session(_ parser: UnsafeMutablePointer<http_parser>?, _ body: (HTTP1Session) -> Int32) -> Int32 {
        Unmanaged<HTTP1Session>.fromOpaque(parser!.pointee.data)._withUnsafeGuaranteedRef(body)
    }

    /// The room the session's target and body storage have now, for the tests.
    var retainedCapacity: (target: Int, body: Int) { (url.capacity, body.capacity) }

    /// The callbacks, shared by every session: read-only after this one-time initialisation, and at a stable
    /// address, so any number of loops may parse at once without an exclusive access.
    nonisolated(unsafe) static let settings: UnsafePointer<http_parser_settings> = {
        var settings = http_parser_settings()
        settings.on_message_begin = { parser in
            session(parser) { $0.beginMessage() }
        }
        settings.on_url = { parser, at, length in
            session(parser) { $0.urlData(UnsafeRawBufferPointer(start: at, count: length)) }
        }
        settings.on_header_field = { parser, at, length in
            session(parser) { $0.headerData(UnsafeRawBufferPointer(start: at, count: length), field: true) }
        }
        settings.on_header_value = { parser, at, length in
            session(parser) { $0.headerData(UnsafeRawBufferPointer(start: at, count: length), field: false) }
        }
        settings.on_headers_complete = { parser in
            // 0 goes on; anything but 1 and 2 (which mean "no body" to http_parser) stops it.
            session(parser) { $0.headersComplete() } == 0 ? 0 : -1
        }
        settings.on_body = { parser, at, length in
            session(parser) { $0.bodyData(UnsafeRawBufferPointer(start: at, count: length)) }
        }
        settings.on_message_complete = { parser in
            session(parser) { $0.completeMessage() }
        }
        let stored = UnsafeMutablePointer<http_parser_settings>.allocate(capacity: 1)
        stored.initialize(to: settings)
        return UnsafePointer(stored)
    }()
}

/// Writes a head's bytes into a buffer, counting what does not fit (the caller tries again with room for it).
private struct HeadWriter {
    let buffer: UnsafeMutableBufferPointer<UInt8>
    /// The bytes written, and those that did not fit.
    var count = 0

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

    mutating func write(_ text: StaticString) {
        copy(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// A native string's bytes are read where they are (a `var` copy for `withUTF8` cost a retain and a release per
    /// field); a copy is made only for one without contiguous UTF-8.
    mutating func write(_ text: String) {
        if text.utf8.withContiguousStorageIfAvailable({ copy(UnsafeRawBufferPointer($0)) }) == nil {
            var text = text
            text.withUTF8 { copy(UnsafeRawBufferPointer($0)) }
        }
    }

    /// A non-negative number in decimal.
    mutating func write(decimal value: Int) {
        var digits = 1
        var rest = value / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        defer { count += digits }
        guard count + digits <= buffer.count, let base = buffer.baseAddress else { return }
        rest = value
        var index = count + digits
        repeat {
            index -= 1
            base[index] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
            rest /= 10
        } while index > count
    }

    private mutating func copy(_ bytes: UnsafeRawBufferPointer) {
        defer { count += bytes.count }
        guard count + bytes.count <= buffer.count, let base = buffer.baseAddress, let source = bytes.baseAddress else { return }
        UnsafeMutableRawPointer(base + count).copyMemory(from: source, byteCount: bytes.count)
    }
}
