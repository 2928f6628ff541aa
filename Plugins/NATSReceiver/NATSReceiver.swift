import CLibUV
import CNATS
import Glibc
public import Herald
import Logging

/// Receives FCM v1 send bodies from NATS (the body the HTTP and socket receivers take), so a fleet of Herald daemons shares one clustered,
/// durable message system instead of a network of its own.
///
/// The connection runs on Herald's loop through an event-loop adapter of Herald's own (CNATS/adapter.c): the loop
/// reads and writes the socket, and the receiver's subscriptions are synchronous: right after each read the adapter takes
/// the messages cnats queued on them and hands them to the receiver on the loop thread (no cnats delivery thread per
/// subscription, no hop back to the loop). Three ways in, each with its guarantee:
///
/// - **Token messages** (`herald.<project>.token.<token>`) are stored by JetStream in the stream
///   ``Options/stream`` (work-queue retention) and pushed to this instance's durable consumer
///   ``Options/consumer``. A message is acknowledged only once it is safe: with the durable inbox, once it is
///   committed; without it, once its handlers have finished. A crash, a lost connection or a missed ack
///   (``Options/ackWait``) makes JetStream deliver it again; with the inbox's de-duplication (the message ID is the
///   stream sequence and the publisher's `Nats-Msg-Id`, or the time the message was stored) it is handled once.
/// - **Topic fan-out** (`herald.<project>.topic.<topic>`, ``TopicDelivery/fanOut``): a core NATS subscription
///   per subscribed topic; every subscribed instance connected at the time gets each message once. At most once:
///   a message published while an instance is disconnected does not reach it.
/// - **Shared work** (``TopicDelivery/shared(group:)``): the same topic subjects in a NATS queue group: each
///   message goes to exactly one connected instance of the group. Also at most once.
/// - **Stored topics** (``TopicDelivery/stored``): topic messages stored by JetStream, a durable consumer per
///   subscribed topic: each subscribed instance handles each once, also after being away, within the message's time
///   to live (counted from when it was stored); of the messages with one collapse key that wait together, the newest.
///
/// A body that is not a valid send request is dropped with a log line and a `message_dropped` event (reason
/// `invalid`): on JetStream it is terminated (never redelivered); a core NATS request gets the FCM error on its
/// reply subject. When the bus is full, JetStream messages are refused with a delayed redelivery
/// (``Options/redeliveryDelay``) instead of being acknowledged, and core NATS messages are held in order (up to
/// ``Options/maxHeldMessages``) until it has room.
public final class NATSReceiver: Receiver, TokenHandler, @unchecked Sendable {
    // @unchecked Sendable: `options` is immutable; `shared` is a lock; everything else is touched on the loop
    // thread only (start, stop and the token change hop to it; cnats's connection callbacks hop to it before touching state).

    /// How topic messages reach the instance.
    public enum TopicDelivery: Sendable, Hashable {
        /// Every subscribed instance receives each topic message (core NATS subscriptions).
        case fanOut
        /// The instances of the queue group `group` share the topic messages: each goes to one of them.
        case shared(group: String)
        /// Every subscribed instance receives each topic message once, also one that was away when it was sent and
        /// comes back within the message's time to live: the stream ``NATSSubjects/topicStreamName(project:)``
        /// (`<stream>_TOPICS`) stores topic messages, and the instance has a durable consumer per subscribed topic.
        case stored
    }

    /// TLS files: the CA to trust, and a client certificate with its key for servers that ask for one.
    public struct TLSFiles: Sendable, Hashable {
        public var caFile: String?
        public var certificateFile: String?
        public var keyFile: String?
        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    /// A user name and its password, as a server's `authorization` block lists them.
    public struct Login: Sendable, Hashable, CustomStringConvertible {
        /// The user name.
        public var user: String
        /// The password (never logged nor shown: see ``description``).
        public var password: String
        /// `user` with `password`.
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }

        /// The user name only: the password is never shown.
        public var description: String { "\(user):***" }
    }

    /// The connection, the names and the limits. Each field maps to one configuration key of `herald serve`.
    public struct Options: Sendable {
        /// Server URLs (`nats://host:port`, `tls://host:port`), tried in turn; more are learnt from a cluster.
        public var servers: [String]
        /// The connection's name, as the server's monitoring shows it.
        public var connectionName: String = "herald"
        /// A credentials file (JWT and NKey seed) for servers with decentralised auth.
        public var credentialsFile: String?
        /// An authentication token.
        public var authToken: String?
        /// A user name and password, for servers with user and password authorization.
        public var login: Login?
        /// TLS files; set to use TLS with servers named `nats://`.
        public var tls: TLSFiles?
        /// The JetStream stream of token messages; `nil` for ``NATSSubjects/streamName(project:)``. Created (work-queue
        /// retention, file storage, the limits below) when missing; an existing stream is used as it is.
        public var stream: String?
        /// This instance's durable consumer; `nil` for ``NATSSubjects/consumerName(token:)`` (keyed by the
        /// installation ID).
        public var consumer: String?
        /// Whether token messages are taken from JetStream (and the token written to the registrations bucket).
        public var tokenDelivery: Bool = true
        /// The key-value bucket of the fleet's registrations; `nil` for ``NATSSubjects/registrationBucket(project:)``.
        /// The instance writes its token there at start and at every rotation, and deletes it with the token.
        public var registrationBucket: String?
        /// How topic messages arrive.
        public var topicDelivery: TopicDelivery = .fanOut
        /// How long JetStream waits for an ack before delivering a message again.
        public var ackWait: Duration = .seconds(30)
        /// Messages JetStream sends without an ack yet (in flight in this instance).
        public var maxAckPending: Int = 1024
        /// How many times a message is delivered at most; -1 for no limit.
        public var maxDeliver: Int = -1
        /// Whether stored topic consumers made from now on acknowledge cumulatively (AckPolicy `all`: one ack
        /// covers every committed message up to it, one per committed group instead of one per message, which
        /// halves nats-server's work per stored message); `false` makes them with explicit acks, one per message,
        /// as Herald 0.1 did. A consumer that exists keeps the policy it was made with (JetStream cannot change it
        /// in place, and deleting it would lose what waits for it): the instance acknowledges as that policy wants.
        public var cumulativeTopicAcks: Bool = true
        /// How long committed messages of a stored topic consumer that acknowledges cumulatively may wait for the
        /// ack that covers them, while fewer than an eighth of ``maxAckPending`` wait: one ack then covers a batch
        /// (nats-server takes, records and answers each ack on its own; under load that was most of its work per
        /// message after storing it). Only redelivery waits on it — a message is acknowledged after the bus
        /// committed it, and one delivered again after a crash is recognised by its ID — so it stays far below
        /// ``ackWait``. Zero: an ack at the end of every loop turn that committed something.
        public var cumulativeAckDelay: Duration = .milliseconds(20)
        /// How long JetStream waits before delivering again a message refused because the bus was full or failed.
        public var redeliveryDelay: Duration = .seconds(1)
        /// The stream keeps a message this long at most (FCM's longest time to live: 28 days).
        public var streamMaxAge: Duration = .seconds(28 * 24 * 3600)
        /// The stream keeps this many messages at most; -1 for no limit.
        public var streamMaxMessages: Int = -1
        /// The stream keeps this many bytes at most; -1 for no limit.
        public var streamMaxBytes: Int = -1
        /// Publishes with the same `Nats-Msg-Id` within this window are stored once.
        public var duplicateWindow: Duration = .seconds(120)
        /// The most publishes remembered to recognise a second stored copy (tests make it small).
        package var recentPublishLimit = 65_536
        /// Copies a cluster keeps of the streams and the registrations bucket Herald creates; `nil` for
        /// ``effectiveReplicas``'s default (3 when ``servers`` names three servers or more, else 1).
        public var replicas: Int?
        /// How long connecting to one server may take.
        public var connectTimeout: Duration = .seconds(2)
        /// How long a JetStream request (stream and consumer set-up) may take.
        public var requestTimeout: Duration = .seconds(5)
        /// The first wait before reconnecting, doubled per attempt up to ``maxReconnectWait`` (with jitter).
        public var reconnectWait: Duration = .milliseconds(250)
        /// The longest wait between reconnect attempts.
        public var maxReconnectWait: Duration = .seconds(8)
        /// Reconnect attempts before giving up (the state becomes `closed`); -1 for no limit.
        public var maxReconnectAttempts: Int = -1
        /// How often the client sends the server a PING. A connection with ``maxPingsOut`` PINGs unanswered is
        /// stale: the receiver reconnects. This is how a connection whose server vanished without closing it (a
        /// host that lost power, a dropped network path, a close the client missed) is found: within
        /// `pingInterval × (maxPingsOut + 1)` at most (1 minute with the defaults; cnats's own default is 6 minutes).
        public var pingInterval: Duration = .seconds(20)
        /// PINGs without a PONG before the connection is called stale.
        public var maxPingsOut: Int = 2
        /// Core NATS (topic) messages held, in order, while the bus is full; past it they are refused
        /// (`QUOTA_EXCEEDED` to a request, else dropped and recorded as `message_dropped`).
        public var maxHeldMessages: Int = 65536
        /// Messages a subscription holds before NATS calls the instance a slow consumer and drops more.
        public var pendingMessagesLimit: Int = 65536
        /// Bytes a subscription holds before NATS calls the instance a slow consumer and drops more.
        public var pendingBytesLimit: Int = 64 * 1024 * 1024

