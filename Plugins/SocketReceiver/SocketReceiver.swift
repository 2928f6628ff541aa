import Glibc
public import Herald
public import HeraldTLS

/// Receives FCM v1 send bodies over Unix or TCP stream sockets, one JSON object per line
/// (`{"message": {...}, "validate_only": false}`), and answers one JSON line per message, in order:
/// `{"name": "projects/{project}/messages/{id}"}` or Google's error shape `{"error": {...}}`.
///
/// A line `{"respond": {"message_id": "…", "action": "…", "text": "…"}}` is a person's response to a presented
/// notification instead (`MessageBus.respond(to:action:userText:)`), for daemons without a desktop and for
/// scripts: `action` is `default` (the default, when left out), `dismiss`, or one of the category's actions; `text`
/// is a text-input action's text. It is answered `{"responded": {"message_id": "…", "action": "…"}}`, or with
/// `NOT_FOUND` naming an unknown message and `INVALID_ARGUMENT` naming an unknown action or a bad request.
///
/// A line `{"app_state": "active"}` or `{"app_state": "background"}` tells the bus whether the host's app is in use
/// (`MessageBus.applicationState`); it is answered `{"app_state": "…"}`, or `INVALID_ARGUMENT` for another value.
///
/// With the durable inbox the answer is written once the message is committed. A line longer than
/// ``Options/maximumLineBytes`` is answered with `INVALID_ARGUMENT` and the connection is closed; a client
/// silent for ``Options/idleTimeout`` is closed; a client that half-closes gets its remaining answers and then
/// end-of-file. When the bus is full every connection stops being read until it has room again.
public final class SocketReceiver: Receiver, @unchecked Sendable {
    // @unchecked Sendable: `options` is immutable; everything else is touched on the loop thread only
    // (start, stop, pause and resume hop to it; socket callbacks run on it).

    /// Where and how the receiver listens.
    public struct Options: Sendable {
        /// The addresses to listen on: Unix socket paths and TCP host:port pairs.
        public var addresses: [SocketAddress]
        /// The longest line (one message) accepted, in bytes.
        public var maximumLineBytes: Int = 64 * 1024
        /// How long a connection may stay silent (no bytes read) before it is closed.
        public var idleTimeout: Duration = .seconds(60)
        /// How long one line may take from its first byte to its newline; a client that trickles a line
        /// slower than this (one byte a second, say) is closed, as HTTP closes a slow header.
        public var lineTimeout: Duration = .seconds(10)
        /// The most connections open at once; more are closed as they are accepted.
        public var maximumConnections: Int = 1024
        /// The file mode of Unix socket files: 0600 by default, so only the daemon's user may send. Use 0660
        /// (with the daemon's group) to let a group of senders in.
        public var unixSocketMode: UInt32 = 0o600
        /// The receiver has no authentication of its own (a Unix socket's file mode is its access control), so a TCP
        /// address that is not loopback is refused at start unless this is `true`: set it only on a network where
        /// everyone who can connect may send.
        public var allowUnauthenticatedNetwork = false
        /// TLS for the TCP addresses (Unix sockets stay plain); `nil`: none. The lines are the same inside TLS; no
        /// application protocol is negotiated (the protocol has no ALPN name).
        public var tls: TLSServerContext?

        public init(addresses: [SocketAddress]) {
            self.addresses = addresses
        }
    }

    /// Refused configurations.
    public enum ConfigurationError: Error, CustomStringConvertible {
        /// A TCP address beyond loopback without ``Options/allowUnauthenticatedNetwork``.
        case unauthenticatedNetworkAddress(SocketAddress)
        public var description: String {
            switch self {
            case .unauthenticatedNetworkAddress(let address):
                "refusing to listen on \(address): the socket receiver has no authentication, so it listens on Unix sockets and loopback addresses only unless allowed to listen beyond them (allowUnauthenticatedNetwork)"
            }
        }
    }

    public let options: Options
    private var context: PluginContext?
    private var listener: ReceiverListener<LineSession>?

