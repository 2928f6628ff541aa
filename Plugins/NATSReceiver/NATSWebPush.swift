import Glibc
public import Herald
public import HeraldHTTPReceiver
import Logging

/// A UnifiedPush push as it travels from a gateway to its instance through JetStream: a few `name value` lines
/// (`id`, `ttl`, `urgency`, `sent` in milliseconds since the epoch, and `topic` when given), an empty line, then the
/// body, untouched.
struct NATSWebPushMessage: Equatable {
    var messageID: String
    var ttl: Int64
    var urgency: String
    var topic: String?
    /// When the gateway took it (milliseconds since the epoch): the TTL counts from then.
    var sent: Int64
    var body: [UInt8]

    func encoded() -> [UInt8] {
        var head = "id \(messageID)\nttl \(ttl)\nurgency \(urgency)\nsent \(sent)\n"
        if let topic { head += "topic \(topic)\n" }
        return Array((head + "\n").utf8) + body
    }

    init(messageID: String, ttl: Int64, urgency: String, topic: String?, sent: Int64, body: [UInt8]) {
        self.messageID = messageID
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
        self.sent = sent
        self.body = body
    }

    /// The message `data` holds, or `nil` when it is not one.
    init?(decoding data: [UInt8]) {
        var fields: [String: String] = [:]
        var index = 0
        while true {
            guard let end = data[index...].firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            if end == index {
                index = end + 1
                break
            }
            let line = String(decoding: data[index..<end], as: UTF8.self)
            guard let space = line.firstIndex(of: " ") else { return nil }
            fields[String(line[..<space])] = String(line[line.index(after: space)...])
            index = end + 1
        }
        guard let id = fields["id"], let ttl = fields["ttl"].flatMap({ Int64($0) }), let urgency = fields["urgency"],
            let sent = fields["sent"].flatMap({ Int64($0) })
        else { return nil }
        self.init(messageID: id, ttl: ttl, urgency: urgency, topic: fields["topic"], sent: sent, body: Array(data[index...]))
    }

    /// The push to hand the distributor `now`: its TTL shortened by the time spent on the way; `nil` when that
    /// used it up.
    func push(endpoint: String, now: Int64) -> WebPush? {
        let left = ttl - max(0, now - sent) / 1000
        guard ttl == 0 || left > 0 else { return nil }
        var push = WebPush(token: endpoint, body: body, ttl: ttl == 0 ? 0 : left, urgency: urgency, topic: topic)
        push.authorized = true
        push.messageID = messageID
        return push
    }

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// A value carried to the loop thread, where it is used.
private struct OnLoop<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Whether `token` can be an endpoint token of the fleet: a key-value key and a subject token (letters, digits,
/// `-`, `_`).
private func isEndpointToken(_ token: String) -> Bool {
    !token.isEmpty && token.utf8.count <= 128 && NATSSubjects.sanitized(token) == token
}

// MARK: The gateway's endpoint

extension NATSGateway: WebPushEndpoint {
    /// `POST /up/{token}` on the gateway (the HTTP receiver checked the headers and the size): the endpoint's instance
    /// and VAPID key come from the endpoints bucket (`404` when it holds no such token), the VAPID token is checked
    /// here (`401`/`403`), then the push is published to the instance's subject and answered `201` once JetStream
    /// stored it, with the ID the app will see. NATS unreachable: `503`.
    public func receive(_ push: WebPush, answer: @escaping (WebPushAnswer) -> Void) {
        guard case (let publisher?, let context?) = shared.withLock({ $0 }), let endpointURL = webPushEndpointURL else {
            return answer(.refused(status: 503, reason: "The gateway is not running."))
        }
        guard isEndpointToken(push.token) else { return answer(.notFound) }
        let loop = context.loop
        let project = context.projectID
        let answer = OnLoop(answer)
        let audience = VAPID.origin(of: endpointURL)
        Task {
            let result: WebPushAnswer
            do {
                let entry = try await loop.offload {
                    try publisher.value(key: push.token, bucket: NATSSubjects.webPushBucket(project: project))
                }
                let fields = entry?.split(separator: " ").map(String.init) ?? []
                if let instance = fields.first {
                    if fields.count > 1 {
                        try VAPID.verify(authorization: push.authorization, key: fields[1], audience: audience, now: Int64(time(nil)))
                    }
                    let message = NATSWebPushMessage(
                        messageID: WebPushMessageID.random(), ttl: push.ttl, urgency: push.urgency, topic: push.topic,
                        sent: NATSWebPushMessage.now(), body: push.body)
                    let subject = NATSSubjects.webPush(project: project, instance: instance, endpoint: push.token)
                    _ = try await loop.offload {
                        try publisher.publishStored(subject, body: message.encoded(), messageID: message.messageID)
                    }
                    result = .created(messageID: message.messageID)
                } else {
                    result = .notFound
                }
            } catch let refusal as VAPIDRefusal {
                result = .refused(status: refusal.status, reason: refusal.description)
            } catch {
                result = .refused(status: 503, reason: "NATS is unreachable (\(error)); try again later.")
            }
            loop.execute { answer.value(result) }
        }
    }
}

/// Message IDs made by a gateway: 16 random bytes as 32 lower-case hex digits, as the distributor makes them.
enum WebPushMessageID {
    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in
            let text = String(UInt64.random(in: 0...UInt64.max, using: &generator), radix: 16)
            return String(repeating: "0", count: 16 - text.count) + text
        }.joined()
    }
}

