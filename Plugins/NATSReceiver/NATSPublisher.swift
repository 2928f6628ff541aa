import CNATS
import Glibc
public import Herald

/// Publishes send bodies to Herald's NATS subjects (``NATSSubjects``), as `herald send --nats` does: token
/// messages through JetStream (answered once the stream has stored them), topic messages as core NATS requests
/// (answered by a subscribed instance).
///
/// A plain cnats connection, with cnats's own threads or (a gateway's, ``init(options:timeout:reconnect:loop:)``)
/// on Herald's loop: every call but the pipeline's blocks until it is answered or times out, so call it from a
/// thread that may block (a command's main task, a blocking pool), never from the loop thread of a publisher on the
/// loop (the loop reads the answers).
public final class NATSPublisher: @unchecked Sendable {
    // @unchecked Sendable: cnats connections, JetStream contexts and key-value stores may be used from any thread;
    // the first two are immutable here, the stores sit behind a lock; all are destroyed in deinit. `place` is used
    // on the loop thread only, and freed by shutdown().
    private let connection: OpaquePointer
    /// The loop the connection runs on, and the adapter's place there; `nil` with cnats's own threads.
    private let loop: EventLoop?
    private let place: OpaquePointer?
    /// Whether ``shutdown()`` has begun (a publisher on a loop).
    private let shutDown = Locked(false)
    private let jetStream: OpaquePointer
    private let timeout: Duration
    /// Key-value buckets opened so far, by name: opening one is a round trip (stream info), so a gateway, which reads
    /// a registration per send, opens each once.
    private let buckets = Locked<[String: OpaquePointer]>([:])
    /// The registrations bucket as a watch keeps it (``watchRegistrations(bucket:)``).
    private let registrations = WatchedBucket()
    /// The senders bucket as a watch keeps it (``watchSenders(bucket:changed:)``).
    private let sendersCopy = WatchedBucket()
    /// Sends answered later without a thread waiting for each (``startPipeline()``, ``storePipelined(_:body:messageID:)``).
    private let pipeline: NATSPipeline

    /// Connects to `servers` (with `options`' credentials, token and TLS files). Throws ``NATSReceiverError/connect(servers:detail:)``.
    /// With `reconnect` (a long-lived publisher such as ``NATSGateway``), a lost connection is regained as the
    /// receiver does (``NATSReceiver/Options/reconnectWait`` and its limits); ``isConnected`` says when it is up.
    public convenience init(options: NATSReceiver.Options, timeout: Duration = .seconds(5), reconnect: Bool = false) throws {
        try self.init(options: options, timeout: timeout, reconnect: reconnect, loop: nil)
    }