        public init(servers: [String]) {
            self.servers = servers
        }

        /// ``replicas``, or 3 when ``servers`` names three servers or more (a cluster: each message on a majority
        /// before it is confirmed, one server's loss survived), else 1.
        public var effectiveReplicas: Int { replicas ?? (servers.count >= 3 ? 3 : 1) }
    }

    /// Where the connection is.
    public enum ConnectionState: String, Sendable, Hashable {
        case connecting, connected, reconnecting, closed
    }

    /// Counters, for health checks and tests.
    public struct Statistics: Sendable, Hashable {
        /// Messages taken from NATS.
        public var received = 0
        /// JetStream messages acknowledged (after the bus accepted them).
        public var acknowledged = 0
        /// Acks sent to JetStream: one per message with explicit acks; one per batch for a consumer that
        /// acknowledges cumulatively (``Options/cumulativeTopicAcks``).
        public var acknowledgementsSent = 0
        /// JetStream messages handed back for a later delivery (bus full, store failed, shutting down).
        public var redeliveryRequested = 0
        /// JetStream messages terminated: invalid, or refused for good (an unknown token).
        public var terminated = 0
        /// Bodies that were not valid send requests.
        public var invalid = 0
        /// Answers published on reply subjects.
        public var replies = 0
        /// Connections lost.
        public var disconnects = 0
        /// Connections regained.
        public var reconnects = 0
        /// Second stored copies of one publish (one `Nats-Msg-Id`, another stream sequence) acknowledged without
        /// being handled again.
        public var duplicatesDropped = 0
        /// Subscriptions to a durable consumer tried again because the consumer was still bound to the subscription
        /// of a connection that ended (a restart before the server had seen the old connection go).
        public var boundConsumerRetries = 0
    }

    public let options: Options
    /// State, counters, and whether stop() began (then a disconnect is ours, not a loss).
    private let shared = Locked<(state: ConnectionState, statistics: Statistics, closing: Bool)>((.connecting, Statistics(), false))

    // Loop-thread state.
    private var context: PluginContext?
    private var connection: OpaquePointer?
    private var jetStream: OpaquePointer?
    private var place: OpaquePointer?
    private var reconnectLimits: UnsafeMutablePointer<Int64>?
    private var topicSubscriptions: [String: OpaquePointer] = [:]
    /// Stored topic delivery: whether the stream exists (consumers can be made), and the subscription to each
    /// topic's durable consumer.
    private var topicStreamReady = false
    private var storedTopicSubscriptions: [String: OpaquePointer] = [:]
    /// The acks of each topic's consumer made with AckPolicy `all`.
    private var storedTopicAcks: [String: CumulativeAcks] = [:]
    /// Stored topic messages with a collapse key held while more messages wait for their consumer (by subject):
    /// of those with one collapse key, only the newest is handled.
    private var collapsing:
        [String: [(key: String, message: OpaquePointer, expiresAt: Int64, identity: StoredDeliveryIdentity?, delivery: Delivery?)]] = [:]
    private var wantedTopics: Set<String> = []
    /// The stored messages offered to the bus lately, by stream and publisher ID (`Nats-Msg-Id`): the stream sequence
    /// of each, when JetStream stored it and when it was taken here (for eviction). A second stored copy of one publish
    /// (another stream sequence, the same `Nats-Msg-Id`) stored within ``Options/duplicateWindow`` of the first is
    /// the same message, as JetStream itself would have judged it.
    private var recentPublishes: [PublishFingerprint: (sequence: UInt64, storedAt: Int64, at: ContinuousClock.Instant)] = [:]
    /// The keys of ``recentPublishes`` in the order they were remembered, from `publishOrderStart` on: the oldest is
    /// forgotten first (an entry whose key was remembered again or forgotten since no longer matches, and is skipped).
    private var publishOrder: [(key: PublishFingerprint, at: ContinuousClock.Instant)] = []
    private var publishOrderStart = 0
    /// ``Options/recentPublishLimit`` and ``Options/duplicateWindow``, read once per message.
    private let recentPublishLimit: Int
    private let duplicateWindow: Duration
    /// `herald.<project>.topic.` as a C string, made on the first message.
    private var topicSubjectPrefix: [CChar] = []
    /// Core NATS messages that arrived while the bus was full, in order, from `heldStart` on.
    private var held: [OpaquePointer] = []
    private var heldStart = 0
    private var tokenSubscription: OpaquePointer?
    private var subscribedToken: String?
    /// The subscription to a gateway's topic changes (``NATSSubjects/topicRequests(project:instance:)``), and the
    /// installation ID it is for.
    private var topicRequestSubscription: (instance: String, subscription: OpaquePointer)?
    private var stopping = false
    /// Token subscription changes run one at a time (start, rotation, deletion).
    private let tokenChanges = SerialTasks()