// MARK: The instance's side

/// The instance's side of UnifiedPush through the fleet: it makes the endpoints of `endpoint` (the distributor)
/// known in the endpoints bucket (``NATSSubjects/webPushBucket(project:)``, written at each registration, deleted at
/// each unregistration, and at the start for those the distributor no longer has), and takes the pushes a gateway published for this instance from its durable consumer
/// (`herald-up-<installation ID>` on ``NATSSubjects/webPushStreamName(project:)``), handing each to `endpoint` as if
/// POSTed here (its VAPID token already checked by the gateway, its message ID the one the gateway answered with).
/// A push is acknowledged to JetStream once the distributor kept it (or answered that its endpoint is gone, which
/// also deletes the endpoint from the bucket); refused for now (its app's queue full, the store failing), it is
/// offered again a second later. A push whose TTL ran out on the way is dropped.
///
/// The endpoint URLs the distributor hands out should name the gateway (`herald serve --unifiedpush-endpoint-url`).
public final class NATSWebPushRelay: HeraldPlugin, @unchecked Sendable {
    // @unchecked Sendable: `options` and `endpoint` are immutable; the rest sits behind locks.

    public let options: NATSReceiver.Options
    private let endpoint: any WebPushDirectory
    private let shared = Locked<(publisher: NATSPublisher?, subscription: StoredSubscription?)>((nil, nil))
    /// The endpoints written to the bucket (token and value), whether those of this instance the bucket held at the
    /// start were read, and the writes queued one after another.
    private let written = Locked<[String: String]>([:])
    private let readBucket = Locked(false)
    private let writes = SerialTasks()

    /// Relays the pushes of `endpoint`'s endpoints through the NATS fleet `options` names.
    public init(options: NATSReceiver.Options, endpoint: any WebPushDirectory) {
        self.options = options
        self.endpoint = endpoint
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(name: "nats-unifiedpush", summary: "UnifiedPush endpoints reached through the fleet's gateway")
    }

    public func start(_ context: PluginContext) async throws {
        guard let token = try await context.topics.token() else {
            throw NATSReceiverError.jetStream(operation: "name this instance", detail: "it has no registration token", code: 0)
        }
        let instance = NATSSubjects.registrationKey(token: token)
        let project = context.projectID
        let options = self.options
        let endpoint = self.endpoint
        let loop = context.loop
        let logger = context.logger
        let bucket = NATSSubjects.webPushBucket(project: project)
        let (publisher, subscription) = try await loop.offload {
            let publisher = try NATSPublisher(options: options, timeout: options.requestTimeout, reconnect: true)
            let stream = NATSSubjects.webPushStreamName(project: project)
            try publisher.ensureStream(stream, subjects: NATSSubjects.allWebPushes(project: project), options: options)
            let durable = "herald-up-" + instance
            let filter = NATSSubjects.webPushes(project: project, instance: instance)
            let prefix = "herald.\(project).up.\(instance)."
            let subscription = try publisher.subscribeDurable(
                stream: stream, durable: durable, filter: filter,
                deliverSubject: NATSSubjects.deliverSubject(project: project, consumer: durable), options: options
            ) { [weak self] message in
                let subject = message.subject
                guard let self, subject.hasPrefix(prefix), let decoded = NATSWebPushMessage(decoding: message.data) else {
                    logger.warning("not a UnifiedPush push on the instance's subject; dropped", metadata: ["subject": "\(subject)"])
                    return message.finish(acknowledged: true)
                }
                self.deliver(decoded, to: String(subject.dropFirst(prefix.count)), message: message, loop: loop, bucket: bucket)
            }
            return (publisher, subscription)
        }
        shared.withLock { $0 = (publisher, subscription) }
        try await loop.submit {
            endpoint.observeEndpoints { [weak self] endpoints in
                self?.publish(endpoints, instance: instance, bucket: bucket, publisher: publisher, loop: loop, logger: logger)
            }
        }
        logger.info("UnifiedPush endpoints reached through the fleet", metadata: ["bucket": "\(bucket)", "instance": "\(instance)"])
    }

