/// The NATS names Herald uses (one subject per token and per topic, the FCM v1 send body on each): subjects, the JetStream stream and the durable consumers.
///
/// - `herald.<project>.token.<token>`: a message for one instance, stored by JetStream (stream
///   ``streamName(project:)``, work-queue retention) until that instance acknowledges it.
/// - `herald.<project>.topic.<topic>`: a message for the instances subscribed to a topic, on core NATS.
/// - `herald.<project>.iid.<installation ID>`: a gateway's topic management requests for one instance (core NATS
///   request and reply, ``topicRequests(project:instance:)``).
///
/// The body on every subject is the FCM v1 send request, `{"message": {...}, "validate_only": false}`.
public enum NATSSubjects {
    /// The subject of messages for the registration token `token`.
    public static func token(project: String, token: String) -> String { "herald.\(project).token.\(token)" }

    /// The subject of messages for topic `topic`.
    public static func topic(project: String, topic: String) -> String { "herald.\(project).topic.\(topic)" }

    /// The subject on which the instance `instance` (its installation ID, as ``registrationKey(token:)`` writes it)
    /// takes a gateway's topic changes for its token: `herald.<project>.iid.<instance>`, a core NATS request
    /// (`{"operation": "add" | "remove", "topic": T, "registration_tokens": [...]}`) answered on its reply subject with
    /// one result per token. No stream takes it.
    public static func topicRequests(project: String, instance: String) -> String { "herald.\(project).iid.\(instance)" }

    /// The subjects of all topic messages of a project, which the topic stream stores.
    public static func allTopics(project: String) -> String { "herald.\(project).topic.>" }

    /// The stream of stored topic messages (``NATSReceiver/TopicDelivery/stored``): `HERALD_<PROJECT>_TOPICS`.
    public static func topicStreamName(project: String) -> String { streamName(project: project) + "_TOPICS" }

    /// An instance's durable consumer of one topic: `<instance's consumer>-t-<topic>-<hash>`, the topic with
    /// anything but letters, digits, `-` and `_` replaced by `_`, and a hash of the topic that keeps apart topics
    /// that read alike then (`a.b` and `a_b`).
    public static func topicConsumerName(instance: String, topic: String) -> String {
        var hash: UInt32 = 0x811c_9dc5
        for byte in topic.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        return "\(instance)-t-\(sanitized(topic))-\(String(hash, radix: 16))"
    }

    /// The subjects of all token messages of a project, which the stream stores.
    public static func allTokens(project: String) -> String { "herald.\(project).token.>" }

    /// The default stream: `HERALD_<PROJECT>`, the project ID upper-cased with anything but letters, digits,
    /// `-` and `_` replaced by `_` (stream names may not hold `.`, `*`, `>` or spaces).
    public static func streamName(project: String) -> String { "HERALD_" + sanitized(project).uppercased() }

    /// The default durable consumer of an instance: `herald-<installation ID>`, the installation ID being the part
    /// of the registration token before its `:`. It survives token rotation (only its filter changes).
    public static func consumerName(token: String) -> String { "herald-" + registrationKey(token: token) }

    /// The default key-value bucket of registrations: `HERALD_<PROJECT>_REGISTRATIONS`. Each instance writes its
    /// token there under ``registrationKey(token:)`` at start and at every rotation, so a gateway can tell a token
    /// of the fleet from an unknown one.
    public static func registrationBucket(project: String) -> String { streamName(project: project) + "_REGISTRATIONS" }

    /// The key of a token in the registrations bucket: its installation ID (the part before `:`), since keys may
    /// not hold `:`. The value is the whole token, so a rotated-away token no longer matches.
    public static func registrationKey(token: String) -> String {
        // The first run of characters that holds no `:` (leading ones are skipped); a token of nothing but `:`, whole.
        let utf8 = token.utf8
        guard let start = utf8.firstIndex(where: { $0 != UInt8(ascii: ":") }) else { return sanitized(token) }
        let end = utf8[start...].firstIndex(of: UInt8(ascii: ":")) ?? utf8.endIndex
        if start == utf8.startIndex && end == utf8.endIndex { return sanitized(token) }
        return sanitized(String(token[start..<end]))
    }

    /// The subject of UnifiedPush pushes for the endpoint `endpoint` of the instance `instance` (its installation ID,
    /// as ``registrationKey(token:)`` writes it): `herald.<project>.up.<instance>.<endpoint>`.
    public static func webPush(project: String, instance: String, endpoint: String) -> String {
        "herald.\(project).up.\(instance).\(endpoint)"
    }

    /// The subjects of the UnifiedPush pushes of one instance, which its consumer takes.
    public static func webPushes(project: String, instance: String) -> String { "herald.\(project).up.\(instance).>" }

    /// The subjects of all UnifiedPush pushes of a project, which ``webPushStreamName(project:)`` stores.
    public static func allWebPushes(project: String) -> String { "herald.\(project).up.>" }

    /// The stream of UnifiedPush pushes (work-queue retention): `HERALD_<PROJECT>_UP`, on `herald.<project>.up.>`.
    public static func webPushStreamName(project: String) -> String { streamName(project: project) + "_UP" }

    /// The key-value bucket of UnifiedPush endpoints: `HERALD_<PROJECT>_UP_ENDPOINTS`. An instance with the
    /// distributor writes each endpoint token there, the value naming the instance and the app's VAPID key
    /// (`<instance>` or `<instance> <key>`), and deletes it when the app unregisters.
    public static func webPushBucket(project: String) -> String { streamName(project: project) + "_UP_ENDPOINTS" }

    /// Where the durable consumer `consumer` pushes its messages.
    public static func deliverSubject(project: String, consumer: String) -> String { "_herald.\(project).deliver.\(consumer)" }

    /// Whether `token` can stand in a subject as one token: no `.`, `*`, `>` or whitespace.
    public static func isSubjectToken(_ token: String) -> Bool {
        !token.isEmpty
            && !token.utf8.contains { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "*") || $0 == UInt8(ascii: ">") || $0 <= 0x20 }
    }

    /// `name` with every character but `a-z`, `A-Z`, `0-9`, `-` and `_` replaced by `_` (one per Unicode scalar).
    /// A name that needs no change (a gateway's every token) is returned as it is, without a copy.
    static func sanitized(_ name: String) -> String {
        func allowed(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"):
                true
            default: false
            }
        }
        if name.utf8.allSatisfy(allowed) { return name }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(name.utf8.count)
        // A scalar that is not allowed becomes one `_`: its first byte does, its continuation bytes are left out.
        for byte in name.utf8 where byte & 0xC0 != 0x80 { bytes.append(allowed(byte) ? byte : UInt8(ascii: "_")) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
