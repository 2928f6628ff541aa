import CHTTPParser
import Herald

/// One HTTP connection: feeds bytes to http_parser, answers each request, writes the answers in request order
/// (pipelining), keeps the connection alive as HTTP/1.1 says.
final class HTTPSession: ReceiverSession, @unchecked Sendable {
    // @unchecked Sendable: only the idle timer's closure crosses into a @Sendable context, and it fires on the
    // loop thread, where all of the session's state lives.
    let connection: StreamConnection
    unowned let receiver: HTTPReceiver
    /// The receiver's options, copied once per connection: reading them through `receiver` copied the whole
    /// struct at each of the 13 reads per request.
    private let options: HTTPReceiver.Options
    /// `/v1/projects/{project}/messages:send` for this instance's project, matched whole before any splitting.
    private let sendPath: String
    /// `sendPath` as bytes, to recognise the request nearly every request is without making Strings of it.
    private let sendPathBytes: [UInt8]
    let context: PluginContext
    private let parser = UnsafeMutablePointer<http_parser>.allocate(capacity: 1)
    private var url: [UInt8] = []
    private var headers = RawHeaders()
    private var headerBytes = 0
    private var body: [UInt8] = []
    private var answers = OrderedAnswers<(bytes: [UInt8], close: Bool)>()
    private var isClosed = false
    /// No further request is parsed: the last one ended the connection, a limit was passed, or the peer ended.
    /// Bytes still arriving are read and dropped.
    private var closing = false
    private var peerHasEnded = false
    /// The last answer is written and the write side is shut down (or being shut down).
    private var finishing = false
    /// A request has begun and not yet ended.
    private var requestInProgress = false
    private var idleTimer: ScheduledTask?
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

    init(connection: StreamConnection, receiver: HTTPReceiver, context: PluginContext) {
        self.options = receiver.options
        self.sendPath = "/v1/projects/\(context.projectID)/messages:send"
        self.sendPathBytes = Array(sendPath.utf8)
        self.connection = connection
        self.receiver = receiver
        self.context = context
        http_parser_init(parser, HTTP_REQUEST)
        parser.pointee.data = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit { parser.deallocate() }

    func start() {
        connection.onRead = { [weak self] bytes in self?.read(bytes) }
        connection.onEnd = { [weak self] in self?.peerEnded() }
        connection.startReading()
        armIdleTimer()
    }

    func closed() {
        isClosed = true
        idleTimer?.cancel()
        requestTimer?.cancel()
    }

    private func armIdleTimer() {
        idleTimer?.cancel()
        idleTimer = context.loop.scheduleTask(in: options.idleTimeout) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.connection.close()
        }
    }

