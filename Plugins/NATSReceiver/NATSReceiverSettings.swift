import Glibc
public import Herald

extension NATSReceiver {
    /// The receiver's (and in gateway mode the gateway's) settings in a daemon's configuration (`herald serve`). Off
    /// unless `nats-servers` names at least one server.
    public enum Settings {
        public static let servers = ConfigurationSetting(
            "nats-servers", .list, default: .list([]), "none (NATS off)",
            allowed: "a list of nats://HOST:PORT or tls://HOST:PORT URLs (environment: separated by ',')",
            help:
                "NATS servers to connect to, tried in turn (more are learnt from a cluster); repeatable or comma-separated: name every server of a cluster. Set, the instance takes messages from NATS.",
            flag: "--nats-server", valueName: "url", environmentSeparator: ",", shown: NATSReceiver.redactingCredentials,
            accepts: { $0.split(separator: ",").allSatisfy { $0.hasPrefix("nats://") || $0.hasPrefix("tls://") } })
        public static let replicas = ConfigurationSetting(
            "nats-replicas", .integer(1...5), default: nil, "1, or 3 with three servers or more", allowed: "a whole number from 1 to 5",
            help: "Copies a NATS cluster keeps of the streams and the registrations bucket Herald creates.", valueName: "count")
        public static let credentials = ConfigurationSetting(
            "nats-credentials", .string, default: nil, "none", allowed: "a non-empty file path",
            help: "A NATS credentials file (JWT and NKey seed), for servers with decentralised auth.", valueName: "file")
        public static let user = ConfigurationSetting(
            "nats-user", .string, default: nil, "none", allowed: "a non-empty user name",
            help: "The user name for NATS servers with user and password authorization (with nats-password-file).",
            valueName: "name")
        public static let passwordFile = ConfigurationSetting(
            "nats-password-file", .string, default: nil, "none", allowed: "a non-empty file path",
            help:
                "A file holding nats-user's password (surrounding whitespace trimmed; the password itself is never logged or printed).",
            valueName: "file")
        public static let tokenFile = ConfigurationSetting(
            "nats-token-file", .string, default: nil, "none", allowed: "a non-empty file path",
            help:
                "A file holding the NATS authentication token (surrounding whitespace trimmed; the token itself is never logged or printed).",
            valueName: "file")
        public static let tlsCA = ConfigurationSetting(
            "nats-tls-ca", .string, default: nil, "none", allowed: "a non-empty file path",
            help: "The CA file to trust for NATS over TLS; any nats-tls-* setting turns TLS on.", valueName: "file")
        public static let tlsCertificate = ConfigurationSetting(
            "nats-tls-cert", .string, default: nil, "none", allowed: "a non-empty file path",
            help: "A client certificate file for NATS servers that ask for one (with nats-tls-key).", valueName: "file")
        public static let tlsKey = ConfigurationSetting(
            "nats-tls-key", .string, default: nil, "none", allowed: "a non-empty file path",
            help: "The client certificate's key file (with nats-tls-cert).", valueName: "file")
        public static let stream = ConfigurationSetting(
            "nats-stream", .string, default: nil, "HERALD_<PROJECT-ID>", allowed: "a stream name (no '.', '*', '>' or spaces)",
            help: "The JetStream stream of token messages; created when missing.", valueName: "name", accepts: isName)
        public static let consumer = ConfigurationSetting(
            "nats-consumer", .string, default: nil, "herald-<installation ID>", allowed: "a consumer name (no '.', '*', '>' or spaces)",
            help: "This instance's durable JetStream consumer.", valueName: "name", accepts: isName)
        public static let topicDelivery = ConfigurationSetting(
            "nats-topic-delivery", .string, default: .string("fan-out"), "fan-out",
            allowed:
                "fan-out (every subscribed instance connected now), stored (every subscribed instance, also one back within the TTL), or shared:GROUP",
            help: "How topic messages reach the instances.", valueName: "mode", accepts: { topicDeliveryMode($0) != nil })
        public static let ackWait = ConfigurationSetting(
            "nats-ack-wait", .integer(1...86_400), default: .integer(30), "30", allowed: "a whole number of seconds from 1 to 86400",
            help: "Seconds JetStream waits for a token message's ack before delivering it again.", valueName: "seconds")
        public static let maxAckPending = ConfigurationSetting(
            "nats-max-ack-pending", .integer(1...1_000_000), default: .integer(1024), "1024", allowed: "a whole number from 1 to 1000000",
            help: "Token messages JetStream sends this instance without an ack yet.", valueName: "count")
        public static let maxDeliver = ConfigurationSetting(
            "nats-max-deliver", .integer(-1...1_000_000), default: .integer(-1), "-1",
            allowed: "-1 (no limit) or a whole number from 1 to 1000000",
            help: "Deliveries of one token message at most.", valueName: "count")
        public static let streamMaxAgeDays = ConfigurationSetting(
            "nats-stream-max-age-days", .integer(1...3_650), default: .integer(28), "28", allowed: "a whole number of days from 1 to 3650",
            help: "Days the stream keeps a token message (FCM's longest time to live is 28 days).", valueName: "days")
        public static let streamMaxMessages = ConfigurationSetting(
            "nats-stream-max-messages", .integer(-1...Int.max), default: .integer(-1), "-1", allowed: "-1 (no limit) or a whole number",
            help: "Messages the stream keeps at most (when the stream is created).", valueName: "count")
        public static let streamMaxBytes = ConfigurationSetting(
            "nats-stream-max-bytes", .integer(-1...Int.max), default: .integer(-1), "-1", allowed: "-1 (no limit) or a whole number",
            help: "Bytes the stream keeps at most (when the stream is created).", valueName: "bytes")
        public static let maxHeldMessages = ConfigurationSetting(
            "nats-max-held-messages", .integer(0...10_000_000), default: .integer(65536), "65536",
            allowed: "a whole number from 0 to 10000000",
            help: "Topic messages held in order while the bus is full; past it they are dropped (recorded).", valueName: "count")
        public static let pingInterval = ConfigurationSetting(
            "nats-ping-interval", .integer(1...3_600), default: .integer(20), "20", allowed: "a whole number of seconds from 1 to 3600",
            help:
                "Seconds between PINGs to the NATS server; after nats-max-pings-out unanswered ones the connection is stale and replaced.",
            valueName: "seconds")
        public static let maxPingsOut = ConfigurationSetting(
            "nats-max-pings-out", .integer(1...100), default: .integer(2), "2", allowed: "a whole number from 1 to 100",
            help: "PINGs without a PONG before the NATS connection is called stale (and reconnected).", valueName: "count")
        public static let gateway = ConfigurationSetting(
            "gateway", .boolean, default: .boolean(false), "false", allowed: "true or false",
            help:
                "Gateway mode: the HTTP endpoint's sends go to the fleet through NATS (needs nats-servers and http), not to this instance; so do UnifiedPush pushes (POST /up/{token}) to the instances' endpoints."
        )

