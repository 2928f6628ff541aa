public import Herald

/// Gateway mode: passes FCM v1 sends on to the fleet's instances through NATS, so an app server that uses a
/// Firebase Admin SDK talks to one gateway and reaches every instance. It is HTTPReceiver's forwarder (its
/// `forwarder` option) and a `Receiver` of its own only for its lifecycle and its health (it takes in nothing).
///
/// Per target, matching what ``NATSReceiver`` reads:
///
/// - **token** (or **fid**, an installation ID): the registrations bucket (which each instance writes at start and
///   at every rotation) must hold the token under its installation ID, else `404 UNREGISTERED`. The body is then
///   published to JetStream on `herald.<project>.token.<token>` and the sender answered only once the stream has
///   stored it, with the ID the instance will give the message (`nats-<stream>-<sequence>-<Nats-Msg-Id>`): stored means it reaches
///   the instance, at least once, even if the instance is down now (within the stream's limits).
/// - **topic**: published on `herald.<project>.topic.<topic>`, through JetStream when a stream takes topic subjects
///   (instances with stored topic delivery make one): answered once stored, with the stored message's ID, and every
///   subscribed instance gets it, also one away now, within its time to live. Without such a stream, on core NATS and
///   flushed: every instance subscribed and connected at that moment gets it (one of a queue group, with shared
///   delivery), at most once; the ID is one the gateway makes.
/// - **condition**: refused, `400 INVALID_ARGUMENT`: the gateway does not know the instances' subscriptions, so it
///   cannot evaluate one. Send to each topic instead.
///
/// Every publish carries a `Nats-Msg-Id` made from the send (a hash of its subject and body), so a sender's retry
/// through this gateway or another is stored once. Registrations are read from a copy of the bucket a KV watch keeps
/// (``NATSPublisher/watchRegistrations(bucket:)``): an unknown token is answered without a round trip. The fleet's
/// senders too are watched (``senderOptions``): a sender revoked is refused as soon as the watch delivers it. A
/// gateway holds nothing else: several are interchangeable behind a balancer.
///
/// `validate_only` checks the request (and a token's registration) and publishes nothing. NATS unreachable (down,
/// reconnecting, or no answer within ``NATSReceiver/Options/requestTimeout``): `503 UNAVAILABLE`; the sender retries.
///
/// No send waits for a round trip on a thread of its own: the publish is handed to cnats, whose connection runs on
/// the loop as the receiver's does (Herald's adapter reads and writes its socket), and the send suspends until it is
/// settled, so any number are in flight at once on the one connection. A stored send resumes when JetStream's
/// acknowledgement reaches the gateway's one subscription for them (each publish's reply subject ends in a number of
/// its own), taken on the loop right after the read that brought it; a core topic send resumes when the server has
/// its publish: an empty marker message the gateway publishes after it, to a subject of that subscription, has come
/// back (the server handles one connection's messages in order, so this says what a flush's PONG would; one marker
/// at a time, for every send waiting when it is published). No acknowledgement within the request timeout, or the connection lost meanwhile: `503
/// UNAVAILABLE` (the message may have been stored; the retry, with the same `Nats-Msg-Id`, is stored once).
/// ``stop()`` answers the sends in flight `503 UNAVAILABLE` at once. Only a registration the watched copy cannot
/// answer yet (the watch catching up at start) is read from the bucket, on the loop's blocking pool.
public final class NATSGateway: Receiver, SendForwarder, @unchecked Sendable {
    // @unchecked Sendable: `options` is immutable; the publisher and the context sit behind a lock.

    public let options: NATSReceiver.Options
    /// The UnifiedPush endpoints' URL prefix as app servers reach this gateway: its origin is the audience VAPID tokens
    /// must name. `nil`: no `POST /up/{token}` (see ``receive(_:answer:)``).
    public let webPushEndpointURL: String?
    let shared = Locked<(publisher: NATSPublisher?, context: PluginContext?)>((nil, nil))
    /// Yields when the watched senders bucket has changed (``senderOptions``).
    private let sendersChanged: AsyncStream<Void>.Continuation
    let sendersChanges: AsyncStream<Void>
    /// Whether the topic stream exists (a cache: once seen it is assumed to stay), and when it was last looked for.
    private let topicStream = Locked<(exists: Bool, checked: ContinuousClock.Instant?)>((false, nil))