    private func read(_ bytes: UnsafeRawBufferPointer) {
        guard !closing else {
            if lingerStart != nil { lastLingerRead = .now }
            return
        }
        armIdleTimer()
        let parsed = http_parser_execute(parser, HTTPSession.settings, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        if closing { return }
        let errno = herald_http_errno(parser)
        if errno == HPE_HEADER_OVERFLOW {
            refuseHead()
        } else if parser.pointee.upgrade == 1 || errno != HPE_OK || parsed != bytes.count {
            let name = String(cString: http_errno_name(errno))
            respond(sequence: takeSequence(), status: 400, body: googleError(400, "INVALID_ARGUMENT", "Malformed HTTP request (\(name))."), close: true)
        } else if requestInProgress, requestTimer == nil {
            armRequestTimer()
        }
    }

    /// A request that does not arrive whole within `requestTimeout` of the read it began in (a client trickling
    /// bytes, each within the idle timeout) is answered 408 and the connection closed.
    private func armRequestTimer() {
        let timeout = options.requestTimeout
        requestTimer = context.loop.scheduleTask(in: timeout) { [weak self] in
            guard let self, !self.isClosed, !self.closing, self.requestInProgress else { return }
            let message = "The request did not arrive within \(timeout) of its first byte."
            self.respond(sequence: self.takeSequence(), status: 408, body: self.googleError(408, "DEADLINE_EXCEEDED", message), close: true)
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

    private func takeSequence() -> Int { answers.reserve() }

    // MARK: Parser callbacks (each returns nonzero to stop the parser: a limit was passed, or the connection is closing)

    fileprivate func beginMessage() -> Int32 {
        if closing { return 1 }
        url.removeAll(keepingCapacity: true)
        headers.removeAll()
        headerBytes = 0
        body.removeAll(keepingCapacity: true)
        requestInProgress = true
        return 0
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
            headers.appendName(data)
        } else {
            headers.appendValue(data)
        }
        return 0
    }

    fileprivate func headersComplete() -> Int32 {
        headers.close()
        // A body announced too large is refused from the head, without waiting for it.
        if parser.pointee.flags & UInt32(F_CHUNKED.rawValue) == 0, parser.pointee.content_length != UInt64.max,
           parser.pointee.content_length > UInt64(options.maximumBodyBytes) {
            return refuseBody(size: Int(clamping: parser.pointee.content_length))
        }
        return 0
    }

    fileprivate func bodyData(_ data: UnsafeRawBufferPointer) -> Int32 {
        guard body.count + data.count <= options.maximumBodyBytes else { return refuseBody(size: body.count + data.count) }
        body.append(contentsOf: data)
        return 0
    }

    /// 431 for a request head over `maximumHeaderBytes`, answered at once; the connection closes.
    @discardableResult
    private func refuseHead() -> Int32 {
        let limit = options.maximumHeaderBytes
        respond(sequence: takeSequence(), status: 431, body: limitError(431, "The request line and headers are over \(limit) bytes; at most \(limit) are allowed."), close: true)
        return 1
    }

    /// 413 for a body over `maximumBodyBytes` (announced, or counted as it comes), answered at once; the
    /// connection closes.
    private func refuseBody(size: Int) -> Int32 {
        let error = MessageError(.payloadTooLarge(size: size, limit: options.maximumBodyBytes))
        respond(sequence: takeSequence(), status: 413, body: limitError(413, error.message), close: true)
        return 1
    }

    fileprivate func completeMessage() -> Int32 {
        requestInProgress = false
        requestTimer?.cancel()
        requestTimer = nil
        let sequence = takeSequence()
        let keepAlive = http_should_keep_alive(parser) != 0 && sequence + 1 < options.maximumRequestsPerConnection
        // The last request of the connection: what is pipelined after it is neither parsed nor delivered.
        if !keepAlive { closing = true }
        if UInt32(parser.pointee.method) == HTTP_POST.rawValue, url == sendPathBytes {
            // The request nearly every request is, recognised from the bytes: no method or path String.
            routeSend(sequence: sequence, keepAlive: keepAlive)
        } else {
            let method = String(cString: http_method_str(http_method(rawValue: UInt32(parser.pointee.method))))
            let path = String(decoding: url, as: UTF8.self)
            route(method: method, path: path, sequence: sequence, keepAlive: keepAlive)
        }
        return keepAlive ? 0 : 1
    }

    // MARK: Routing

    /// `POST` to this instance's `sendPath` exactly (no query).
    private func routeSend(sequence: Int, keepAlive: Bool) {
        guard authorize(sequence: sequence, keepAlive: keepAlive) else { return }
        send(project: context.projectID, sequence: sequence, keepAlive: keepAlive)
    }

    /// Whether the request carries the bearer secret; when not, answers 401.
    private func authorize(sequence: Int, keepAlive: Bool) -> Bool {
        guard receiver.authorized(headers.value(of: "authorization")) else {
            let body = googleError(401, "UNAUTHENTICATED", "Request is missing or has an invalid bearer secret.")
            respond(sequence: sequence, status: 401, body: body, extraHeaders: ["WWW-Authenticate: Bearer"], close: !keepAlive)
            return false
        }
        return true
    }

    private func route(method: String, path: String, sequence: Int, keepAlive: Bool) {
        // Split on UTF-8 bytes, not Characters: grapheme breaking made path splitting a fifth of a request's work.
        let pathOnly: Substring = path.utf8.firstIndex(of: UInt8(ascii: "?")).map { path[..<$0] } ?? path[...]
        if pathOnly == "/healthz", method == "GET" {
            let ready = !context.bus.isDraining
            respond(sequence: sequence, status: ready ? 200 : 503, body: ["status": .string(ready ? "ready" : "draining")], close: !keepAlive)
            return
        }
        guard authorize(sequence: sequence, keepAlive: keepAlive) else { return }
        if method == "POST", pathOnly == sendPath {
            // The request nearly every request is: no splitting of the path.
            send(project: context.projectID, sequence: sequence, keepAlive: keepAlive)
            return
        }
        let parts = pathOnly.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map { Substring($0) }
        let isSend = parts.count == 4 && parts[0] == "v1" && parts[1] == "projects" && parts[3] == "messages:send"
        if options.forwarder != nil, !isSend {
            // A gateway passes sends on; what would act on this instance (topic management, APNs pushes to its
            // token) has no meaning there.
            let message = "This Herald is a gateway: it forwards POST /v1/projects/{project}/messages:send only. Manage topics on the instances themselves (herald topics, or their own HTTP endpoint)."
            respond(sequence: sequence, status: 501, body: googleError(501, "UNIMPLEMENTED", message), close: !keepAlive)
            return
        }
        if parts.count == 3, parts[0] == "3", parts[1] == "device" {
            routeAPNs(method: method, deviceToken: String(parts[2]), sequence: sequence, keepAlive: keepAlive)
            return
        }
        if parts.count == 2, parts[0] == "iid", parts[1] == "v1:batchAdd" || parts[1] == "v1:batchRemove" {
            routeInstanceID(method: method, add: parts[1] == "v1:batchAdd", sequence: sequence, keepAlive: keepAlive)
            return
        }
        if parts.count >= 6, parts[0] == "v1", parts[1] == "projects", parts[3] == "registrations", parts[5] == "topicSubscriptions" {
            routeTopics(method: method, path: path, parts: parts.map(String.init), sequence: sequence, keepAlive: keepAlive)
            return
        }
        guard parts.count == 4, parts[0] == "v1", parts[1] == "projects", parts[3] == "messages:send" else {
            respond(sequence: sequence, status: 404, body: googleError(404, "NOT_FOUND", "No route for \(method) \(pathOnly)."), close: !keepAlive)
            return
        }
        guard method == "POST" else {
            respond(sequence: sequence, status: 405, body: googleError(405, "METHOD_NOT_ALLOWED", "Use POST for messages:send."), close: !keepAlive)
            return
        }
        send(project: String(parts[2]), sequence: sequence, keepAlive: keepAlive)
    }

    /// `POST /v1/projects/{project}/messages:send`: submitted to the bus (forwarded, as a gateway) and answered.
    private func send(project: String, sequence: Int, keepAlive: Bool) {
        guard project == context.projectID else {
            let error = MessageError(.senderMismatch(expected: context.projectID, got: project))
            respond(sequence: sequence, status: error.status.httpStatus, body: error.fcmErrorBody, close: !keepAlive)
            return
        }
        context.bus.submit(body, SendContext(forwarder: options.forwarder)) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .accepted(let id):
                self.respondSent(sequence: sequence, project: project, messageID: id, close: !keepAlive)
            case .invalid(let error), .refused(let error):
                self.respond(sequence: sequence, status: error.status.httpStatus, body: error.fcmErrorBody, close: !keepAlive)
            }
        }
    }