    public init(options: Options) {
        self.options = options
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "socket", summary: "FCM v1 send bodies as JSON lines over Unix and TCP sockets")
    }

    /// The addresses actually listened on (TCP port 0 replaced by the chosen port), once started.
    public func listeningAddresses() async throws -> [SocketAddress] {
        guard let context else { return [] }
        return try await context.loop.submit { self.listener?.localAddresses ?? [] }
    }

    /// The room each open connection's line storage has (what it keeps between lines), for the tests.
    package func lineStorageRooms() async throws -> [Int] {
        guard let context else { return [] }
        return try await context.loop.submit { self.listener?.openSessions.map(\.lineStorageRoom) ?? [] }
    }

    public func start(_ context: PluginContext) async throws {
        if !options.allowUnauthenticatedNetwork, let address = options.addresses.first(where: { !$0.isLoopback }) {
            throw ConfigurationError.unauthenticatedNetworkAddress(address)
        }
        self.context = context
        for case .unix(let path) in options.addresses where Self.removeIfStale(path) {
            context.logger.notice("removed a stale socket file left by a process that ended", metadata: ["path": "\(path)"])
        }
        try await context.loop.submit {
            let listener = ReceiverListener(
                context: context, maximumConnections: self.options.maximumConnections, security: self.options.tls
            ) { connection in
                LineSession(connection: connection, context: context, options: self.options)
            }
            try listener.listen(on: self.options.addresses, unixMode: self.options.unixSocketMode)
            self.listener = listener
        }
    }

    /// Removes `path` when it is a socket file no one listens on (left by a daemon that was killed), so a
    /// restart does not fail with `EADDRINUSE`. Anything else at the path — a regular file, a socket someone
    /// listens on — is left alone, and listening then fails with `EADDRINUSE`.
    static func removeIfStale(_ path: String) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK else { return false }
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return false }
        defer { close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result != 0, errno == ECONNREFUSED else { return false }
        return unlink(path) == 0
    }

    public func stop() async {
        guard let context else { return }
        // Returns once every connection has closed, its answers out (or its peer took none of them for a second).
        await context.loop.submit { done in
            guard let listener = self.listener else { return done() }
            self.listener = nil
            listener.close(completion: done)
        }
    }

    public var openConnections: Int { listener?.connectionCount ?? 0 }

    public func pause() { listener?.pause() }

    public func resume() { listener?.resume() }
}

/// One connection: splits lines, submits each to the bus, and writes the answers in order.
final class LineSession: ReceiverSession, SubmissionAnswering, @unchecked Sendable {
    // @unchecked Sendable: only its idle timer's closure crosses into a @Sendable context, and that timer
    // fires on the loop thread, where all of the session's state lives.
    let connection: StreamConnection
    let context: PluginContext
    let options: SocketReceiver.Options
    // Unchecked for exclusivity: touched on the loop thread only, and no access to them spans a call that could
    // come back to this session (each is changed by its own methods; waiting answers are written after `answers`
    // is done with): the run-time checks cost about 100 instructions each, several per line.
    @exclusivity(unchecked) private var buffer: [UInt8] = []
    /// Bytes read while the bus was full, offered when it has room again.
    @exclusivity(unchecked) private var held: [UInt8] = []
    @exclusivity(unchecked) private var answers = OrderedAnswers<[UInt8]>()
    private var ended = false
    private var closeAfterAnswers = false
    private var idleTimer: ScheduledTask?
    private var lineTimer: ScheduledTask?
    private var isClosed = false
    /// Writes the answers to accepted sends (the project's part made once).
    private let sendAnswers: FCMSendResponseWriter

    init(connection: StreamConnection, context: PluginContext, options: SocketReceiver.Options) {
        self.connection = connection
        self.context = context
        self.options = options
        self.sendAnswers = FCMSendResponseWriter(project: context.projectID)
    }

    func start() {
        connection.onRead = { [weak self] bytes in self?.read(bytes) }
        connection.onEnd = { [weak self] in self?.peerEnded() }
        connection.startReading()
        armIdleTimer()
    }

