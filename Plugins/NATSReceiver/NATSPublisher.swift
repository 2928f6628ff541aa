import CNATS
import Herald

/// Publishes send bodies to Herald's NATS subjects (``NATSSubjects``), as `herald send --nats` does: token
/// messages through JetStream (answered once the stream has stored them), topic messages as core NATS requests
/// (answered by a subscribed instance).
///
/// A plain cnats connection with cnats's own threads (no event loop): every call blocks until it is answered or
/// times out, so call it from a thread that may block (a command's main task, a blocking pool).
public final class NATSPublisher: @unchecked Sendable {
    // @unchecked Sendable: cnats connections, JetStream contexts and key-value stores may be used from any thread;
    // the first two are immutable here, the stores sit behind a lock; all are destroyed in deinit.
    private let connection: OpaquePointer
    private let jetStream: OpaquePointer
    private let timeout: Duration
    /// Key-value buckets opened so far, by name: opening one is a round trip (stream info), so a gateway, which reads
    /// a registration per send, opens each once.
    private let buckets = Locked<[String: OpaquePointer]>([:])

    /// Connects to `servers` (with `options`' credentials, token and TLS files). Throws ``NATSReceiverError/connect(servers:detail:)``.
    /// With `reconnect` (a long-lived publisher such as ``NATSGateway``), a lost connection is regained as the
    /// receiver does (``NATSReceiver/Options/reconnectWait`` and its limits); ``isConnected`` says when it is up.
    public init(options: NATSReceiver.Options, timeout: Duration = .seconds(5), reconnect: Bool = false) throws {
        self.timeout = timeout
        let natsOptions = try NATSConnectionSettings.createOptions(servers: options.servers)
        defer { natsOptions_Destroy(natsOptions) }
        var status = NATSConnectionSettings.apply(options, to: natsOptions)
        if status == NATS_OK { status = natsOptions_SetAllowReconnect(natsOptions, reconnect) }
        if status == NATS_OK, reconnect {
            status = NATSConnectionSettings.run([
                { natsOptions_SetMaxReconnect(natsOptions, Int32(clamping: options.maxReconnectAttempts)) },
                { natsOptions_SetReconnectWait(natsOptions, options.reconnectWait.milliseconds) },
            ])
        }
        var connectionPointer: OpaquePointer?
        if status == NATS_OK { status = natsConnection_Connect(&connectionPointer, natsOptions) }
        guard status == NATS_OK, let connection = connectionPointer else {
            throw NATSReceiverError.connect(servers: options.servers, detail: String(cString: herald_nats_last_error(status)))
        }
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        jsOptions.Wait = timeout.milliseconds
        var jsPointer: OpaquePointer?
        guard natsConnection_JetStream(&jsPointer, connection, &jsOptions) == NATS_OK, let jetStream = jsPointer else {
            natsConnection_Destroy(connection)
            throw NATSReceiverError.jetStream(
                operation: "open a JetStream context", detail: String(cString: herald_nats_last_error(NATS_ERR)), code: 0)
        }
        self.connection = connection
        self.jetStream = jetStream
    }

    deinit {
        for bucket in buckets.withLock({ Array($0.values) }) { kvStore_Destroy(bucket) }
        jsCtx_Destroy(jetStream)
        natsConnection_Destroy(connection)
    }