    /// APNs provider style: `POST /3/device/{token}`, the payload as body, `apns-*` headers; 200 with `apns-id`,
    /// or APNs' status and `{"reason": ...}`.
    private func routeAPNs(method: String, deviceToken: String, sequence: Int, keepAlive: Bool) {
        guard method == "POST" else {
            respond(sequence: sequence, status: 405, body: ["reason": "MethodNotAllowed"], close: !keepAlive)
            return
        }
        let format = SendContext.Format.apns(headers: headers.dictionary(), deviceToken: deviceToken)
        context.bus.submit(body, SendContext(format: format)) { [weak self] outcome in
            guard let self else { return }
            switch outcome {
            case .accepted(let id):
                self.respond(sequence: sequence, status: 200, body: nil, extraHeaders: ["apns-id: \(id)"], close: !keepAlive)
            case .invalid(let error), .refused(let error):
                self.respond(sequence: sequence, status: HTTPSession.apnsStatus(error), body: ["reason": .string(error.apnsReason)], close: !keepAlive)
            }
        }
    }

    /// FCM topic management: `POST .../registrations/{token}/topicSubscriptions?topic_name=T` subscribes,
    /// `DELETE .../registrations/{token}/topicSubscriptions/{T}?allow_missing=true` unsubscribes.
    private func routeTopics(method: String, path: String, parts: [String], sequence: Int, keepAlive: Bool) {
        let project = parts[2]
        guard project == context.projectID else {
            let error = MessageError(.senderMismatch(expected: context.projectID, got: project))
            respond(sequence: sequence, status: error.status.httpStatus, body: error.fcmErrorBody, close: !keepAlive)
            return
        }
        let token = HTTPSession.percentDecoded(parts[4])
        let query = HTTPSession.queryItems(path)
        let topic: String?
        switch (method, parts.count) {
        case ("POST", 6): topic = query["topic_name"]
        case ("DELETE", 7): topic = HTTPSession.percentDecoded(parts[6])
        default:
            respond(sequence: sequence, status: 405, body: googleError(405, "METHOD_NOT_ALLOWED", "Use POST to subscribe and DELETE to unsubscribe."), close: !keepAlive)
            return
        }
        guard let topic else {
            respond(sequence: sequence, status: 400, body: MessageError(.missingField("topic_name")).fcmErrorBody, close: !keepAlive)
            return
        }
        let control = context.topics
        let allowMissing = query["allow_missing"] == "true"
        let resource = "projects/\(project)/registrations/\(token)/topicSubscriptions/\(topic)"
        Task(executorPreference: context.loop) { [weak self] in
            let answer: (Int, JSONValue)
            do {
                guard try await control.token() == token else {
                    let error = MessageError(.unregistered(.token(token)))
                    throw error
                }
                if method == "POST" {
                    try await control.subscribe(topic)
                    answer = (200, ["name": .string(resource)])
                } else if try await control.unsubscribe(topic) || allowMissing {
                    answer = (200, [:])
                } else {
                    answer = (404, ["error": ["code": 404, "message": .string("Not subscribed to \(topic)."), "status": "NOT_FOUND"]])
                }
            } catch let error as MessageError {
                answer = (error.status.httpStatus, error.fcmErrorBody)
            } catch {
                answer = (500, MessageError(.handlerFailed("\(error)")).fcmErrorBody)
            }
            self?.respond(sequence: sequence, status: answer.0, body: answer.1, close: !keepAlive)
        }
    }