    /// A publisher as ``init(options:timeout:reconnect:)`` makes it; with `loop` (called on its thread, which it
    /// blocks while it connects, as ``NATSReceiver`` does), the connection's socket is read and written on that loop
    /// through Herald's cnats adapter, and the pipeline's answers are taken there (no thread of cnats's between the
    /// socket and a gateway's sends); close such a publisher with ``shutdown()`` before the loop stops.
    public init(options: NATSReceiver.Options, timeout: Duration = .seconds(5), reconnect: Bool = false, loop: EventLoop?) throws {
        self.timeout = timeout
        let natsOptions = try NATSConnectionSettings.createOptions(servers: options.servers)
        defer { natsOptions_Destroy(natsOptions) }
        var place: OpaquePointer?
        if let loop {
            loop.preconditionInEventLoop()
            place = herald_nats_loop_create(loop.uv)
            if place == nil { throw NATSReceiverError.connect(servers: options.servers, detail: "out of memory") }
        }
        var status = NATSConnectionSettings.apply(options, to: natsOptions)
        if status == NATS_OK { status = natsOptions_SetAllowReconnect(natsOptions, reconnect) }
        // Each publish written out at once, not after cnats's flusher thread has slept its 1 ms to gather more: the
        // pipeline's sends are answered a round trip after their publish, and with a few dozen in flight that
        // millisecond halved the acknowledged publishes per second (Benchmarks/scripts/jetstream-ceiling.c).
        if status == NATS_OK { status = natsOptions_SetSendAsap(natsOptions, true) }
        if status == NATS_OK, reconnect {
            status = NATSConnectionSettings.run([
                { natsOptions_SetMaxReconnect(natsOptions, Int32(clamping: options.maxReconnectAttempts)) },
                { natsOptions_SetReconnectWait(natsOptions, options.reconnectWait.milliseconds) },
            ])
        }
        // A lost connection fails the pipeline's sends in flight at once; the closed callback, cnats's last, lets go
        // of the pipeline.
        let pipeline = NATSPipeline(timeout: timeout)
        let relay = Unmanaged.passRetained(pipeline).toOpaque()
        if status == NATS_OK {
            status = NATSConnectionSettings.run([
                {
                    natsOptions_SetDisconnectedCB(
                        natsOptions,
                        { _, closure in closure.map { Unmanaged<NATSPipeline>.fromOpaque($0).takeUnretainedValue().connectionLost() } },
                        relay)
                },
                {
                    natsOptions_SetClosedCB(
                        natsOptions, { _, closure in closure.map { Unmanaged<NATSPipeline>.fromOpaque($0).release() } }, relay)
                },
            ])
        }
        if status == NATS_OK, let place { status = herald_nats_use_loop(natsOptions, place) }
        var connectionPointer: OpaquePointer?
        if status == NATS_OK { status = natsConnection_Connect(&connectionPointer, natsOptions) }
        guard status == NATS_OK, let connection = connectionPointer else {
            Unmanaged<NATSPipeline>.fromOpaque(relay).release()
            if let place { herald_nats_loop_free(place) }
            throw NATSReceiverError.connect(servers: options.servers, detail: String(cString: herald_nats_last_error(status)))
        }
        if let place { herald_nats_loop_set_deliver(place, NATSPipeline.deliver) }
        self.loop = loop
        self.place = place
        self.pipeline = pipeline
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        jsOptions.Wait = timeout.milliseconds
        var jsPointer: OpaquePointer?
        guard natsConnection_JetStream(&jsPointer, connection, &jsOptions) == NATS_OK, let jetStream = jsPointer else {
            // On a loop, the adapter's place is left (a few bytes): it may be freed only once the loop has closed
            // the handles the connection's close asks it to.
            natsConnection_Destroy(connection)
            throw NATSReceiverError.jetStream(
                operation: "open a JetStream context", detail: String(cString: herald_nats_last_error(NATS_ERR)), code: 0)
        }
        self.connection = connection
        self.jetStream = jetStream
    }