    /// Creates the stream of `project`'s token messages as the receiver would (``NATSReceiver/Options``' stream
    /// name and limits) when it does not exist, so a message sent before any daemon started is kept for it.
    public func ensureStream(project: String, options: NATSReceiver.Options) throws {
        var code = jsErrCode(rawValue: 0)
        let stream = options.stream ?? NATSSubjects.streamName(project: project)
        let status = herald_nats_ensure_stream(
            jetStream, stream, NATSSubjects.allTokens(project: project), true, options.streamMaxAge.nanoseconds,
            Int64(options.streamMaxMessages), Int64(options.streamMaxBytes), options.duplicateWindow.nanoseconds,
            Int64(options.effectiveReplicas), &code
        )
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "create the stream \(stream)", detail: String(cString: herald_nats_last_error(status)), code: Int(code.rawValue))
        }
    }

    /// Publishes `body` to `subject` through JetStream and returns the message's ID as the receiver will give it
    /// (`nats-<stream>-<sequence>-<message ID>`) once the stream has stored it. `messageID` (the `Nats-Msg-Id`
    /// header; a random one when `nil`) makes retries within the stream's duplicate window one message.
    public func publishStored(_ subject: String, body: [UInt8], messageID: String? = nil) throws -> String {
        let messageID = messageID ?? String(UInt64.random(in: 1...UInt64.max), radix: 16)
        var sequence: UInt64 = 0
        var code = jsErrCode(rawValue: 0)
        var stream = [CChar](repeating: 0, count: 256)
        let status = body.withUnsafeBytes {
            herald_nats_publish_stored(
                jetStream, subject, $0.baseAddress, Int32($0.count), messageID, timeout.milliseconds, &sequence, &stream, stream.count,
                &code)
        }
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "store a message on \(subject)", detail: String(cString: herald_nats_last_error(status)),
                code: Int(code.rawValue))
        }
        let name = String(decoding: stream.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return "nats-\(name)-\(sequence)-\(messageID)"
    }

    /// A core NATS request: the answer of the instance that took it, or `nil` when no instance listens.
    public func request(_ subject: String, body: [UInt8]) throws -> [UInt8]? {
        var reply: OpaquePointer?
        let status = body.withUnsafeBytes {
            natsConnection_Request(&reply, connection, subject, $0.baseAddress, Int32($0.count), timeout.milliseconds)
        }
        if status == NATS_NO_RESPONDERS { return nil }
        guard status == NATS_OK, let reply else {
            throw NATSReceiverError.request(subject: subject, detail: String(cString: herald_nats_last_error(status)))
        }
        defer { natsMsg_Destroy(reply) }
        let length = Int(natsMsg_GetDataLength(reply))
        return natsMsg_GetData(reply).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
    }

    /// A core NATS publish: no answer, no storage. With `flush`, returns once the server has it.
    public func publish(_ subject: String, body: [UInt8], flush: Bool = true) throws {
        var status = body.withUnsafeBytes { natsConnection_Publish(connection, subject, $0.baseAddress, Int32($0.count)) }
        if status == NATS_OK, flush { status = natsConnection_FlushTimeout(connection, timeout.milliseconds) }
        guard status == NATS_OK else {
            throw NATSReceiverError.request(subject: subject, detail: String(cString: herald_nats_last_error(status)))
        }
    }

    /// The connection's state: `connected`, `reconnecting`, `closed` (as ``NATSReceiver/ConnectionState`` says it).
    public var connectionState: NATSReceiver.ConnectionState {
        switch natsConnection_Status(connection) {
        case NATS_CONN_STATUS_CONNECTED: .connected
        case NATS_CONN_STATUS_CLOSED: .closed
        case NATS_CONN_STATUS_CONNECTING: .connecting
        default: .reconnecting
        }
    }

    /// Whether the connection is up now.
    public var isConnected: Bool { natsConnection_Status(connection) == NATS_CONN_STATUS_CONNECTED }

    /// The token the registrations bucket holds under `key` (an installation ID, ``NATSSubjects/registrationKey(token:)``),
    /// or `nil` when it holds none (or the bucket does not exist yet).
    public func registeredToken(key: String, project: String, bucket: String? = nil) throws -> String? {
        let bucket = bucket ?? NATSSubjects.registrationBucket(project: project)
        let failure = { (status: natsStatus) in
            NATSReceiverError.jetStream(
                operation: "read the bucket \(bucket)", detail: String(cString: herald_nats_last_error(status)), code: 0)
        }
        var store = buckets.withLock { $0[bucket] }
        if store == nil {
            var opened: OpaquePointer?
            let status = js_KeyValue(&opened, jetStream, bucket)
            // No bucket yet: no instance has registered. Not remembered, so the bucket is found once it exists.
            if status == NATS_NOT_FOUND { return nil }
            guard status == NATS_OK, let opened else { throw failure(status) }
            store = buckets.withLock { buckets in
                if let existing = buckets[bucket] {
                    kvStore_Destroy(opened)
                    return existing
                }
                buckets[bucket] = opened
                return opened
            }
        }
        var entry: OpaquePointer?
        let status = kvStore_Get(&entry, store, key)
        if status == NATS_NOT_FOUND { return nil }
        guard status == NATS_OK, let entry else { throw failure(status) }
        defer { kvEntry_Destroy(entry) }
        return kvEntry_ValueString(entry).map { String(cString: $0) }
    }

    /// Whether `token` is the current token of an instance of the fleet: the registrations bucket (as the
    /// receivers write it) holds it under its installation ID. A gateway answers `UNREGISTERED` when it is not.
    public func isRegistered(token: String, project: String, bucket: String? = nil) throws -> Bool {
        try registeredToken(key: NATSSubjects.registrationKey(token: token), project: project, bucket: bucket) == token
    }

    /// Messages `stream` holds now: with work-queue retention, stored and not yet acknowledged.
    public func storedMessages(stream: String) throws -> UInt64 {
        var count: UInt64 = 0
        var code = jsErrCode(rawValue: 0)
        let status = herald_nats_stream_messages(jetStream, stream, &count, &code)
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "read the stream \(stream)", detail: String(cString: herald_nats_last_error(status)), code: Int(code.rawValue))
        }
        return count
    }
}