    /// Topic management as the Instance ID API does it, which the Admin SDKs' older `subscribeToTopic` calls
    /// (and firebase-admin Python's `*_legacy` ones) use: `POST /iid/v1:batchAdd` or `:batchRemove` with
    /// `{"to": "/topics/T", "registration_tokens": [...]}`. Answers one result per token, in order: `{}` for this
    /// instance's token, `{"error": "NOT_FOUND"}` for any other; a bad request gets 400 and `{"error": "INVALID_ARGUMENT",
    /// "message": ...}` (IID's `{"error": code}` shape, with the reason beside it).
    private func routeInstanceID(method: String, add: Bool, sequence: Int, keepAlive: Bool) {
        guard method == "POST" else {
            respond(sequence: sequence, status: 405, body: ["error": "METHOD_NOT_ALLOWED", "message": "Use POST."], close: !keepAlive)
            return
        }
        let topic: String
        let tokens: [String]
        do {
            (topic, tokens) = try HTTPSession.decodeInstanceIDRequest(body)
        } catch {
            respond(sequence: sequence, status: 400, body: ["error": "INVALID_ARGUMENT", "message": .string(error.message)], close: !keepAlive)
            return
        }
        let control = context.topics
        Task(executorPreference: context.loop) { [weak self] in
            var results: [JSONValue] = []
            do {
                let mine = try await control.token()
                var applied = false
                for token in tokens {
                    guard token == mine else {
                        results.append(["error": "NOT_FOUND"])
                        continue
                    }
                    if !applied {
                        if add { try await control.subscribe(topic) } else { _ = try await control.unsubscribe(topic) }
                        applied = true
                    }
                    results.append([:])
                }
            } catch {
                let status = (error as? MessageError)?.status ?? .internal
                self?.respond(sequence: sequence, status: status.httpStatus, body: ["error": .string(status.rawValue), "message": .string("\(error)")], close: !keepAlive)
                return
            }
            self?.respond(sequence: sequence, status: 200, body: ["results": .array(results)], close: !keepAlive)
        }
    }