    /// A gateway publishing to the fleet `options` names; with `webPushEndpointURL`, also UnifiedPush pushes.
    public init(options: NATSReceiver.Options, webPushEndpointURL: String? = nil) {
        self.options = options
        self.webPushEndpointURL = webPushEndpointURL
        (sendersChanges, sendersChanged) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(name: "nats-gateway", summary: "publishes FCM v1 sends to the fleet's instances through NATS")
    }

    public func start(_ context: PluginContext) async throws {
        let options = self.options
        let project = context.projectID
        let webPushEndpointURL = self.webPushEndpointURL
        // The connection runs on the loop (connected there, as the adapter needs): acknowledgements are read and
        // their sends resumed on the loop thread. Its round trips (the streams here) run off the loop.
        let loop = context.loop
        let publisher = try await loop.submit {
            try NATSPublisher(options: options, timeout: options.requestTimeout, reconnect: true, loop: loop)
        }
        do {
            try await loop.offload {
                // Token messages sent before any instance started are kept for it.
                try publisher.ensureStream(project: project, options: options)
                if webPushEndpointURL != nil {
                    try publisher.ensureStream(
                        NATSSubjects.webPushStreamName(project: project), subjects: NATSSubjects.allWebPushes(project: project),
                        options: options)
                }
            }
            try await loop.submit { try publisher.startPipeline() }
        } catch {
            await publisher.shutdown()
            throw error
        }
        // Registrations are read from a watched copy of the bucket: an unknown token is answered without a round trip.
        publisher.watchRegistrations(bucket: options.registrationBucket ?? NATSSubjects.registrationBucket(project: project))
        shared.withLock { $0 = (publisher, context) }
        // The senders too: each change read again from the copy (``senderOptions``).
        let sendersChanged = self.sendersChanged
        publisher.watchSenders(bucket: NATSSubjects.sendersBucket(project: project)) { sendersChanged.yield() }
        context.logger.info(
            "gateway mode: sends go to NATS",
            metadata: [
                "servers": "\(NATSConnectionSettings.redacted(options.servers))",
                "stream": "\(options.stream ?? NATSSubjects.streamName(project: project))",
            ])
    }

    public func stop() async {
        // The publisher is closed here; its memory goes with its last reference (a send in progress, a watch).
        let publisher = shared.withLock { shared in
            defer { shared = (nil, nil) }
            return shared.publisher
        }
        // Sends in flight are answered now, UNAVAILABLE: stored or not, their senders' retries are stored once.
        publisher?.closePipeline()
        publisher?.stopWatching()
        // The connection closes on the loop, and its handles there are gone before the loop may stop.
        await publisher?.shutdown()
    }

    /// Sends waiting for JetStream's acknowledgement or a marker now (none once stopped).
    package var sendsInFlight: Int {
        shared.withLock { $0.publisher }?.sendsInFlight ?? 0
    }

    /// The libuv handles the connection to NATS has open on the loop (it runs there while the gateway does: its
    /// socket's poll and the adapter's wake-up); 0 once stopped.
    package func connectionHandlesOnLoop() async -> Int {
        guard case (let publisher?, let context?) = shared.withLock({ $0 }) else { return 0 }
        return (try? await context.loop.submit { Int(publisher.adapterHandles) }) ?? 0
    }

    /// The watched copy's registration of `token`'s installation: `nil` while the watch has not caught up (a send
    /// then reads the bucket), `.some(nil)` when the copy has none.
    package func watchedRegistration(token: String) -> String?? {
        shared.withLock { $0.publisher }?.cachedRegistration(key: NATSSubjects.registrationKey(token: token))
    }

    /// Healthy while connected to NATS.
    public var health: ReceiverHealth? {
        guard let publisher = shared.withLock({ $0.publisher }) else { return ReceiverHealth(healthy: false, state: "closed") }
        let state = publisher.connectionState
        return ReceiverHealth(healthy: state == .connected, state: state.rawValue)
    }