    public init(options: Options) {
        self.options = options
        recentPublishLimit = options.recentPublishLimit
        duplicateWindow = options.duplicateWindow
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "nats", summary: "FCM v1 send bodies from NATS subjects, token messages through JetStream")
    }

    /// `url` with a user and password in it (`nats://user:password@host:4222`) shown as `***`, as the receiver
    /// logs server URLs: for anything that prints them (`herald serve --print-config`).
    public static func redactingCredentials(_ url: String) -> String { NATSConnectionSettings.redacted(url) }

    /// Where the connection is. Callable from any thread.
    public var state: ConnectionState { shared.withLock { $0.state } }

    /// Healthy while connected; `reconnecting` and `closed` are not (PrometheusMetrics' `/healthz` answers 503).
    public var health: ReceiverHealth? {
        let state = self.state
        return ReceiverHealth(healthy: state == .connected, state: state.rawValue)
    }

    /// The counters so far. Callable from any thread.
    public var statistics: Statistics { shared.withLock { $0.statistics } }

    /// The stream of token messages.
    public var streamName: String { options.stream ?? NATSSubjects.streamName(project: context?.projectID ?? "herald") }

    // MARK: Start and stop

    public func start(_ context: PluginContext) async throws {
        self.context = context
        do {
            try await connectAndSubscribe(context)
        } catch {
            await stop()
            throw error
        }
    }

    private func connectAndSubscribe(_ context: PluginContext) async throws {
        let jetStream = try await context.loop.submit { try self.connect(context) }
        if options.tokenDelivery {
            let stream = streamName
            let project = context.projectID
            let options = self.options
            let status: (natsStatus, jsErrCode, String) = try await context.loop.offload {
                var code = jsErrCode(rawValue: 0)
                let status = herald_nats_ensure_stream(
                    jetStream.pointer, stream, NATSSubjects.allTokens(project: project), true, options.streamMaxAge.nanoseconds,
                    Int64(options.streamMaxMessages), Int64(options.streamMaxBytes), options.duplicateWindow.nanoseconds,
                    Int64(options.effectiveReplicas), &code
                )
                return (status, code, String(cString: herald_nats_last_error(status)))
            }
            guard status.0 == NATS_OK else {
                throw NATSReceiverError.jetStream(operation: "create the stream \(stream)", detail: status.2, code: Int(status.1.rawValue))
            }
            try await changeTokenSubscription(to: context.topics.token())
        }
        if options.topicDelivery == .stored {
            try await ensureTopicStream(jetStream: jetStream, context: context)
            try await context.loop.submit { self.topicStreamReady = true }
            try await tokenChanges.run { try await self.changeStoredTopics() }
        }
    }

    /// The stream of stored topic messages.
    private var topicStreamName: String { streamName + "_TOPICS" }

    /// Creates the stream of topic messages (limits retention: each instance's consumer acknowledges its own copy)
    /// when it is missing.
    private func ensureTopicStream(jetStream: UnsafeHandle, context: PluginContext) async throws {
        let stream = topicStreamName
        let project = context.projectID
        let options = self.options
        let failure: (natsStatus, jsErrCode, String)? = try await context.loop.offload {
            var code = jsErrCode(rawValue: 0)
            let status = herald_nats_ensure_stream(
                jetStream.pointer, stream, NATSSubjects.allTopics(project: project), false, options.streamMaxAge.nanoseconds,
                Int64(options.streamMaxMessages), Int64(options.streamMaxBytes), options.duplicateWindow.nanoseconds,
                Int64(options.effectiveReplicas), &code)
            return status == NATS_OK ? nil : (status, code, String(cString: herald_nats_last_error(status)))
        }
        if let failure {
            throw NATSReceiverError.jetStream(operation: "create the stream \(stream)", detail: failure.2, code: Int(failure.1.rawValue))
        }
    }

    /// Connects on the loop thread (the adapter's first attach must happen there) and returns the JetStream context.
    private func connect(_ context: PluginContext) throws -> UnsafeHandle {
        let natsOptions = try NATSConnectionSettings.createOptions(servers: options.servers)
        defer { natsOptions_Destroy(natsOptions) }
        guard let place = herald_nats_loop_create(context.loop.uv) else {
            throw NATSReceiverError.connect(servers: options.servers, detail: "out of memory")
        }
        let limits = UnsafeMutablePointer<Int64>.allocate(capacity: 2)
        limits[0] = options.reconnectWait.milliseconds
        limits[1] = max(options.maxReconnectWait.milliseconds, limits[0])
        let relay = ConnectionRelay(receiver: self, logger: context.logger, bus: context.bus, loop: context.loop)
        let relayPointer = Unmanaged.passRetained(relay).toOpaque()

        var status = configure(natsOptions, limits: limits, relay: relayPointer)
        if status == NATS_OK { status = herald_nats_use_loop(natsOptions, place) }
        var connectionPointer: OpaquePointer?
        if status == NATS_OK { status = natsConnection_Connect(&connectionPointer, natsOptions) }
        guard status == NATS_OK, let connection = connectionPointer else {
            let detail = String(cString: herald_nats_last_error(status))
            Unmanaged<ConnectionRelay>.fromOpaque(relayPointer).release()
            herald_nats_loop_free(place)
            limits.deallocate()
            shared.withLock { $0.state = .closed }
            throw NATSReceiverError.connect(servers: options.servers, detail: detail)
        }
        self.place = place
        herald_nats_loop_set_deliver(place) { message, closure in SubscriptionRelay.from(closure).deliver(message) }
        self.reconnectLimits = limits
        self.connection = connection
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        jsOptions.Wait = options.requestTimeout.milliseconds
        var jsPointer: OpaquePointer?
        guard natsConnection_JetStream(&jsPointer, connection, &jsOptions) == NATS_OK, let jetStream = jsPointer else {
            throw NATSReceiverError.jetStream(
                operation: "open a JetStream context", detail: String(cString: herald_nats_last_error(NATS_ERR)), code: 0)
        }
        self.jetStream = jetStream
        shared.withLock { $0.state = .connected }
        context.logger.info(
            "connected to NATS",
            metadata: ["url": "\(connectedURL(connection))", "servers": "\(NATSConnectionSettings.redacted(options.servers))"])
        applyTopics()
        return UnsafeHandle(jetStream)
    }

    private func configure(_ natsOptions: OpaquePointer, limits: UnsafeMutablePointer<Int64>, relay: UnsafeMutableRawPointer) -> natsStatus
    {
        let steps: [() -> natsStatus] = [
            { NATSConnectionSettings.apply(self.options, to: natsOptions) },
            { natsOptions_SetAllowReconnect(natsOptions, true) },
            // What the loop publishes (acks, replies) is handed to the adapter at once, to go out when the loop next
            // polls the socket writable (with everything else published in the same turn); without it cnats signals
            // a flusher thread of its own, which sleeps 1 ms to gather more and then asks the adapter from its
            // thread: a wake-up of that thread and one of the loop for every batch of acks.
            { natsOptions_SetSendAsap(natsOptions, true) },
            { natsOptions_SetMaxReconnect(natsOptions, Int32(clamping: self.options.maxReconnectAttempts)) },
            { natsOptions_SetCustomReconnectDelay(natsOptions, herald_nats_reconnect_delay, limits) },
            { natsOptions_SetDisconnectedCB(natsOptions, { _, closure in ConnectionRelay.from(closure).disconnected() }, relay) },
            {
                natsOptions_SetReconnectedCB(
                    natsOptions, { connection, closure in ConnectionRelay.from(closure).reconnected(connection) }, relay)
            },
            { natsOptions_SetClosedCB(natsOptions, { _, closure in ConnectionRelay.from(closure).closed() }, relay) },
            {
                natsOptions_SetErrorHandler(
                    natsOptions, { _, _, status, closure in ConnectionRelay.from(closure).asyncError(status) }, relay)
            },
        ]
        return NATSConnectionSettings.run(steps)
    }

    private func connectedURL(_ connection: OpaquePointer) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard natsConnection_GetConnectedUrl(connection, &buffer, buffer.count) == NATS_OK else { return "?" }
        return NATSConnectionSettings.redacted(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    public func stop() async {
        guard let context else { return }
        // Acks written so far reach the server before the connection closes (a flush waits for its PONG, which
        // the loop reads: so it runs off the loop).
        let connection: UnsafeHandle? = try? await context.loop.submit {
            self.stopping = true
            self.acknowledgeSettled()
            return self.connection.map(UnsafeHandle.init)
        }
        await tokenChanges.wait()
        guard let connection else { return }
        if state == .connected {
            _ = try? await context.loop.offload { natsConnection_FlushTimeout(connection.pointer, 2000) }
        }
        shared.withLock { $0.closing = true }
        try? await context.loop.submit {
            for message in self.held[self.heldStart...] { herald_nats_message_free(message) }
            self.held.removeAll()
            self.heldStart = 0
            for subscription in self.topicSubscriptions.values { self.close(subscription) }
            self.topicSubscriptions.removeAll()
            for subscription in self.storedTopicSubscriptions.values { self.close(subscription) }
            self.storedTopicSubscriptions.removeAll()
            for message in self.collapsing.values.joined() { herald_nats_message_free(message.message) }
            self.collapsing.removeAll()
            self.acknowledgeSettled()
            for acks in self.storedTopicAcks.values { acks.discard() }
            self.storedTopicAcks.removeAll()
            if let subscription = self.tokenSubscription { self.close(subscription) }
            self.tokenSubscription = nil
            if let requests = self.topicRequestSubscription { self.close(requests.subscription) }
            self.topicRequestSubscription = nil
        }
        // Off the loop: cnats's close flushes first and waits up to 500 ms for the server's PONG, which only the loop
        // can read (on the loop thread, every stop took those 500 ms, the loop blocked throughout).
        _ = try? await context.loop.offload { natsConnection_Close(connection.pointer) }
        let place: UnsafeHandle? = try? await context.loop.submit {
            if let jetStream = self.jetStream { jsCtx_Destroy(jetStream) }
            self.jetStream = nil
            natsConnection_Destroy(connection.pointer)
            self.connection = nil
            return self.place.map(UnsafeHandle.init)
        }
        // The adapter closes its libuv handles over the next loop turns; they must be gone before the loop shuts
        // down (its shutdown closes every handle it finds, and takes each one's data for one of its own).
        // The place is freed only once they are (a poll callback still to come would use it); else it is left.
        var closed = true
        if let place {
            closed = await eventuallyOnLoop(context.loop) { herald_nats_open_adapter_handles(place.pointer) == 0 }
        }
        try? await context.loop.submit { [closed] in
            if closed, let place = self.place { herald_nats_loop_free(place) }
            self.place = nil
            self.reconnectLimits?.deallocate()
            self.reconnectLimits = nil
        }
        shared.withLock { $0.state = .closed }
    }

    /// Waits until the server has processed everything this connection sent so far — subscriptions after a topic
    /// change, acks (those waiting for a batch are sent first) — or `timeout` passed. Callable from any context
    /// except the loop thread.
    public func flush(timeout: Duration = .seconds(2)) async throws {
        guard let context else { throw NATSReceiverError.notConnected }
        // Consumer changes under way (stored topics, the token) first.
        await tokenChanges.wait()
        let connection: UnsafeHandle? = try await context.loop.submit {
            guard !self.stopping else { return nil }
            self.acknowledgeSettled()
            return self.connection.map(UnsafeHandle.init)
        }
        guard let connection else { throw NATSReceiverError.notConnected }
        let status = try await context.loop.offload { natsConnection_FlushTimeout(connection.pointer, timeout.milliseconds) }
        guard status == NATS_OK else { throw NATSReceiverError.flush(detail: String(cString: natsStatus_GetText(status))) }
    }

    /// Stops draining `subscription` on the loop, releases its relay, unsubscribes and destroys it. Loop thread.
    private func close(_ subscription: OpaquePointer) {
        if let place, let relay = herald_nats_loop_remove(place, subscription) {
            Unmanaged<SubscriptionRelay>.fromOpaque(relay).release()
        }
        Self.discard(subscription, relay: nil)
    }

    /// Unsubscribes and destroys a subscription that was never registered with the loop, and releases `relay`.
    private static func discard(_ subscription: OpaquePointer, relay: UnsafeMutableRawPointer?) {
        natsSubscription_Unsubscribe(subscription)
        natsSubscription_Destroy(subscription)
        if let relay { Unmanaged<SubscriptionRelay>.fromOpaque(relay).release() }
    }

    /// Registers `subscription` (synchronous) with the loop, which from now on takes its messages after each read of
    /// the connection and hands them to `relay` (retained until ``close(_:)``); what arrived before is taken on the
    /// next turn. False (the subscription discarded) when out of memory. Also sets how much may wait on it between
    /// two drains before cnats drops messages (a slow consumer). Loop thread.
    private func adopt(_ subscription: OpaquePointer, relay: UnsafeMutableRawPointer) -> Bool {
        guard let place, let context, herald_nats_loop_add(place, subscription, relay) else {
            Self.discard(subscription, relay: relay)
            return false
        }
        natsSubscription_SetPendingLimits(
            subscription, Int32(clamping: options.pendingMessagesLimit), Int32(clamping: options.pendingBytesLimit))
        context.loop.execute {
            if let place = self.place { herald_nats_loop_drain(place, true) }
        }
        return true
    }

    // MARK: Token and topics

    public func didReceiveRegistrationToken(_ token: String?) async {
        guard options.tokenDelivery, context != nil else { return }
        do {
            try await changeTokenSubscription(to: token)
        } catch {
            context?.logger.error("cannot follow the registration token on NATS", metadata: ["error": "\(error)"])
        }
    }

    /// Subscribes the durable consumer to `token`'s subject (creating it, or moving it from the previous token),
    /// or deletes it when `token` is `nil`.
    ///
    /// One function on purpose: the whole change (the old subscription closed, its consumer deleted or the new one made, the registration written) is one serialized step of `tokenChanges`.
    private func changeTokenSubscription(to token: String?) async throws {
        guard let context else { return }
        try await tokenChanges.run {
            let (current, jetStream): (String?, UnsafeHandle?) = try await context.loop.submit {
                (self.subscribedToken, self.stopping ? nil : self.jetStream.map(UnsafeHandle.init))
            }
            guard token != current, let jetStream else { return }
            try await context.loop.submit {
                if let subscription = self.tokenSubscription { self.close(subscription) }
                self.tokenSubscription = nil
                self.subscribedToken = nil
            }
            let stream = self.streamName
            let project = context.projectID
            guard let token else {
                if let current {
                    let durable = self.options.consumer ?? NATSSubjects.consumerName(token: current)
                    _ = try await context.loop.offload {
                        var code = jsErrCode(rawValue: 0)
                        return herald_nats_delete_consumer(jetStream.pointer, stream, durable, &code)
                    }
                    try await self.register(nil, key: NATSSubjects.registrationKey(token: current), jetStream: jetStream, context: context)
                }
                return
            }
            guard NATSSubjects.isSubjectToken(token) else {
                throw NATSReceiverError.subscribe(subject: token, detail: "the registration token cannot stand in a NATS subject")
            }
            let durable = self.options.consumer ?? NATSSubjects.consumerName(token: token)
            let filter = NATSSubjects.token(project: project, token: token)
            // Token consumers acknowledge each message (work-queue retention: an acknowledged message leaves the stream).
            let (subscription, relay, _) = try await self.subscribeDurable(
                stream: stream, durable: durable, filter: filter, deliverNew: false, jetStream: jetStream, context: context)
            try await context.loop.submit {
                if self.stopping {
                    Self.discard(subscription.pointer, relay: relay.pointer)
                } else if self.adopt(subscription.pointer, relay: relay.pointer) {
                    self.tokenSubscription = subscription.pointer
                    self.subscribedToken = token
                    self.followTopicRequests(of: token, context: context)
                }
            }
            context.logger.info(
                "receiving token messages from JetStream",
                metadata: ["stream": "\(stream)", "consumer": "\(durable)", "subject": "\(filter)"])
            try await self.register(token, key: NATSSubjects.registrationKey(token: token), jetStream: jetStream, context: context)
        }
    }

    /// Subscribes to a gateway's topic changes for the installation of `token` (the subject the gateway derives from
    /// the token, ``NATSSubjects/topicRequests(project:instance:)``), unless already subscribed for it. Loop thread.
    private func followTopicRequests(of token: String, context: PluginContext) {
        guard let connection, !stopping else { return }
        let instance = NATSSubjects.registrationKey(token: token)
        guard topicRequestSubscription?.instance != instance else { return }
        if let requests = topicRequestSubscription { self.close(requests.subscription) }
        topicRequestSubscription = nil
        let subject = NATSSubjects.topicRequests(project: context.projectID, instance: instance)
        let closure = Unmanaged.passRetained(SubscriptionRelay(receiver: self, kind: .topicRequest)).toOpaque()
        var subscription: OpaquePointer?
        let status = natsConnection_SubscribeSync(&subscription, connection, subject)
        guard status == NATS_OK, let subscription else {
            Unmanaged<SubscriptionRelay>.fromOpaque(closure).release()
            context.logger.error(
                "cannot take a gateway's topic changes",
                metadata: ["subject": "\(subject)", "error": "\(String(cString: herald_nats_last_error(status)))"])
            return
        }
        guard adopt(subscription, relay: closure) else { return }
        topicRequestSubscription = (instance, subscription)
    }

    /// A gateway's topic change (`NATSTopicRequest`): made through `TopicControl/change(_:add:tokens:)`, as the
    /// HTTP receiver's topic routes make it (the store, then the topics' subscriptions follow), and answered on the
    /// request's reply subject. Takes ownership of `message`. Loop thread.
    private func takeTopicRequest(_ message: OpaquePointer, context: PluginContext) {
        let reply = natsMsg_GetReply(message).map { String(cString: $0) }
        let length = Int(natsMsg_GetDataLength(message))
        let body: [UInt8] = natsMsg_GetData(message).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
        herald_nats_message_free(message)
        guard let reply else { return }
        let request: NATSTopicRequest
        do {
            request = try NATSTopicRequest(body)
        } catch {
            context.logger.warning("refused a topic change request from NATS", metadata: ["error": "\(error.message)"])
            return answer(reply, ["error": "INVALID_ARGUMENT", "message": .string(error.message)])
        }
        let control = context.topics
        if request.operation == .info {
            Task(executorPreference: context.loop) {
                do {
                    self.answer(reply, NATSTopicRequest.infoReply(try await control.subscribedTopics(ifTokenIs: request.tokens[0])))
                } catch {
                    let status = (error as? MessageError)?.status ?? .internal
                    self.answer(reply, ["error": .string(status.rawValue), "message": .string("\(error)")])
                }
            }
            return
        }
        Task(executorPreference: context.loop) {
            let results: [TopicChangeResult]
            do {
                results = try await control.change(request.topic, add: request.add, tokens: request.tokens)
            } catch {
                let status = (error as? MessageError)?.status ?? .internal
                results = request.tokens.map { _ in .failed(status, message: "\(error)") }
            }
            self.answer(reply, NATSTopicRequest.reply(results))
        }
    }

    /// The longest single wait (µs) before subscribing again to a consumer still bound to an ended connection's
    /// subscription; the waits double from 50 ms, so about 3 s in all.
    private static let boundConsumerPatience: UInt32 = 1_600_000

    /// Makes the durable consumer `durable` on `stream` (or keeps it, with what waits for it) and subscribes to it.
    /// A consumer with AckPolicy `all` (made so with `ackAll`, or kept so) comes with its ``CumulativeAcks``.
    private func subscribeDurable(
        stream: String, durable: String, filter: String, deliverNew: Bool, ackAll: Bool = false, jetStream: UnsafeHandle,
        context: PluginContext
    ) async throws -> (subscription: UnsafeHandle, relay: UnsafeRawHandle, acks: CumulativeAcks?) {
        let project = context.projectID
        let deliver = NATSSubjects.deliverSubject(project: project, consumer: durable)
        let relay = SubscriptionRelay(receiver: self, kind: .jetStream)
        let options = self.options
        let shared = self.shared
        let result: Result<(UnsafeHandle, UnsafeRawHandle, CumulativeAcks?), NATSReceiverError> = try await context.loop.offload {
            var code = jsErrCode(rawValue: 0)
            var state = herald_nats_consumer_state()
            var status = herald_nats_ensure_consumer(
                jetStream.pointer, stream, durable, filter, deliver, deliverNew, ackAll, options.ackWait.nanoseconds,
                Int64(options.maxAckPending), Int64(options.maxDeliver), &state, &code
            )
            guard status == NATS_OK else {
                return .failure(
                    .jetStream(
                        operation: "create the consumer \(durable)", detail: String(cString: herald_nats_last_error(status)),
                        code: Int(code.rawValue)))
            }
            // Before the first delivery can come.
            relay.acks =
                state.acksAll
                ? CumulativeAcks(
                    state: state, ackWait: options.ackWait, redeliveryDelay: options.redeliveryDelay, maxDeliver: options.maxDeliver)
                : nil
            var subscription: OpaquePointer?
            let closure = Unmanaged.passRetained(relay).toOpaque()
            // A consumer still bound to the subscription of a connection that just ended (this instance's before a
            // restart) is freed when the server has seen that connection go: until then, try again, for a while.
            var wait: UInt32 = 50_000
            while true {
                status = herald_nats_subscribe_durable(&subscription, jetStream.pointer, stream, durable, filter, nil, nil, &code)
                guard status != NATS_OK, wait <= Self.boundConsumerPatience,
                    String(cString: herald_nats_last_error(status)).contains("already bound")
                else { break }
                shared.withLock { $0.statistics.boundConsumerRetries += 1 }
                usleep(wait)
                wait *= 2
            }
            guard status == NATS_OK, let subscription else {
                Unmanaged<SubscriptionRelay>.fromOpaque(closure).release()
                return .failure(
                    .jetStream(
                        operation: "subscribe to the consumer \(durable)", detail: String(cString: herald_nats_last_error(status)),
                        code: Int(code.rawValue)))
            }
            return .success((UnsafeHandle(subscription), UnsafeRawHandle(closure), relay.acks))
        }
        return try result.get()
    }

    /// Stored topic delivery: a durable consumer per wanted topic (made from the next message on: a subscriber gets
    /// what is sent from its subscription on, as with FCM), deleted when the topic is left. The consumers are named
    /// after the instance (``NATSSubjects/topicConsumerName(instance:topic:)``), so they outlive a restart.
    private func changeStoredTopics() async throws {
        guard let context else { return }
        let (wanted, current, jetStream): (Set<String>, Set<String>, UnsafeHandle?) = try await context.loop.submit {
            (self.wantedTopics, Set(self.storedTopicSubscriptions.keys), self.stopping ? nil : self.jetStream.map(UnsafeHandle.init))
        }
        guard let jetStream, wanted != current, let token = try await context.topics.token() else { return }
        let instance = options.consumer ?? NATSSubjects.consumerName(token: token)
        let stream = topicStreamName
        for topic in current.subtracting(wanted) {
            try await context.loop.submit {
                if let subscription = self.storedTopicSubscriptions.removeValue(forKey: topic) { self.close(subscription) }
                // Left: what was settled and not acknowledged yet goes with the consumer.
                self.storedTopicAcks.removeValue(forKey: topic)?.discard()
            }
            let durable = NATSSubjects.topicConsumerName(instance: instance, topic: topic)
            _ = try await context.loop.offload {
                var code = jsErrCode(rawValue: 0)
                return herald_nats_delete_consumer(jetStream.pointer, stream, durable, &code)
            }
        }
        for topic in wanted.subtracting(current) {
            let (subscription, relay, acks) = try await subscribeDurable(
                stream: stream, durable: NATSSubjects.topicConsumerName(instance: instance, topic: topic),
                filter: NATSSubjects.topic(project: context.projectID, topic: topic), deliverNew: true,
                ackAll: options.cumulativeTopicAcks, jetStream: jetStream, context: context)
            try await context.loop.submit {
                if self.stopping {
                    Self.discard(subscription.pointer, relay: relay.pointer)
                } else {
                    if let acks { self.storedTopicAcks[topic] = acks }
                    if self.adopt(subscription.pointer, relay: relay.pointer) {
                        self.storedTopicSubscriptions[topic] = subscription.pointer
                    } else {
                        self.storedTopicAcks.removeValue(forKey: topic)?.discard()
                    }
                }
            }
        }
        context.logger.info("receiving topic messages from JetStream", metadata: ["stream": "\(stream)", "topics": "\(wanted.sorted())"])
    }

    /// Writes `token` to the registrations bucket under `key` (deletes the key for `nil`), so a gateway knows it.
    private func register(_ token: String?, key: String, jetStream: UnsafeHandle, context: PluginContext) async throws {
        let bucket = options.registrationBucket ?? NATSSubjects.registrationBucket(project: context.projectID)
        let replicas = Int64(options.effectiveReplicas)
        let failure: String? = try await context.loop.offload {
            var code = jsErrCode(rawValue: 0)
            let status = herald_nats_put_registration(jetStream.pointer, bucket, key, token, replicas, &code)
            return status == NATS_OK ? nil : String(cString: herald_nats_last_error(status))
        }
        if let failure {
            throw NATSReceiverError.jetStream(operation: "record the registration in the bucket \(bucket)", detail: failure, code: 0)
        }
    }

    public func topicsDidChange(_ topics: Set<String>) {
        wantedTopics = topics
        applyTopics()
    }

    /// Subscribes to the wanted topics not subscribed yet and unsubscribes from the others. Loop thread.
    private func applyTopics() {
        guard let connection, let context, !stopping else { return }
        if options.topicDelivery == .stored {
            // Before the stream exists, start makes the consumers once it is there.
            guard topicStreamReady else { return }
            // Consumers are made and deleted with JetStream requests: one change at a time, off the loop.
            tokenChanges.start {
                do {
                    try await self.changeStoredTopics()
                } catch {
                    context.logger.error("cannot follow the topics on NATS", metadata: ["error": "\(error)"])
                }
            }
            return
        }
        for (topic, subscription) in topicSubscriptions where !wantedTopics.contains(topic) {
            self.close(subscription)
            topicSubscriptions[topic] = nil
        }
        for topic in wantedTopics where topicSubscriptions[topic] == nil {
            let subject = NATSSubjects.topic(project: context.projectID, topic: topic)
            let closure = Unmanaged.passRetained(SubscriptionRelay(receiver: self, kind: .core)).toOpaque()
            var subscription: OpaquePointer?
            let status: natsStatus =
                switch options.topicDelivery {
                case .fanOut: natsConnection_SubscribeSync(&subscription, connection, subject)
                case .shared(let group): natsConnection_QueueSubscribeSync(&subscription, connection, subject, group)
                case .stored: NATS_ERR
                }
            guard status == NATS_OK, let subscription else {
                Unmanaged<SubscriptionRelay>.fromOpaque(closure).release()
                context.logger.error(
                    "cannot subscribe to a topic subject",
                    metadata: ["subject": "\(subject)", "error": "\(String(cString: herald_nats_last_error(status)))"])
                continue
            }
            if adopt(subscription, relay: closure) { topicSubscriptions[topic] = subscription }
        }
    }

    // MARK: Messages

    /// A message taken from one of the receiver's subscriptions, on the loop thread. Takes ownership of `message`. `acks`: those
    /// of its consumer when it acknowledges cumulatively.
    func handle(_ message: OpaquePointer, kind: SubscriptionRelay.Kind, acks: CumulativeAcks? = nil) {
        guard let context, connection != nil, !stopping else {
            // Not acknowledged: JetStream delivers it again (to the next start); a core message is gone.
            herald_nats_message_free(message)
            return
        }
        if kind == .topicRequest { return takeTopicRequest(message, context: context) }
        shared.withLock { $0.statistics.received += 1 }
        // JetStream's metadata, read from the reply subject once per delivery (without allocating).
        let storedTopic = kind == .jetStream && options.topicDelivery == .stored && isTopicSubject(message, project: context.projectID)
        var parsed = herald_nats_delivery()
        let metadata = kind == .jetStream && herald_nats_delivery_parse(natsMsg_GetReply(message), &parsed) ? parsed : nil
        var delivery: Delivery?
        if let acks, let metadata {
            let sequence = metadata.streamSequence
            guard acks.delivered(sequence, delivery: metadata.consumerSequence) else {
                // A copy of a message acknowledged already: delivered again before the ack reached the server, or
                // by a server that lost the ack. Acknowledged again (it and all below were committed).
                natsMsg_Ack(message, nil)
                herald_nats_message_free(message)
                return
            }
            delivery = Delivery(acks: acks, sequence: sequence, deliveries: metadata.delivered)
        }
        let length = Int(natsMsg_GetDataLength(message))
        let body: [UInt8] = natsMsg_GetData(message).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
        let reply = Self.replySubject(message, kind: kind)

        switch kind {
        case .jetStream where context.bus.isFull:
            settle(message, .redeliverLater, delivery)
            return
        case .jetStream where storedTopic:
            takeStoredTopicMessage(message, body: body, metadata: metadata, delivery: delivery, context: context)
        case .core where (context.bus.isFull || heldCount > 0) && heldCount < options.maxHeldMessages:
            // Core NATS cannot be asked to wait: hold the message (in order) until the bus has room.
            held.append(message)
            return
        default:
            let identity = kind == .jetStream ? metadata.map { Self.storedIdentity(message, metadata: $0) } : nil
            offer(message, kind: kind, body: body, reply: reply, context: context, identity: identity)
        }
    }

    /// The bus has room again: offer the held core messages (on a later turn, not inside the bus's own call).
    public func resume() {
        guard heldCount > 0, let loop = context?.loop else { return }
        loop.execute { self.offerHeld() }
    }

    private var heldCount: Int { held.count - heldStart }

    private func offerHeld() {
        guard let context else { return }
        while heldCount > 0, !context.bus.isFull, !stopping {
            let message = held[heldStart]
            heldStart += 1
            let length = Int(natsMsg_GetDataLength(message))
            let body: [UInt8] = natsMsg_GetData(message).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
            offer(message, kind: .core, body: body, reply: Self.replySubject(message, kind: .core), context: context)
        }
        if heldStart > 1024, heldStart * 2 > held.count {
            held.removeFirst(heldStart)
            heldStart = 0
        }
    }

    /// Where to answer a core message: its reply subject, unless it was published to a stream (it has a
    /// `Nats-Msg-Id`): then the reply subject is the publisher's, waiting for the stream's acknowledgement.
    private static func replySubject(_ message: OpaquePointer, kind: SubscriptionRelay.Kind) -> String? {
        guard kind == .core, herald_nats_stored_message_id(message) == nil else { return nil }
        return natsMsg_GetReply(message).map { String(cString: $0) }
    }

    /// A stored topic message: it expires its time to live after it was stored (`android.ttl`, else FCM's default
    /// of 4 weeks; `apns-expiration` is the bus's own). One with a collapse key is held while more messages wait for
    /// its consumer, so that of several with one key only the newest is handled (the others are acknowledged and
    /// recorded as `message_dropped`, reason `collapsed`). Loop thread.
    private func takeStoredTopicMessage(
        _ message: OpaquePointer, body: [UInt8], metadata: herald_nats_delivery?, delivery: Delivery?, context: PluginContext
    ) {
        var storedAt = Int64(0)
        var pending = UInt64(0)
        var identity: StoredDeliveryIdentity?
        if let metadata {
            storedAt = metadata.timestamp / 1_000_000_000
            pending = metadata.pending
            identity = Self.storedIdentity(message, metadata: metadata)
        }
        let fields = StoredTopicFields(body)
        let expiresAt = storedAt + (fields.timeToLive ?? Self.defaultTimeToLive)
        guard fields.collapseKey != nil || !collapsing.isEmpty else {
            // Nothing to collapse with, nothing held: straight to the bus.
            return offer(
                message, kind: .jetStream, body: body, reply: nil, context: context, expiresAt: expiresAt, identity: identity,
                delivery: delivery)
        }
        let subject = String(cString: natsMsg_GetSubject(message))
        var waiting = collapsing[subject] ?? []
        if let key = fields.collapseKey, let index = waiting.firstIndex(where: { $0.key == key }) {
            let replaced = waiting.remove(at: index)
            context.bus.recordDropped(.collapsed, detail: "replaced by a newer message with collapse key \(key) while waiting")
            settle(replaced.message, .acknowledge, replaced.delivery)
        }
        if let key = fields.collapseKey, pending > 0, waiting.count < max(1, options.maxAckPending / 2) {
            waiting.append((key, message, expiresAt, identity, delivery))
            collapsing[subject] = waiting
            return
        }
        collapsing[subject] = nil
        for held in waiting {
            let length = Int(natsMsg_GetDataLength(held.message))
            let heldBody: [UInt8] = natsMsg_GetData(held.message).map { Array(UnsafeRawBufferPointer(start: $0, count: length)) } ?? []
            offer(
                held.message, kind: .jetStream, body: heldBody, reply: nil, context: context, expiresAt: held.expiresAt,
                identity: held.identity, delivery: held.delivery)
        }
        offer(
            message, kind: .jetStream, body: body, reply: nil, context: context, expiresAt: expiresAt, identity: identity,
            delivery: delivery)
    }

    /// Whether `message` came on a topic subject (`herald.<project>.topic.…`). Loop thread.
    private func isTopicSubject(_ message: OpaquePointer, project: String) -> Bool {
        guard let subject = natsMsg_GetSubject(message) else { return false }
        if topicSubjectPrefix.isEmpty { topicSubjectPrefix = Array(("herald." + project + ".topic.").utf8CString) }
        return topicSubjectPrefix.withUnsafeBufferPointer { strncmp(subject, $0.baseAddress!, $0.count - 1) == 0 }
    }

    /// FCM's default time to live: 4 weeks.
    static let defaultTimeToLive: Int64 = 28 * 24 * 3600

    /// Submits `message` to the bus; acknowledges, refuses or answers it with the bus's answer. `identity`: a
    /// stored message's (`nil` when JetStream's metadata could not be read: then it gets a new ID).
    private func offer(
        _ message: OpaquePointer, kind: SubscriptionRelay.Kind, body: [UInt8], reply: String?, context: PluginContext,
        expiresAt: Int64? = nil, identity: StoredDeliveryIdentity? = nil, delivery: Delivery? = nil
    ) {
        // The same stored message keeps its ID across redeliveries, so the inbox de-duplicates them.
        let messageID = identity?.messageID
        let publish = identity?.publish
        if let messageID, let stored = publish {
            // Judged as JetStream judges a publish: by when each copy was stored, not when it is taken here (two
            // sends of the same body stored minutes apart, read together from a backlog, are two messages).
            if let earlier = recentPublishes[stored.key], earlier.sequence != stored.sequence,
                abs(stored.storedAt - earlier.storedAt) < duplicateWindow.nanoseconds
            {
                // A publish JetStream stored twice: around a stream leader's change, a publisher's retry with the same
                // `Nats-Msg-Id` can reach a leader that has not seen the first copy. Handled once.
                shared.withLock { $0.statistics.duplicatesDropped += 1 }
                context.logger.debug(
                    "a second stored copy of a publish already taken; acknowledged, not handled again",
                    metadata: ["message_id": "\(messageID)", "first_sequence": "\(earlier.sequence)"])
                return settle(message, .acknowledge, delivery)
            }
            rememberPublish(stored.key, sequence: stored.sequence, storedAt: stored.storedAt)
        }
        let project = context.projectID
        let sendContext = SendContext(messageID: messageID, answerWhenHandled: kind == .jetStream, expiresAt: expiresAt)
        context.bus.submit(body, sendContext) { [self] outcome in
            if case .invalid(let error) = outcome {
                shared.withLock { $0.statistics.invalid += 1 }
                // Debug, not warning: each one is recorded (message_dropped `invalid`, the statistics); a warning per
                // message would let any publisher flood the log (the soak's malformed messages wrote 3,065 lines).
                context.logger.debug(
                    "dropped an invalid message from NATS",
                    metadata: [
                        "subject": "\(String(cString: natsMsg_GetSubject(message)))", "error": "\(error.message)",
                    ])
            }
            if let reply {
                switch outcome {
                case .accepted(let id): answer(reply, fcmSendResponse(project: project, messageID: id))
                case .invalid(let error), .refused(let error): answer(reply, error.fcmErrorBody)
                }
            }
            guard kind == .jetStream else {
                settle(message, .done)
                return
            }
            let taken = if case .accepted = outcome { true } else { false }
            if !taken, let publish, recentPublishes[publish.key]?.sequence == publish.sequence {
                // Not taken: another copy of it may be.
                recentPublishes[publish.key] = nil
            }
            switch outcome {
            case .accepted: settle(message, .acknowledge, delivery)
            case .invalid: settle(message, .terminate, delivery)
            case .refused(let error):
                switch error.reason {
                case .busy, .shuttingDown, .storeUnavailable, .handlerFailed: settle(message, .redeliverLater, delivery)
                default:
                    context.logger.warning("terminated a JetStream message the instance refuses for good", metadata: ["error": "\(error)"])
                    settle(message, .terminate, delivery)
                }
            }
        }
    }

    /// Remembers a publish taken now, forgetting the oldest first (a few per call at most, whatever the backlog).
    private func rememberPublish(_ key: PublishFingerprint, sequence: UInt64, storedAt: Int64) {
        let now = ContinuousClock.now
        while publishOrderStart < publishOrder.count {
            let oldest = publishOrder[publishOrderStart]
            // At most `recentPublishLimit`, none taken longer ago than the duplicate window.
            guard recentPublishes.count >= recentPublishLimit || now - oldest.at >= duplicateWindow else { break }
            if let index = recentPublishes.index(forKey: oldest.key), recentPublishes.values[index].at == oldest.at {
                recentPublishes.remove(at: index)
            }
            publishOrderStart += 1
        }
        if publishOrderStart > 1024, publishOrderStart * 2 > publishOrder.count {
            publishOrder.removeFirst(publishOrderStart)
            publishOrderStart = 0
        }
        recentPublishes[key] = (sequence, storedAt, now)
        publishOrder.append((key, now))
    }

    /// A stored message's identity, made once per delivery: the ID Herald gives it, and, when its publisher gave it
    /// a `Nats-Msg-Id`, the fingerprint of its stream and `Nats-Msg-Id` (the key ``recentPublishes`` knows the
    /// publish by) with its stream sequence and when JetStream stored it (nanoseconds since 1970).
    struct StoredDeliveryIdentity {
        let messageID: String
        let publish: (key: PublishFingerprint, sequence: UInt64, storedAt: Int64)?
    }

    static func storedIdentity(_ message: OpaquePointer, metadata: herald_nats_delivery) -> StoredDeliveryIdentity {
        let unique = herald_nats_stored_message_id(message)
        let stream = UnsafeRawBufferPointer(start: metadata.stream, count: metadata.streamLength)
        let messageID = storedMessageID(stream: stream, sequence: metadata.streamSequence, unique: unique, storedAt: metadata.timestamp)
        let publish = unique.map { unique in
            (
                key: PublishFingerprint(stream: stream, publisherID: UnsafeRawBufferPointer(start: unique, count: strlen(unique))),
                sequence: metadata.streamSequence, storedAt: metadata.timestamp
            )
        }
        return StoredDeliveryIdentity(messageID: messageID, publish: publish)
    }

    private enum Settlement { case acknowledge, redeliverLater, terminate, done }

    /// A delivery of a consumer that acknowledges cumulatively: its acks, the stream sequence, and how many times
    /// JetStream delivered the message so far.
    struct Delivery {
        let acks: CumulativeAcks
        let sequence: UInt64
        let deliveries: UInt64
    }

    /// Answers JetStream for `message` (when the connection is still open) and frees it. Loop thread. A `delivery`
    /// of a consumer that acknowledges cumulatively is not acknowledged (nor terminated) on its own: once settled,
    /// it waits for the ack that covers it, sent at the end of this loop turn when nothing below it is pending.
    private func settle(_ message: OpaquePointer, _ settlement: Settlement, _ delivery: Delivery? = nil) {
        if let delivery, connection != nil {
            let acks = delivery.acks
            switch settlement {
            case .acknowledge, .terminate:
                acks.settle(message, sequence: delivery.sequence, terminated: settlement == .terminate)
                if settlement == .terminate { shared.withLock { $0.statistics.terminated += 1 } }
                scheduleAcknowledgement(acks)
            case .redeliverLater:
                if acks.handBack(delivery.sequence, deliveries: delivery.deliveries),
                    natsMsg_NakWithDelay(message, options.redeliveryDelay.milliseconds, nil) == NATS_OK
                {
                    shared.withLock { $0.statistics.redeliveryRequested += 1 }
                }
                herald_nats_message_free(message)
            case .done:
                herald_nats_message_free(message)
            }
            return
        }
        defer { herald_nats_message_free(message) }
        guard connection != nil else { return }
        switch settlement {
        case .acknowledge:
            if natsMsg_Ack(message, nil) == NATS_OK {
                shared.withLock {
                    $0.statistics.acknowledged += 1
                    $0.statistics.acknowledgementsSent += 1
                }
            }
        case .redeliverLater:
            if natsMsg_NakWithDelay(message, options.redeliveryDelay.milliseconds, nil) == NATS_OK {
                shared.withLock { $0.statistics.redeliveryRequested += 1 }
            }
        case .terminate:
            if natsMsg_Term(message, nil) == NATS_OK { shared.withLock { $0.statistics.terminated += 1 } }
        case .done:
            break
        }
    }

    /// `acks` settled a message: the ack that covers it goes at the end of this loop turn once a batch waits (an
    /// eighth of ``Options/maxAckPending``, so JetStream never stops for want of acks), else when
    /// ``Options/cumulativeAckDelay`` has passed. Loop thread.
    private func scheduleAcknowledgement(_ acks: CumulativeAcks) {
        guard !acks.isDue, let loop = context?.loop else { return }
        if options.cumulativeAckDelay <= .zero || acks.waiting >= max(1, options.maxAckPending / 8) {
            acks.isDue = true
            acks.timer?.cancel()
            acks.timer = nil
            loop.execute { self.acknowledge(acks) }
        } else if acks.timer == nil {
            acks.timer = loop.scheduleTask(in: options.cumulativeAckDelay) { self.acknowledge(acks) }
        }
    }

    /// Sends the ack that covers what `acks` has settled, as far as nothing below is pending. Loop thread.
    private func acknowledge(_ acks: CumulativeAcks) {
        acks.timer?.cancel()
        acks.timer = nil
        guard connection != nil else {
            acks.isDue = false
            return
        }
        let covered = acks.acknowledge()
        if covered > 0 {
            shared.withLock {
                $0.statistics.acknowledged += covered
                $0.statistics.acknowledgementsSent += 1
            }
        }
    }

    /// Acknowledges what every cumulative consumer has settled (at stop). Loop thread.
    private func acknowledgeSettled() {
        for acks in storedTopicAcks.values { acknowledge(acks) }
    }

    private func answer(_ reply: String, _ body: JSONValue) {
        guard let connection else { return }
        let bytes = body.jsonBytes()
        let status = bytes.withUnsafeBytes { natsConnection_Publish(connection, reply, $0.baseAddress, Int32($0.count)) }
        if status == NATS_OK { shared.withLock { $0.statistics.replies += 1 } }
    }

    /// `nats-<stream>-<stream sequence>-<Nats-Msg-Id>` (`<time stored, ns>` in place of a missing `Nats-Msg-Id`):
    /// stable for one stored message, whichever delivery this is, and what ``NATSPublisher/publishStored(_:body:messageID:)``
    /// answers. The sequence alone is not enough: a nats-server killed (SIGKILL) after its stream emptied can come
    /// back with the stream's last sequence set back, and then gives new messages the sequences of messages already
    /// handled; the publisher's ID (or the time they were stored) tells them apart, so de-duplication does not drop
    /// them. Written straight into the string's storage: one allocation per delivery.
    static func storedMessageID(stream: UnsafeRawBufferPointer, sequence: UInt64, unique: UnsafePointer<CChar>?, storedAt: Int64) -> String
    {
        let uniqueLength = unique.map { strlen($0) } ?? 0
        let capacity = 5 + stream.count + 1 + 20 + 1 + max(uniqueLength, 20)
        return String(unsafeUninitializedCapacity: capacity) { buffer in
            var end = 0
            func append(_ bytes: UnsafeRawBufferPointer) {
                guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
                UnsafeMutableRawPointer(buffer.baseAddress! + end).copyMemory(from: base, byteCount: bytes.count)
                end += bytes.count
            }
            func append(_ byte: UInt8) {
                buffer[end] = byte
                end += 1
            }
            func appendDecimal(_ value: UInt64) {
                var digits = 1
                var rest = value / 10
                while rest > 0 {
                    digits += 1
                    rest /= 10
                }
                var value = value
                for index in stride(from: end + digits - 1, through: end, by: -1) {
                    buffer[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
                end += digits
            }
            let prefix: StaticString = "nats-"
            append(UnsafeRawBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount))
            append(stream)
            append(UInt8(ascii: "-"))
            appendDecimal(sequence)
            append(UInt8(ascii: "-"))
            if let unique {
                append(UnsafeRawBufferPointer(start: unique, count: uniqueLength))
            } else {
                if storedAt < 0 { append(UInt8(ascii: "-")) }
                appendDecimal(storedAt.magnitude)
            }
            return end
        }
    }

    // MARK: Connection events (from cnats's callback thread)

    func connectionChanged(_ state: ConnectionState, url: String? = nil, logger: Logger, bus: MessageBus, loop: EventLoop) {
        let previous: ConnectionState? = shared.withLock { shared in
            let previous = shared.state
            // Once stop() closes the connection, its disconnect is no loss: the state only moves to closed.
            guard !shared.closing || state == .closed else { return nil }
            shared.state = state
            switch state {
            case .reconnecting where previous == .connected: shared.statistics.disconnects += 1
            case .connected where previous == .reconnecting: shared.statistics.reconnects += 1
            default: break
            }
            return previous
        }
        guard let previous, previous != state else { return }
        loop.execute {
            bus.recordDiagnostic("nats_connection", parameters: ["state": state.rawValue, "previous": previous.rawValue])
            if state == .connected, previous == .reconnecting { for acks in self.storedTopicAcks.values { acks.reconnected() } }
        }
        switch state {
        case .reconnecting: logger.warning("lost the NATS connection; reconnecting")
        case .connected: logger.notice("reconnected to NATS; subscriptions restored", metadata: ["url": "\(url ?? "?")"])
        case .closed: logger.notice("the NATS connection is closed")
        case .connecting: break
        }
    }
}

/// What a stored topic message's body says of its waiting: `android.ttl` (`"3.5s"`) and its collapse key
/// (`android.collapse_key`, else the `apns-collapse-id` header). The body is parsed only when it names either.
struct StoredTopicFields {
    var timeToLive: Int64?
    var collapseKey: String?

    init(_ body: [UInt8]) {
        guard Self.contains(body, "ttl") || Self.contains(body, "collapse"),
            let message = (try? JSONParser.parse(body))?["message"]
        else { return }
        if let ttl = message["android"]?["ttl"]?.stringValue, ttl.hasSuffix("s"), let seconds = Double(ttl.dropLast()), seconds >= 0 {
            timeToLive = Int64(seconds.rounded(.down))
        }
        collapseKey = message["android"]?["collapse_key"]?.stringValue ?? message["apns"]?["headers"]?["apns-collapse-id"]?.stringValue
    }

    private static func contains(_ body: [UInt8], _ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        return body.withUnsafeBufferPointer { bytes in
            guard let base = bytes.baseAddress, bytes.count >= count else { return false }
            for start in 0...(bytes.count - count) where base[start] == word.utf8Start[0] {
                if memcmp(base + start, word.utf8Start, count) == 0 { return true }
            }
            return false
        }
    }
}