    /// The topic (without `/topics/`) and the tokens of an Instance ID batch request; at most 1000 tokens, as IID.
    static func decodeInstanceIDRequest(_ body: [UInt8]) throws(MessageError) -> (topic: String, tokens: [String]) {
        guard !body.isEmpty else { throw MessageError(.emptyPayload) }
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        guard let object = root.objectValue else { throw MessageError(.wrongType(field: "(root)", expected: "an object")) }
        for key in object.keys where key != "to" && key != "registration_tokens" {
            throw MessageError(.unknownField(key))
        }
        guard let to = object["to"] else { throw MessageError(.missingField("to")) }
        guard let toString = to.stringValue else { throw MessageError(.wrongType(field: "to", expected: "a string")) }
        let topic = try TopicName.validate(toString)
        guard let list = object["registration_tokens"] else { throw MessageError(.missingField("registration_tokens")) }
        guard let values = list.arrayValue, !values.isEmpty, values.count <= 1000 else {
            throw MessageError(.wrongType(field: "registration_tokens", expected: "an array of 1 to 1000 tokens"))
        }
        var tokens: [String] = []
        for value in values {
            guard let token = value.stringValue, !token.isEmpty else {
                throw MessageError(.wrongType(field: "registration_tokens", expected: "non-empty strings"))
            }
            tokens.append(token)
        }
        return (topic, tokens)
    }