        /// The section: the servers, authentication and TLS, the stream and consumer, topic delivery, gateway mode.
        public static let section = ConfigurationSection(
            name: "NATSReceiver", summary: "Messages from a NATS fleet; in gateway mode, sends forwarded to it.",
            settings: [
                servers, replicas, credentials, user, passwordFile, tokenFile, tlsCA, tlsCertificate, tlsKey, stream, consumer,
                topicDelivery, ackWait,
                maxAckPending, maxDeliver, streamMaxAgeDays, streamMaxMessages, streamMaxBytes, maxHeldMessages, pingInterval,
                maxPingsOut, gateway,
            ])

        /// `fan-out`, `stored`, or `shared:GROUP` (a queue group name: no spaces, '*' or '>').
        public static func topicDeliveryMode(_ text: String) -> TopicDelivery? {
            if text == "fan-out" { return .fanOut }
            if text == "stored" { return .stored }
            guard text.hasPrefix("shared:") else { return nil }
            let group = String(text.dropFirst("shared:".count))
            guard !group.isEmpty, !group.contains(where: { " \t*>".contains($0) }) else { return nil }
            return .shared(group: group)
        }

        /// The servers of `values`: each item may itself name several, comma-separated.
        public static func serverURLs(_ values: ConfigurationValues) -> [String] {
            values.list(servers).flatMap { $0.split(separator: ",").map(String.init) }
        }

        private static func isName(_ text: String) -> Bool {
            !text.isEmpty && !text.contains { $0 == "." || $0 == "*" || $0 == ">" || $0 == " " || $0 == "\t" }
        }
    }
}

extension NATSReceiver.Options {
    /// The options `values` give (`authToken` read from `nats-token-file` by the caller; the password read from
    /// `nats-password-file` here), `nil` when no server is given (NATS off). Throws
    /// ``NATSReceiverError/credentials(detail:)`` when `nats-user` and `nats-password-file` are not given together or
    /// the password file cannot be read or is empty.
    public init?(configuration values: ConfigurationValues, authToken: String?) throws {
        typealias Settings = NATSReceiver.Settings
        let servers = Settings.serverURLs(values)
        guard !servers.isEmpty else { return nil }
        self.init(servers: servers)
        credentialsFile = values.string(Settings.credentials)
        self.authToken = authToken
        switch (values.string(Settings.user), values.string(Settings.passwordFile)) {
        case (nil, nil): break
        case (let user?, let file?): login = .init(user: user, password: try Self.readPassword(file: file))
        default: throw NATSReceiverError.credentials(detail: "nats-user and nats-password-file go together: give both or neither")
        }
        let ca = values.string(Settings.tlsCA)
        let certificate = values.string(Settings.tlsCertificate)
        let key = values.string(Settings.tlsKey)
        if ca != nil || certificate != nil || key != nil {
            tls = .init(caFile: ca, certificateFile: certificate, keyFile: key)
        }
        stream = values.string(Settings.stream)
        consumer = values.string(Settings.consumer)
        topicDelivery = Settings.topicDeliveryMode(values.string(Settings.topicDelivery) ?? "fan-out") ?? .fanOut
        ackWait = .seconds(values.integer(Settings.ackWait))
        maxAckPending = values.integer(Settings.maxAckPending)
        maxDeliver = values.integer(Settings.maxDeliver)
        streamMaxAge = .seconds(values.integer(Settings.streamMaxAgeDays) * 86_400)
        streamMaxMessages = values.integer(Settings.streamMaxMessages)
        streamMaxBytes = values.integer(Settings.streamMaxBytes)
        maxHeldMessages = values.integer(Settings.maxHeldMessages)
        pingInterval = .seconds(values.integer(Settings.pingInterval))
        maxPingsOut = values.integer(Settings.maxPingsOut)
        if values.isSet(Settings.replicas) { replicas = values.integer(Settings.replicas) }
    }

    /// The password `file` holds, without surrounding whitespace.
    private static func readPassword(file: String) throws -> String {
        guard let handle = fopen(file, "r") else {
            throw NATSReceiverError.credentials(detail: "cannot read the NATS password file \(file): \(String(cString: strerror(errno)))")
        }
        defer { fclose(handle) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, handle)
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
        let password = bytes.drop(while: isSpace).reversed().drop(while: isSpace).reversed()
        guard !password.isEmpty else { throw NATSReceiverError.credentials(detail: "the NATS password file \(file) is empty") }
        return String(decoding: password, as: UTF8.self)
    }
}