    public func stop() async {
        let subscription = shared.withLock { shared in
            defer { shared = (nil, nil) }
            return shared.subscription
        }
        subscription?.close()
        await writes.wait()
    }

    /// Hands `decoded` to the distributor on the loop; acknowledges `message` once it answered.
    private func deliver(_ decoded: NATSWebPushMessage, to token: String, message: StoredMessage, loop: EventLoop, bucket: String) {
        guard let push = decoded.push(endpoint: token, now: NATSWebPushMessage.now()) else {
            return message.finish(acknowledged: true)
        }
        let endpoint = self.endpoint
        loop.execute { [self] in
            endpoint.receive(push) { [self] answer in
                switch answer {
                case .created:
                    message.finish(acknowledged: true)
                case .notFound:
                    // Gone here: the gateway must stop sending to it.
                    message.finish(acknowledged: true)
                    forget(token, bucket: bucket, loop: loop)
                case .refused:
                    message.finish(acknowledged: false)
                }
            }
        }
    }

    /// Deletes `token` from the endpoints bucket.
    private func forget(_ token: String, bucket: String, loop: EventLoop) {
        guard let publisher = shared.withLock({ $0.publisher }) else { return }
        let replicas = options.effectiveReplicas
        writes.start { [written] in
            _ = try? await loop.offload { try publisher.put(nil, key: token, bucket: bucket, replicas: replicas) }
            written.withLock { $0[token] = nil }
        }
    }

    /// Writes the difference between `endpoints` and what the bucket holds of this instance's, in order.
    private func publish(
        _ endpoints: [WebPushRegistration], instance: String, bucket: String, publisher: NATSPublisher, loop: EventLoop, logger: Logger
    ) {
        let replicas = options.effectiveReplicas
        writes.start { [written, readBucket] in
            if !readBucket.withLock({ $0 }) {
                // Endpoints dropped while the instance was stopped (`herald up unregister`) are still in the bucket.
                do {
                    let held = try await loop.offload {
                        try publisher.keys(bucket: bucket).compactMap { key in
                            try publisher.value(key: key, bucket: bucket).flatMap {
                                $0.split(separator: " ").first == Substring(instance) ? (key, $0) : nil
                            }
                        }
                    }
                    written.withLock { written in for (key, value) in held { written[key] = value } }
                    readBucket.withLock { $0 = true }
                } catch {
                    logger.warning("cannot read the UnifiedPush endpoints bucket", metadata: ["error": "\(error)"])
                }
            }
            let wanted = Dictionary(
                endpoints.map { ($0.token, $0.vapid.map { "\(instance) \($0)" } ?? instance) }, uniquingKeysWith: { first, _ in first })
            let current = written.withLock { $0 }
            let changes =
                wanted.filter { current[$0.key] != $0.value }.map { ($0.key, Optional($0.value)) }
                + current.keys.filter { wanted[$0] == nil }.map { ($0, String?.none) }
            for (token, value) in changes where isEndpointToken(token) {
                do {
                    try await loop.offload { try publisher.put(value, key: token, bucket: bucket, replicas: replicas) }
                    written.withLock { $0[token] = value }
                } catch {
                    logger.error("cannot write a UnifiedPush endpoint to NATS", metadata: ["endpoint": "\(token)", "error": "\(error)"])
                }
            }
        }
    }
}