    func close() {
        guard !isClosed else { return }
        connection.close()
    }

    func closed() {
        isClosed = true
        idleTimer?.cancel()
        lineTimer?.cancel()
    }

    private func armIdleTimer() {
        idleTimer?.cancel()
        let connection = self.connection
        let loop = context.loop
        idleTimer = loop.scheduleTask(in: options.idleTimeout) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.context.logger.info("closing an idle connection", metadata: ["peer": "\(connection.label)"])
            self.close()
        }
    }

    private func read(_ bytes: UnsafeRawBufferPointer) {
        guard !closeAfterAnswers else { return }
        armIdleTimer()
        if !held.isEmpty {
            held.append(contentsOf: bytes)
            connection.pauseReading()
            return
        }
        consume(bytes)
    }

    /// Splits `bytes` into lines and offers each; stops at a line boundary when the bus fills up, holding the
    /// rest (and reading no more) until ``resumed()``, so pipelined lines wait instead of being refused.
    private func consume(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        while start < bytes.count, let found = memchr(bytes.baseAddress! + start, Int32(UInt8(ascii: "\n")), bytes.count - start) {
            let index = bytes.baseAddress!.distance(to: UnsafeRawPointer(found))
            buffer.append(contentsOf: bytes[start..<index])
            handleLine()
            start = index + 1
            if closeAfterAnswers { return }
            if start < bytes.count, context.bus.isFull {
                held.append(contentsOf: bytes[start...])
                connection.pauseReading()
                return
            }
        }
        buffer.append(contentsOf: bytes[start...])
        if buffer.count > options.maximumLineBytes {
            refuseOversizedLine()
        } else if !buffer.isEmpty, lineTimer == nil {
            armLineTimer()
        }
    }

    func resumed() {
        guard !held.isEmpty, !isClosed else { return }
        let pending = held
        held = []
        pending.withUnsafeBytes { consume($0) }
        if !held.isEmpty { connection.pauseReading() }
        finishIfDone()
    }

    /// A line has started: it must end within the line timeout.
    private func armLineTimer() {
        let connection = self.connection
        lineTimer = context.loop.scheduleTask(in: options.lineTimeout) { [weak self] in
            guard let self, !self.isClosed else { return }
            self.context.logger.info(
                "closing a connection whose line did not end in time",
                metadata: [
                    "peer": "\(connection.label)", "bytes": "\(self.buffer.count)", "timeout": "\(self.options.lineTimeout)",
                ])
            self.close()
        }
    }

    /// The room the line storage has now. Loop thread only.
    var lineStorageRoom: Int { buffer.capacity }

    private func handleLine() {
        // The line's storage is kept for the next one, unless a large line grew it.
        defer {
            buffer.removeAll(keepingCapacity: true)
            KeptStorage.releaseIfGrown(&buffer)
        }
        lineTimer?.cancel()
        lineTimer = nil
        if buffer.last == UInt8(ascii: "\r") { buffer.removeLast() }
        guard !buffer.isEmpty else { return }
        let sequence = answers.reserve()
        if buffer.count > options.maximumLineBytes {
            refuse(sequence, MessageError(.payloadTooLarge(size: buffer.count, limit: options.maximumLineBytes)))
            return
        }
        switch ResponseRequest.kind(of: buffer) {
        case .respond:
            respond(sequence)
            return
        case .applicationState:
            setApplicationState(sequence)
            return
        case .send:
            break
        }
        // The bus answers through `answer(_:tag:)` with the line's place in the order: no closure per line.
        context.bus.submit(buffer, SendContext(), answering: self, tag: sequence)
    }

    func answer(_ outcome: SendOutcome, tag sequence: Int) {
        switch outcome {
        case .accepted(let id): answerSent(sequence, messageID: id)
        case .invalid(let error), .refused(let error): answer(sequence, error.fcmErrorBody)
        }
    }

    /// A `respond` line: the response goes to the bus; the answer says whether it was taken.
    private func respond(_ sequence: Int) {
        let request: ResponseRequest
        switch ResponseRequest.parse(buffer) {
        case .success(let parsed): request = parsed
        case .failure(let invalid):
            answer(sequence, ResponseRequest.errorBody(code: 400, status: "INVALID_ARGUMENT", invalid.message))
            return
        }
        let bus = context.bus
        Task(executorPreference: context.loop.taskExecutor) { [weak self] in
            do {
                try await bus.respond(to: request.messageID, action: request.action, userText: request.text)
                self?.answer(sequence, ["responded": ["message_id": .string(request.messageID), "action": .string(request.action)]])
            } catch HeraldError.unknownMessage(let id) {
                self?.answer(sequence, ResponseRequest.errorBody(code: 404, status: "NOT_FOUND", "\(HeraldError.unknownMessage(id))"))
            } catch {
                self?.answer(sequence, ResponseRequest.errorBody(code: 400, status: "INVALID_ARGUMENT", "\(error)"))
            }
        }
    }

    /// An `app_state` line: the bus's application state is set; the answer repeats it.
    private func setApplicationState(_ sequence: Int) {
        guard let value = try? JSONParser.parse(buffer), case .object(let root) = value, root.count == 1,
            let name = root["app_state"]?.stringValue, let state = ApplicationState(rawValue: name)
        else {
            answer(
                sequence,
                ResponseRequest.errorBody(
                    code: 400, status: "INVALID_ARGUMENT",
                    #"an app_state request is {"app_state": "active"} or {"app_state": "background"} and nothing else"#))
            return
        }
        context.bus.applicationState = state
        answer(sequence, ["app_state": .string(state.rawValue)])
    }

    /// `{"name":"projects/{project}/messages/{id}"}` and a newline, written straight into the connection's
    /// outgoing bytes when it is next in order (the common case: no answer is built on its own).
    private func answerSent(_ sequence: Int, messageID: String) {
        guard !isClosed else { return }
        let sendAnswers = self.sendAnswers
        guard answers.isNextToWrite(sequence) else {
            var line: [UInt8] = []
            sendAnswers.append(messageID: messageID, to: &line)
            line.append(UInt8(ascii: "\n"))
            answer(sequence, line: line)
            return
        }
        connection.write { output in
            sendAnswers.append(messageID: messageID, to: &output)
            output.append(UInt8(ascii: "\n"))
        }
        // Answers that were waiting for this one (rare: lines pipelined ahead of their answers), written once
        // `answers` is no longer being changed: a write that fails closes the connection and runs its handlers.
        var ready: [[UInt8]] = []
        answers.written(sequence) { ready.append($0) }
        for line in ready { connection.write(line) }
        finishIfDone()
    }

    /// A line that cannot end within the limit: answer it, stop reading, close once the answers are written.
    private func refuseOversizedLine() {
        let sequence = answers.reserve()
        buffer.removeAll()
        refuse(sequence, MessageError(.payloadTooLarge(size: options.maximumLineBytes + 1, limit: options.maximumLineBytes)))
    }

    private func refuse(_ sequence: Int, _ error: MessageError) {
        context.bus.recordInvalid(error)
        closeAfterAnswers = true
        connection.pauseReading()
        answer(sequence, error.fcmErrorBody)
    }

    private func peerEnded() {
        ended = true
        finishIfDone()
    }

    private func answer(_ sequence: Int, _ body: JSONValue) {
        var line = body.jsonBytes()
        line.append(UInt8(ascii: "\n"))
        answer(sequence, line: line)
    }

    private func answer(_ sequence: Int, line: [UInt8]) {
        guard !isClosed else { return }
        for ready in answers.fill(sequence, with: line) { connection.write(ready) }
        finishIfDone()
    }

    private func finishIfDone() {
        guard !isClosed, ended || closeAfterAnswers, answers.allWritten, held.isEmpty || closeAfterAnswers else { return }
        connection.shutdownWriting { [weak self] _ in self?.close() }
    }
}

/// A `{"respond": {...}}` line of the socket receiver.
struct ResponseRequest: Equatable {
    /// What is wrong with a respond request.
    struct Invalid: Error, Equatable {
        var message: String
        init(_ message: String) { self.message = message }
    }

    var messageID: String
    var action: String
    var text: String?

    /// What a line of the socket asks for, by its first member.
    enum LineKind {
        /// `{"respond": ...}`: a person's response.
        case respond
        /// `{"app_state": ...}`: the application state.
        case applicationState
        /// Anything else: a send request (or a line that is not valid, which the bus names).
        case send
    }

    /// What `line` asks for: a JSON object whose first member is `"respond"` or `"app_state"`, or a send. Checked
    /// without parsing and asked of every line the socket reads, most of them sends, which pay for one byte's
    /// comparison after the first key's quote.
    static func kind(of line: [UInt8]) -> LineKind {
        var index = skippingSpace(line, from: line.startIndex)
        guard index < line.endIndex, line[index] == UInt8(ascii: "{") else { return .send }
        index = skippingSpace(line, from: index + 1)
        guard index + 1 < line.endIndex, line[index] == UInt8(ascii: "\"") else { return .send }
        switch line[index + 1] {
        case UInt8(ascii: "r"): return names(line, from: index + 1, "respond") ? .respond : .send
        case UInt8(ascii: "a"): return names(line, from: index + 1, "app_state") ? .applicationState : .send
        default: return .send
        }
    }

    /// Whether the key starting at `start` (after its opening quote) is `name`: its bytes and the closing quote.
    private static func names(_ line: [UInt8], from start: Int, _ name: StaticString) -> Bool {
        // Compared byte by byte, nothing allocated. The index is a plain local, not one captured by a closure (which
        // would cost run-time exclusivity checks).
        name.withUTF8Buffer { name in
            guard line.endIndex - start > name.count else { return false }
            for offset in 0..<name.count where line[start + offset] != name[offset] { return false }
            return line[start + name.count] == UInt8(ascii: "\"")
        }
    }

    /// The index of the first byte at or after `index` that is not JSON whitespace (or the end).
    private static func skippingSpace(_ line: [UInt8], from index: Int) -> Int {
        var index = index
        while index < line.endIndex {
            let byte = line[index]
            guard byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A else { break }
            index += 1
        }
        return index
    }

    /// The request, or what is wrong with it.
    static func parse(_ line: [UInt8]) -> Result<ResponseRequest, Invalid> {
        guard let value = try? JSONParser.parse(line), case .object(let root) = value else {
            return .failure(Invalid("the respond request is not valid JSON"))
        }
        guard root.count == 1, case .object(let fields)? = root["respond"] else {
            return .failure(
                Invalid("a respond request is {\"respond\": {\"message_id\": ..., \"action\": ..., \"text\": ...}} and nothing else"))
        }
        if let unknown = fields.keys.first(where: { !["message_id", "action", "text"].contains($0) }) {
            return .failure(Invalid("unknown field '\(unknown)' in the respond request"))
        }
        guard let messageID = fields["message_id"]?.stringValue, !messageID.isEmpty else {
            return .failure(Invalid("the respond request needs message_id, a string"))
        }
        for name in ["action", "text"] where fields[name] != nil && fields[name]?.stringValue == nil {
            return .failure(Invalid("\(name) in the respond request must be a string"))
        }
        let action: String =
            switch fields["action"]?.stringValue {
            case nil, "default": NotificationResponse.defaultActionIdentifier
            case "dismiss": NotificationResponse.dismissActionIdentifier
            case let other?: other
            }
        return .success(ResponseRequest(messageID: messageID, action: action, text: fields["text"]?.stringValue))
    }

    static func errorBody(code: Int, status: String, _ message: String) -> JSONValue {
        ["error": ["code": .int(Int64(code)), "message": .string(message), "status": .string(status)]]
    }
}