    public func forward(_ request: FCMSendRequest, body: [UInt8]) async -> Result<String, MessageError> {
        guard case (let publisher?, let context?) = shared.withLock({ $0 }) else { return .failure(MessageError(.shuttingDown)) }
        let project = context.projectID
        let localID = request.message.messageID ?? context.decoding.makeMessageID()
        let token: String
        switch request.message.target {
        case .condition(let condition):
            return .failure(
                MessageError(
                    .invalidCondition(
                        condition,
                        detail:
                            "a Herald gateway does not evaluate conditions (it does not know the instances' topics); send to each topic instead"
                    )))
        case .topic(let topic):
            if request.validateOnly { return .success(localID) }
            guard publisher.isConnected else { return .failure(Self.unavailable("not connected to NATS")) }
            do {
                let subject = NATSSubjects.topic(project: project, topic: topic)
                let messageID = Self.idempotencyKey(subject: subject, body: body)
                let store = try await storesTopics(publisher, project: project, loop: context.loop)
                let stored = try await publisher.publishTopicPipelined(subject, body: body, messageID: messageID, stored: store)
                return .success(stored ?? localID)
            } catch {
                return .failure(Self.unavailable("\(error)"))
            }
        case .token(let given):
            token = given
        case .installation(let id):
            token = id
        }
        guard publisher.isConnected else { return .failure(Self.unavailable("not connected to NATS")) }
        let bucket = options.registrationBucket
        let target = request.message.target
        let registered: String?
        do {
            let key =
                if case .installation(let id) = target { NATSSubjects.sanitized(id) } else { NATSSubjects.registrationKey(token: token) }
            if let cached = publisher.cachedRegistration(key: key) {
                registered = cached
            } else {
                registered = try await context.loop.offload { try publisher.registeredToken(key: key, project: project, bucket: bucket) }
            }
        } catch {
            return .failure(Self.unavailable("\(error)"))
        }
        // A token must be the current one of its installation; an installation ID must have one.
        guard let registered, target == .installation(token) || registered == token, NATSSubjects.isSubjectToken(registered) else {
            return .failure(MessageError(.unregistered(target)))
        }
        if request.validateOnly { return .success(localID) }
        do {
            let subject = NATSSubjects.token(project: project, token: registered)
            let messageID = Self.idempotencyKey(subject: subject, body: body)
            return .success(try await publisher.storePipelined(subject, body: body, messageID: messageID))
        } catch {
            return .failure(Self.unavailable("\(error)"))
        }
    }

    /// Whether topic messages go to JetStream: the topic stream (which instances with stored topic delivery make)
    /// exists. Looked for at most every 5 seconds until it is found.
    private func storesTopics(_ publisher: NATSPublisher, project: String, loop: EventLoop) async throws -> Bool {
        let now = ContinuousClock.now
        let known = topicStream.withLock { state -> Bool? in
            if state.exists { return true }
            if let checked = state.checked, now - checked < .seconds(5) { return false }
            return nil
        }
        if let known { return known }
        let name = options.stream.map { $0 + "_TOPICS" } ?? NATSSubjects.topicStreamName(project: project)
        let exists = try await loop.offload { try publisher.streamExists(name) }
        topicStream.withLock { $0 = (exists, now) }
        return exists
    }

    /// The `Nats-Msg-Id` of a send: a hash of its subject and body (64-bit FNV-1a), so that a sender's retry of a
    /// send (after a timeout, a 503, or through another gateway) is stored once within the stream's duplicate
    /// window and answered with the first one's ID. Two identical sends to one token within the window are one.
    static func idempotencyKey(subject: String, body: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ byte: UInt8) { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        for byte in subject.utf8 { mix(byte) }
        mix(0)
        for byte in body { mix(byte) }
        return "h" + String(hash, radix: 16)
    }

    private static func unavailable(_ detail: String) -> MessageError {
        MessageError(.storeUnavailable("NATS: \(detail)"))
    }
}