    static func queryItems(_ path: String) -> [String: String] {
        guard let query = path.split(separator: "?", maxSplits: 1).dropFirst().first else { return [:] }
        var items: [String: String] = [:]
        for pair in query.split(separator: "&") {
            // Empty sides kept: `=` alone is an empty name, `=v` a value for it (omitting them left no parts for
            // `=`, and indexing that trapped: a crash of the daemon found by fuzzing).
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { percentDecoded(String($0)) }
            items[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return items
    }

    /// `%XX` and `+` decoded; malformed escapes are kept as written.
    static func percentDecoded(_ text: String) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
               let value = UInt8(String(decoding: iterator.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(value)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The HTTP status APNs answers a reason with.
    static func apnsStatus(_ error: MessageError) -> Int {
        switch error.reason {
        case .payloadTooLarge: 413
        case .busy: 429
        case .shuttingDown, .storeUnavailable: 503
        case .handlerFailed: 500
        default: 400
        }
    }

    private func googleError(_ code: Int, _ status: String, _ message: String) -> JSONValue {
        ["error": ["code": .int(Int64(code)), "message": .string(message), "status": .string(status)]]
    }

    /// A limit's answer (413, 431): `INVALID_ARGUMENT` as FCM says it, with the HTTP status as the code.
    private func limitError(_ code: Int, _ message: String) -> JSONValue {
        [
            "error": [
                "code": .int(Int64(code)), "message": .string(message), "status": "INVALID_ARGUMENT",
                "details": [["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"]],
            ],
        ]
    }

    // MARK: Answers

    private func respond(sequence: Int, status: Int, body: JSONValue?, extraHeaders: [String] = [], close: Bool) {
        guard !isClosed, !finishing else { return }
        let bodyBytes = body?.jsonBytes() ?? []
        var head = "HTTP/1.1 \(status) \(HTTPSession.reason(status))\r\n"
        if body != nil { head += "Content-Type: application/json; charset=UTF-8\r\n" }
        head += "Content-Length: \(bodyBytes.count)\r\n"
        for header in extraHeaders { head += header + "\r\n" }
        if close { head += "Connection: close\r\n" }
        head += "\r\n"
        if close { closing = true }
        write(answers.fill(sequence, with: (Array(head.utf8) + bodyBytes, close)))
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

    /// The 200 answer to a send, byte for byte what ``respond(sequence:status:body:extraHeaders:close:)`` writes
    /// for `fcmSendResponse(project:messageID:)`, built in place in the connection's outgoing bytes when it is next
    /// in order (every answer of a connection that waits for each, as HTTP/1.1 clients do).
    private func respondSent(sequence: Int, project: String, messageID: String, close: Bool) {
        guard !isClosed, !finishing, !close, answers.isNextToWrite(sequence) else {
            respond(sequence: sequence, status: 200, body: fcmSendResponse(project: project, messageID: messageID), close: close)
            return
        }
        let bodyLength = fcmSendResponseByteCount(project: project, messageID: messageID)
        connection.write { output in
            output.append(contentsOf: "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: ".utf8)
            output.append(contentsOf: String(bodyLength).utf8)
            output.append(contentsOf: "\r\n\r\n".utf8)
            appendFCMSendResponse(project: project, messageID: messageID, to: &output)
        }
        // Answers that were waiting for this one (rare: requests pipelined ahead of their answers).
        var ready: [(bytes: [UInt8], close: Bool)] = []
        answers.written(sequence) { ready.append($0) }
        write(ready)
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
        idleTimer = context.loop.scheduleTask(in: delay) { [weak self] in
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

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 413: "Payload Too Large"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }

    // MARK: C callbacks

    private static func session(_ parser: UnsafeMutablePointer<http_parser>?) -> HTTPSession {
        Unmanaged<HTTPSession>.fromOpaque(parser!.pointee.data).takeUnretainedValue()
    }

    /// The callbacks, shared by every session: read-only after this one-time initialisation, and at a stable
    /// address, so any number of loops may parse at once without an exclusive access.
    nonisolated(unsafe) static let settings: UnsafePointer<http_parser_settings> = {
        var settings = http_parser_settings()
        settings.on_message_begin = { parser in
            session(parser).beginMessage()
        }
        settings.on_url = { parser, at, length in
            session(parser).urlData(UnsafeRawBufferPointer(start: at, count: length))
        }
        settings.on_header_field = { parser, at, length in
            session(parser).headerData(UnsafeRawBufferPointer(start: at, count: length), field: true)
        }
        settings.on_header_value = { parser, at, length in
            session(parser).headerData(UnsafeRawBufferPointer(start: at, count: length), field: false)
        }
        settings.on_headers_complete = { parser in
            // 0 goes on; anything but 1 and 2 (which mean "no body" to http_parser) stops it.
            session(parser).headersComplete() == 0 ? 0 : -1
        }
        settings.on_body = { parser, at, length in
            session(parser).bodyData(UnsafeRawBufferPointer(start: at, count: length))
        }
        settings.on_message_complete = { parser in
            session(parser).completeMessage()
        }
        let stored = UnsafeMutablePointer<http_parser_settings>.allocate(capacity: 1)
        stored.initialize(to: settings)
        return UnsafePointer(stored)
    }()
}