    deinit {
        pipeline.close()
        pipeline.waitForSweeper()
        // The pipeline's subscription, on the loop, is ended by shutdown() (without it, it and the place are left).
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

    /// Creates the work-queue stream `name` on `subjects` with `options`' limits, unless it exists.
    func ensureStream(_ name: String, subjects: String, options: NATSReceiver.Options) throws {
        var code = jsErrCode(rawValue: 0)
        let status = herald_nats_ensure_stream(
            jetStream, name, subjects, true, options.streamMaxAge.nanoseconds, Int64(options.streamMaxMessages),
            Int64(options.streamMaxBytes), options.duplicateWindow.nanoseconds, Int64(options.effectiveReplicas), &code)
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "create the stream \(name)", detail: String(cString: herald_nats_last_error(status)), code: Int(code.rawValue))
        }
    }

    /// Writes `value` under `key` in the key-value bucket `bucket` (made when missing), or deletes `key` when `value`
    /// is `nil`.
    func put(_ value: String?, key: String, bucket: String, replicas: Int) throws {
        var code = jsErrCode(rawValue: 0)
        let status = herald_nats_put_registration(jetStream, bucket, key, value, Int64(replicas), &code)
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "write the bucket \(bucket)", detail: String(cString: herald_nats_last_error(status)), code: Int(code.rawValue))
        }
    }

    /// What the key-value bucket `bucket` holds under `key`; `nil` when nothing (or no bucket).
    public func value(key: String, bucket: String) throws -> String? {
        var text = [CChar](repeating: 0, count: 1024)
        var found = false
        let status = herald_nats_get_registration(jetStream, bucket, key, &text, text.count, &found)
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "read the bucket \(bucket)", detail: String(cString: herald_nats_last_error(status)), code: 0)
        }
        return found ? String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }

    /// The keys the key-value bucket `bucket` holds (none when it does not exist).
    func keys(bucket: String) throws -> [String] {
        let failure = { (status: natsStatus) in
            NATSReceiverError.jetStream(
                operation: "list the bucket \(bucket)", detail: String(cString: herald_nats_last_error(status)), code: 0)
        }
        var storePointer: OpaquePointer?
        let opened = js_KeyValue(&storePointer, jetStream, bucket)
        if opened == NATS_NOT_FOUND { return [] }
        guard opened == NATS_OK, let store = storePointer else { throw failure(opened) }
        defer { kvStore_Destroy(store) }
        var list = kvKeysList()
        let status = kvStore_Keys(&list, store, nil)
        if status == NATS_NOT_FOUND { return [] }
        guard status == NATS_OK else { throw failure(status) }
        defer { kvKeysList_Destroy(&list) }
        return (0..<Int(list.Count)).compactMap { list.Keys[$0].map { String(cString: $0) } }
    }

    /// Makes the durable push consumer `durable` of `stream` on `filter` (kept when it exists) and subscribes to it
    /// with manual acks: `received` gets each message on cnats's thread, to acknowledge and destroy.
    func subscribeDurable(
        stream: String, durable: String, filter: String, deliverSubject: String, options: NATSReceiver.Options,
        received: @escaping @Sendable (StoredMessage) -> Void
    ) throws -> StoredSubscription {
        var code = jsErrCode(rawValue: 0)
        var state = herald_nats_consumer_state()
        var status = herald_nats_ensure_consumer(
            jetStream, stream, durable, filter, deliverSubject, false, false, options.ackWait.nanoseconds,
            Int64(options.maxAckPending), Int64(options.maxDeliver), &state, &code)
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "create the consumer \(durable)", detail: String(cString: herald_nats_last_error(status)),
                code: Int(code.rawValue))
        }
        let handler = Unmanaged.passRetained(StoredSubscription.Handler(received)).toOpaque()
        var subscription: OpaquePointer?
        status = herald_nats_subscribe_durable(
            &subscription, jetStream, stream, durable, filter,
            { _, _, message, closure in
                guard let message, let closure else { return }
                Unmanaged<StoredSubscription.Handler>.fromOpaque(closure).takeUnretainedValue().received(StoredMessage(message))
            }, handler, &code)
        guard status == NATS_OK, let subscription else {
            Unmanaged<StoredSubscription.Handler>.fromOpaque(handler).release()
            throw NATSReceiverError.jetStream(
                operation: "subscribe to the consumer \(durable)", detail: String(cString: herald_nats_last_error(status)),
                code: Int(code.rawValue))
        }
        // The handler goes once cnats is done with the subscription (no callback runs after that).
        natsSubscription_SetOnCompleteCB(
            subscription,
            { closure in
                if let closure { Unmanaged<StoredSubscription.Handler>.fromOpaque(closure).release() }
            }, handler)
        return StoredSubscription(subscription)
    }

    /// Publishes `body` to `subject` through JetStream and returns the message's ID as the receiver will give it
    /// (`nats-<stream>-<sequence>-<message ID>`) once the stream has stored it. `messageID` (the `Nats-Msg-Id`
    /// header; a random one when `nil`) makes retries within the stream's duplicate window one message.
    public func publishStored(_ subject: String, body: [UInt8], messageID: String? = nil) throws -> String {
        try store(subject, body: body, messageID: messageID ?? String(UInt64.random(in: 1...UInt64.max), radix: 16))
    }

    /// A topic message: with `stored` (a stream takes topic subjects), stored as ``publishStored(_:body:messageID:)``
    /// does, so that instances with stored topic delivery get it also when they are away, and its ID; else a core
    /// publish (flushed), and `nil`. Instances with core fan-out get it either way.
    public func publishTopic(_ subject: String, body: [UInt8], messageID: String, stored: Bool) throws -> String? {
        if stored { return try store(subject, body: body, messageID: messageID) }
        try publish(subject, body: body, flush: true)
        return nil
    }

    /// Starts answering sends without a thread waiting for each (a gateway): ``storePipelined(_:body:messageID:)`` and
    /// ``publishTopicPipelined(_:body:messageID:stored:)`` need it, and a publisher on a loop (on its thread).
    /// Subscribes to the answers' subjects and starts the sweeper's thread (which times sends out); once.
    func startPipeline() throws {
        guard let loop, let place else {
            throw NATSReceiverError.subscribe(subject: "_INBOX", detail: "a pipeline needs a publisher on a loop")
        }
        loop.preconditionInEventLoop()
        try pipeline.start(connection: connection, place: place)
    }

    /// Closes a publisher on a loop: fails every pipelined send in flight and every later one, ends the answers'
    /// subscription and the connection on the loop, and returns once the adapter has closed its handles and let go
    /// of the loop (which must not stop before). Does nothing for a publisher with cnats's own threads, or again.
    /// Not on the loop thread.
    public func shutdown() async {
        guard let loop, place != nil else { return }
        let first = shutDown.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
        pipeline.close()
        // The sweeper's thread ends within its 100 ms wait: waited for off the loop.
        _ = try? await loop.offload { self.pipeline.waitForSweeper() }
        guard (try? await loop.submit({ self.pipeline.unsubscribe() })) != nil else { return }
        // Off the loop: cnats's close flushes first and waits up to 500 ms for the server's PONG, which only the loop
        // can read.
        _ = try? await loop.offload { natsConnection_Close(self.connection) }
        // Freed only once its handles are closed (a poll callback still to come would use it); else left.
        guard await eventuallyOnLoop(loop, { self.adapterHandles == 0 }) else { return }
        try? await loop.submit { self.freePlace() }
    }

    /// The libuv handles the adapter has open on the loop for the connection (a publisher on a loop; loop thread).
    package var adapterHandles: Int32 { place.map { herald_nats_open_adapter_handles($0) } ?? 0 }

    private func freePlace() {
        if let place { herald_nats_loop_free(place) }
    }

    /// Fails every send ``startPipeline()``'s pipeline has in flight (`UNAVAILABLE` for their senders, who retry)
    /// and every later one: the gateway stops.
    func closePipeline() {
        pipeline.close()
    }

    /// Sends of the pipeline waiting for an acknowledgement or a marker now.
    package var sendsInFlight: Int { pipeline.inFlight }

    /// ``publishStored(_:body:messageID:)`` without blocking (after ``startPipeline()``): JetStream's acknowledgement
    /// resumes it, pipelined with every other send on the connection. Throws when JetStream refused it, did not
    /// acknowledge it within the publisher's timeout, or the connection was lost meanwhile (it may have been stored:
    /// a retry with the same `messageID` is stored once, within the stream's duplicate window).
    func storePipelined(_ subject: String, body: [UInt8], messageID: String) async throws -> String {
        let stored = try await pipeline.store(subject, body: body, messageID: messageID).get()
        return "nats-\(stored.stream)-\(stored.sequence)-\(messageID)"
    }

    /// ``publishTopic(_:body:messageID:stored:)`` without blocking (after ``startPipeline()``): stored, as
    /// ``storePipelined(_:body:messageID:)``; else a core publish answered once the server has it (a marker published
    /// after it has come back: one marker for every send waiting at once).
    func publishTopicPipelined(_ subject: String, body: [UInt8], messageID: String, stored: Bool) async throws -> String? {
        if stored { return try await storePipelined(subject, body: body, messageID: messageID) }
        let status = body.withUnsafeBytes { natsConnection_Publish(connection, subject, $0.baseAddress, Int32($0.count)) }
        guard status == NATS_OK else {
            throw NATSReceiverError.request(subject: subject, detail: String(cString: herald_nats_last_error(status)))
        }
        try await pipeline.flushed().get()
        return nil
    }

    /// Whether the stream `name` exists.
    public func streamExists(_ name: String) throws -> Bool {
        var count: UInt64 = 0
        var code = jsErrCode(rawValue: 0)
        let status = herald_nats_stream_messages(jetStream, name, &count, &code)
        if status == NATS_NOT_FOUND || code == JSStreamNotFoundErr { return false }
        guard status == NATS_OK else {
            throw NATSReceiverError.jetStream(
                operation: "read the stream \(name)", detail: String(cString: herald_nats_last_error(status)), code: Int(code.rawValue))
        }
        return true
    }

    private func store(_ subject: String, body: [UInt8], messageID: String) throws -> String {
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

    /// Keeps a copy of the registrations bucket `bucket` up to date with a KV watch on a thread of its own, so that
    /// ``cachedRegistration(key:)`` answers without a round trip (a gateway answers an unknown token at once). A
    /// bucket that does not exist yet is looked for again every second; a watch that fails is opened again. Runs
    /// until ``stopWatching()``.
    public func watchRegistrations(bucket: String) {
        watch(bucket, into: registrations)
    }

    /// Keeps a copy of the senders bucket `bucket` up to date as ``watchRegistrations(bucket:)`` does that of the
    /// registrations, and calls `changed` (on the watch's thread) once the copy has caught up with the bucket and
    /// after every change to it from then on: a revoked sender is known as soon as the watch delivers it. Runs until
    /// ``stopWatching()``.
    public func watchSenders(bucket: String, changed: @escaping @Sendable () -> Void) {
        sendersCopy.changed = changed
        watch(bucket, into: sendersCopy)
    }

    /// Ends the watches ``watchRegistrations(bucket:)`` and ``watchSenders(bucket:changed:)`` started.
    public func stopWatching() {
        registrations.stop()
        sendersCopy.stop()
    }

    /// What the watched copy of the registrations bucket holds under `key`: `.some(token)` (or `.some(nil)`: no
    /// such registration), or `nil` while the watch has not caught up (then ask the bucket).
    public func cachedRegistration(key: String) -> String?? {
        registrations.value(key: key)
    }

    /// The watched copy of the senders bucket, by key, or `nil` while the watch has not caught up.
    func cachedSenderEntries() -> [String: String]? {
        sendersCopy.values()
    }

    /// Keeps `copy` up to date with a KV watch of `bucket` on a thread of its own. A bucket that does not exist yet
    /// is looked for again every second (the copy is then empty, and caught up: known for sure); a watch that fails
    /// is opened again.
    private func watch(_ bucket: String, into copy: WatchedBucket) {
        detachThread { [self] in
            while !copy.isStopped {
                follow(bucket, into: copy)
                if copy.isStopped { break }
                usleep(1_000_000)
            }
        }
    }

    /// One watch of `bucket` into `copy`, until it fails or is stopped.
    private func follow(_ bucket: String, into copy: WatchedBucket) {
        var store: OpaquePointer?
        let opened = js_KeyValue(&store, jetStream, bucket)
        if opened == NATS_NOT_FOUND {
            copy.absent()
            return
        }
        guard opened == NATS_OK, let store else { return }
        defer { kvStore_Destroy(store) }
        var watcherPointer: OpaquePointer?
        guard kvStore_WatchAll(&watcherPointer, store, nil) == NATS_OK, let watcher = watcherPointer else { return }
        defer { kvWatcher_Destroy(watcher) }
        guard copy.started(watcher) else { return }
        defer { copy.ended() }
        while true {
            var entry: OpaquePointer?
            let status = kvWatcher_Next(&entry, watcher, 1000)
            if status == NATS_TIMEOUT { continue }
            guard status == NATS_OK else { return }
            guard let entry else {
                // The watch has delivered every key the bucket held: from now on, updates.
                copy.caughtUp()
                continue
            }
            let key = String(cString: kvEntry_Key(entry))
            let value = kvEntry_Operation(entry) == kvOp_Put ? kvEntry_ValueString(entry).map { String(cString: $0) } : nil
            kvEntry_Destroy(entry)
            copy.set(key, to: value)
        }
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

/// A copy of a key-value bucket a KV watch keeps (``NATSPublisher``'s watches): the keys and values, whether the
/// watch has caught up, the watcher to stop, whether it was stopped, and what to call when the copy changes.
private final class WatchedBucket: @unchecked Sendable {
    // @unchecked Sendable: all state behind the lock; the watcher is only stopped through it.
    private let state = Locked<(values: [String: String], caughtUp: Bool, watcher: OpaquePointer?, stopped: Bool)>(
        ([:], false, nil, false))
    private let onChange = Locked<(@Sendable () -> Void)?>(nil)

    /// Called (on the watch's thread) once the copy has caught up, and after every change from then on.
    var changed: (@Sendable () -> Void)? {
        get { onChange.withLock { $0 } }
        set { onChange.withLock { $0 = newValue } }
    }

    var isStopped: Bool { state.withLock { $0.stopped } }

    /// The whole copy, or `nil` while the watch has not caught up.
    func values() -> [String: String]? {
        state.withLock { $0.caughtUp ? $0.values : nil }
    }

    /// `.some(value)` (`.some(nil)`: no such key), or `nil` while the watch has not caught up.
    func value(key: String) -> String?? {
        state.withLock { $0.caughtUp ? .some($0.values[key]) : nil }
    }

    /// The bucket does not exist: the copy is empty, and that is known for sure.
    func absent() {
        let changed = state.withLock { state in
            let changed = !state.caughtUp || !state.values.isEmpty
            state.values = [:]
            state.caughtUp = true
            return changed
        }
        if changed { notify() }
    }

    /// A watch with `watcher` begins (from an empty copy, not caught up); `false` when stopped meanwhile.
    func started(_ watcher: OpaquePointer) -> Bool {
        state.withLock { state in
            guard !state.stopped else { return false }
            state = ([:], false, watcher, false)
            return true
        }
    }

    /// The watch has delivered every key the bucket held.
    func caughtUp() {
        state.withLock { $0.caughtUp = true }
        notify()
    }

    func set(_ key: String, to value: String?) {
        let notifying = state.withLock { state in
            state.values[key] = value
            return state.caughtUp
        }
        if notifying { notify() }
    }

    /// The watch ended (failed or stopped): until another catches up, the copy is not to be trusted.
    func ended() {
        state.withLock {
            $0.watcher = nil
            $0.caughtUp = false
        }
    }

    /// Does not wait: stopping a watch deletes its consumer, a request the server answers or lets time out (the
    /// publisher's timeout, when the server is frozen), so it runs on a thread of its own. The watcher is stopped
    /// under the lock, and the watch's thread takes the lock before it destroys the watcher: one cannot outrun the other.
    func stop() {
        let watching = state.withLock { state in
            state.stopped = true
            return state.watcher != nil
        }
        guard watching else { return }
        let stopWatcher: @Sendable () -> Void = { [self] in
            state.withLock { state in
                if let watcher = state.watcher { kvWatcher_Stop(watcher) }
            }
        }
        // No thread to spare: stopped here, waiting.
        if detachThread(stopWatcher) != 0 { stopWatcher() }
    }

    private func notify() {
        changed?()
    }
}

/// A message of a durable consumer: acknowledge it (or not) once, then it is destroyed.
struct StoredMessage: @unchecked Sendable {
    // @unchecked Sendable: cnats messages may be acknowledged from any thread; this one is used once.
    private let message: OpaquePointer

    init(_ message: OpaquePointer) { self.message = message }

    var subject: String { String(cString: natsMsg_GetSubject(message)) }

    var data: [UInt8] {
        let length = Int(natsMsg_GetDataLength(message))
        return natsMsg_GetData(message).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
    }

    /// Acknowledged (`true`: JetStream forgets it) or offered again after `delay`; then destroyed.
    func finish(acknowledged: Bool, delay: Duration = .seconds(1)) {
        if acknowledged { natsMsg_Ack(message, nil) } else { natsMsg_NakWithDelay(message, delay.milliseconds, nil) }
        natsMsg_Destroy(message)
    }
}

/// A subscription to a durable consumer; ``close()`` ends it.
final class StoredSubscription: @unchecked Sendable {
    // @unchecked Sendable: closed once, behind a lock.
    final class Handler: Sendable {
        let received: @Sendable (StoredMessage) -> Void
        init(_ received: @escaping @Sendable (StoredMessage) -> Void) { self.received = received }
    }

    private let state: Locked<OpaquePointer?>

    init(_ subscription: OpaquePointer) {
        state = Locked(subscription)
    }

    /// Unsubscribes (the durable consumer stays, with what waits for it).
    func close() {
        guard
            let subscription = state.withLock({ state in
                defer { state = nil }
                return state
            })
        else { return }
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
    }
}

/// Runs `body` on a detached thread of its own (a watch that blocks for as long as the publisher lives, the
/// pipeline's sweeper); `pthread_create`'s status: 0 when the thread runs, else `body` was not run.
@discardableResult
func detachThread(_ body: @escaping @Sendable () -> Void) -> Int32 {
    final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
    let argument = Unmanaged.passRetained(Body(body)).toOpaque()
    var thread = pthread_t()
    let status = pthread_create(
        &thread, nil,
        { argument in
            Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, argument)
    if status == 0 {
        pthread_detach(thread)
    } else {
        Unmanaged<Body>.fromOpaque(argument).release()
    }
    return status
}
