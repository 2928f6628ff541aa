import Glibc
import Herald
import HeraldExecFetchWorker
import HeraldNATSReceiver
import Logging
import Yams

/// The value of one setting of `herald serve`, once read from wherever it came from.
enum SettingValue: Equatable, Sendable {
    case string(String)
    case integer(Int)
    case boolean(Bool)
    case list([String])
}

/// Where the value of a setting came from. Each overrides the ones before it: default < file < environment < flag.
enum SettingSource: Equatable, Sendable, CustomStringConvertible {
    case defaultValue
    case file(path: String, line: Int)
    case environment(String)
    case flag(String)

    var description: String {
        switch self {
        case .defaultValue: "default"
        case .file(let path, let line): "config file \(path), line \(line)"
        case .environment(let name): "environment \(name)"
        case .flag(let name): "flag \(name)"
        }
    }
}

/// A configuration that stops `herald serve` before it starts: one line naming where the value came from (the file
/// and line, the environment variable or the flag), the key, the value and what is allowed. Exit status 64.
struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// One setting of `herald serve`: its key in the config file, its flag and environment variable, its kind, its
/// default and what it allows. ``all`` is the one list the loader, the flags' help and `--print-config` work from.
struct ServeOption: Sendable {
    enum Kind: Sendable {
        case string
        case integer(ClosedRange<Int>)
        case boolean
        case list
    }

    /// The key in the config file; the flag is `--key` unless ``flag`` says otherwise.
    let key: String
    let kind: Kind
    /// `nil`: not set unless given (the socket then follows the data directory; no auth token file).
    let defaultValue: SettingValue?
    /// The default as the documentation states it.
    let defaultText: String
    /// What a value may be, as error messages and the documentation say it.
    let allowed: String
    /// What the setting does, for `--help`.
    let meaning: String
    /// The flag, when it is not `--key`.
    let flag: String
    /// Whether a string (or each string of a list) is allowed; integers are checked against their range.
    let accepts: @Sendable (String) -> Bool
    /// What separates a list's items in its environment variable.
    let environmentSeparator: Character

    init(
        _ key: String, _ kind: Kind, default defaultValue: SettingValue?, _ defaultText: String, allowed: String, meaning: String,
        flag: String? = nil, environmentSeparator: Character = ":", accepts: @escaping @Sendable (String) -> Bool = { !$0.isEmpty }
    ) {
        self.environmentSeparator = environmentSeparator
        self.key = key
        self.kind = kind
        self.defaultValue = defaultValue
        self.defaultText = defaultText
        self.allowed = allowed
        self.meaning = meaning
        self.flag = flag ?? "--\(key)"
        self.accepts = accepts
    }

    /// `HERALD_` and the key in upper case with `_` for `-`: `project-id` is `HERALD_PROJECT_ID`.
    var environmentName: String {
        "HERALD_" + String(key.uppercased().map { $0 == "-" ? "_" : $0 })
    }

    /// The flag's help: what it does, its default and its environment variable.
    var help: String {
        "\(meaning) (default: \(defaultText); environment: \(environmentName); config key: \(key))"
    }

    static let http = ServeOption(
        "http", .string, default: .string("127.0.0.1:8080"), "127.0.0.1:8080",
        allowed: "HOST:PORT (a numeric address or localhost), [IPv6]:PORT, or none",
        meaning: "The HTTP receiver's address; 'none' turns it off.", accepts: isTCPAddressOrNone)
    static let socket = ServeOption(
        "socket", .string, default: nil, "herald.sock in the data directory",
        allowed: "a path, unix:PATH, HOST:PORT, or none",
        meaning: "The socket receiver's Unix socket path or HOST:PORT; 'none' turns it off.",
        accepts: { $0 == "none" || ServeSettings.socketAddress($0) != nil })
    static let projectID = ServeOption(
        "project-id", .string, default: .string("herald"), "herald", allowed: "a non-empty project ID",
        meaning: "The project ID senders address (projects/{project}/messages:send).")
    static let senderID = ServeOption(
        "sender-id", .string, default: .string("herald"), "herald", allowed: "a non-empty sender ID",
        meaning: "The sender ID (project number) tokens are minted for.")
    static let dataDirectory = ServeOption(
        "data-dir", .string, default: .string("herald-data"), "herald-data", allowed: "a non-empty directory path",
        meaning: "The data directory: the SQLite store (identity, topics, inbox), the analytics store and the default socket.")
    static let echo = ServeOption(
        "echo", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning: "Write one JSON object per line on standard output for every handled event.")
    static let presenter = ServeOption(
        "presenter", .string, default: .string("log"), "log", allowed: "desktop, log or none",
        meaning:
            "Where notifications are shown: 'desktop' through org.freedesktop.Notifications on the session bus, 'log' as a log line, 'none' nowhere.",
        accepts: { ["desktop", "log", "none"].contains($0) })
    static let unifiedPush = ServeOption(
        "unifiedpush", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning:
            "Be a UnifiedPush distributor: own org.unifiedpush.Distributor.herald on the session bus, and take pushes to its endpoints on the HTTP endpoint (POST /up/{token})."
    )
    static let unifiedPushEndpointURL = ServeOption(
        "unifiedpush-endpoint-url", .string, default: nil, "http://{http}/up/ (https with TLS)",
        allowed: "an http or https URL ending in /",
        meaning:
            "What the apps' servers POST pushes to: this URL followed by the endpoint token (Herald's /up/ route as they reach it; in a fleet, the gateway's). A gateway checks VAPID tokens against its origin.",
        accepts: { ($0.hasPrefix("http://") || $0.hasPrefix("https://")) && $0.hasSuffix("/") })
    static let authTokenFile = ServeOption(
        "auth-token-file", .string, default: nil, "none: HERALD_AUTH_TOKEN, when set, is the secret",
        allowed: "a non-empty file path",
        meaning: "A file holding the bearer secret senders must present; it wins over HERALD_AUTH_TOKEN.")
    static let apnsKeys = ServeOption(
        "apns-keys", .list, default: .list([]), "none",
        allowed: "a list of KEYID:TEAMID:PATH, PATH a PEM file of the key (the .p8 or its public key) (environment: separated by ',')",
        meaning: "An APNs provider key: POST /3/device/{token} then needs a provider token (JWT, ES256) it signed; repeatable.",
        flag: "--apns-key", environmentSeparator: ",", accepts: { APNsKeySetting(parsing: $0) != nil })
    static let logLevel = ServeOption(
        "log-level", .string, default: .string("info"), "info",
        allowed: Logger.Level.allCases.map(\.rawValue).joined(separator: ", "),
        meaning: "How much is logged on standard error.", accepts: { Logger.Level(rawValue: $0) != nil })
    static let shutdownGrace = ServeOption(
        "shutdown-grace", .integer(0...86_400), default: .integer(10), "10",
        allowed: "a whole number of seconds from 0 to 86400",
        meaning: "Seconds to finish in-flight messages after SIGTERM / SIGINT.")
    static let maxReplays = ServeOption(
        "max-replays", .integer(1...1_000), default: .integer(3), "3", allowed: "a whole number from 1 to 1000",
        meaning:
            "Starts that may replay a message still pending; past it the message is quarantined (its handling likely crashes the daemon).")
    static let contentModifierDeadline = ServeOption(
        "content-modifier-deadline", .integer(1...600), default: .integer(30), "30", allowed: "a whole number of seconds from 1 to 600",
        meaning:
            "Seconds content modifiers (the image download) may take with a mutable-content notification before it is presented as it is.")
    static let analyticsStore = ServeOption(
        "analytics-store", .boolean, default: .boolean(true), "true", allowed: "true or false",
        meaning: "Keep analytics events in DATA-DIR/analytics.sqlite (herald report reads them).")
    static let analyticsRetentionDays = ServeOption(
        "analytics-retention-days", .integer(0...36_500), default: .integer(90), "90",
        allowed: "a whole number of days from 0 (keep everything) to 36500",
        meaning: "Days of analytics events kept in the analytics store; 0 keeps everything.")
    static let plugins = ServeOption(
        "plugins", .list, default: .list([]), "none",
        allowed: "a list of paths of shared objects, e.g. [/usr/lib/herald/libweather.so] (environment: separated by ':')",
        meaning: "Load a handler plugin from a shared object (the C ABI of herald_plugin.h); repeatable. All load or none do.",
        flag: "--plugin")
    static let metrics = ServeOption(
        "metrics", .string, default: .string("none"), "none",
        allowed: "HOST:PORT (a numeric address or localhost), [IPv6]:PORT, or none",
        meaning: "Serve Prometheus metrics (GET /metrics) on HOST:PORT; 'none' turns it off.", accepts: isTCPAddressOrNone)
    static let allowUnauthenticatedNetwork = ServeOption(
        "allow-unauthenticated-network", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning:
            "Let the listeners without authentication (a TCP socket address, metrics) listen beyond loopback; the HTTP endpoint needs a secret there regardless."
    )
    static let allowPlaintextNetwork = ServeOption(
        "allow-plaintext-network", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning:
            "Let the HTTP listeners (the HTTP endpoint, metrics) serve plain HTTP beyond loopback without TLS; the log says so at start."
    )
    static let fcmProxy = ServeOption(
        "fcm-proxy", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning:
            "Serve Google's FCM, IID and OAuth hosts to unmodified Admin SDK app servers: the HTTP endpoint accepts CONNECT to fcm.googleapis.com:443, iid.googleapis.com:443 and oauth2.googleapis.com:443 only, with TLS inside from a CA in the data directory (herald credentials ca); needs http without tls-cert."
    )
    static let tlsCertificate = ServeOption(
        "tls-cert", .string, default: nil, "none (no TLS)", allowed: "a non-empty file path",
        meaning:
            "The TLS certificate chain (PEM) of every TCP listener (HTTP, a TCP socket, metrics); with tls-key. SIGHUP reads it again.")
    static let tlsKey = ServeOption(
        "tls-key", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "The TLS certificate's private key (PEM); with tls-cert. SIGHUP reads it again.")
    static let tlsClientCA = ServeOption(
        "tls-client-ca", .string, default: nil, "none (no client certificates)", allowed: "a non-empty file path",
        meaning: "CA certificates (PEM): TLS clients must present a certificate one of them signed (mutual TLS); needs tls-cert.")
    static let deliveryMetrics = ServeOption(
        "delivery-metrics", .string, default: .string("none"), "none", allowed: "a file path, or none",
        meaning: "Write FCM's delivery-metrics export as JSON lines to this file (rotated by size); 'none' turns it off.")

    // Background fetch (ExecFetchWorker). Off unless exec-fetch-command names a program.
    static let execFetchCommand = ServeOption(
        "exec-fetch-command", .string, default: nil, "none (no background-fetch command)",
        allowed: "a program: an absolute path, or a name looked up in PATH at start (no shell)",
        meaning:
            "Run this program for each silent (content-available) message: the message as JSON on its standard input; exit 0 is new data, 3 no data, anything else failed."
    )
    static let execFetchArguments = ServeOption(
        "exec-fetch-arguments", .list, default: .list([]), "none",
        allowed: "a list of arguments (environment: separated by ',')",
        meaning: "An argument of the background-fetch command; repeatable, in order.",
        flag: "--exec-fetch-argument", environmentSeparator: ",", accepts: { _ in true })
    static let execFetchEnvironment = ServeOption(
        "exec-fetch-environment", .list, default: .list([]), "none",
        allowed: "a list of NAME=value (environment: separated by ',')",
        meaning: "A variable added to the background-fetch command's environment; repeatable.",
        flag: "--exec-fetch-env", environmentSeparator: ",",
        accepts: { ServeSettings.environmentEntry($0) != nil })
    static let execFetchTimeout = ServeOption(
        "exec-fetch-timeout", .integer(1...3_600), default: .integer(25), "25", allowed: "a whole number of seconds from 1 to 3600",
        meaning: "Seconds one run of the background-fetch command may take before it is ended (SIGTERM, then SIGKILL) and counted failed.")
    static let execFetchConcurrency = ServeOption(
        "exec-fetch-concurrency", .integer(1...256), default: .integer(4), "4", allowed: "a whole number from 1 to 256",
        meaning: "How many background-fetch commands run at once; further fetches wait their turn.")

    // The token webhook (TokenWebhook). Off unless token-webhook-url is set.
    static let tokenWebhookURL = ServeOption(
        "token-webhook-url", .string, default: nil, "none (the token is not posted)",
        allowed: "an http:// or https:// URL",
        meaning: "POST the registration token (JSON) to this URL at every start and whenever it changes.",
        accepts: { $0.hasPrefix("http://") || $0.hasPrefix("https://") })
    static let tokenWebhookSecretFile = ServeOption(
        "token-webhook-secret-file", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "A file holding the bearer secret the token webhook sends (the secret itself is never logged or printed).")
    static let tokenWebhookCA = ServeOption(
        "token-webhook-ca", .string, default: nil, "the system's CAs", allowed: "a non-empty file path",
        meaning: "A PEM file of the CAs that sign the app server's certificate, instead of the system's.")
    static let imageAttachmentCA = ServeOption(
        "image-attachment-ca", .string, default: nil, "the system's CAs", allowed: "a non-empty file path",
        meaning:
            "A PEM file of the CAs that sign the certificates of the servers notification images (fcm_options.image) are downloaded from, instead of the system's."
    )
    static let imageAttachmentMaxBytes = ServeOption(
        "image-attachment-max-bytes", .integer(1...1_073_741_824), default: .integer(10 * 1024 * 1024), "10485760",
        allowed: "a whole number of bytes from 1 to 1073741824",
        meaning: "The largest notification image downloaded; a larger one is not attached (logged and counted).")
    static let tokenWebhookMaxAttempts = ServeOption(
        "token-webhook-max-attempts", .integer(0...1_000_000), default: .integer(0), "0",
        allowed: "a whole number from 0 (no limit) to 1000000",
        meaning: "Attempts per token, the first included, before the token webhook gives it up; 0 retries without limit.")

    // NATS (NATSReceiver; NATSGateway in gateway mode). Off unless nats-servers names at least one server.
    static let natsServers = ServeOption(
        "nats-servers", .list, default: .list([]), "none (NATS off)",
        allowed: "a list of nats://HOST:PORT or tls://HOST:PORT URLs (environment: separated by ',')",
        meaning:
            "NATS servers to connect to, tried in turn (more are learnt from a cluster); repeatable or comma-separated: name every server of a cluster. Set, the instance takes messages from NATS.",
        flag: "--nats-server", environmentSeparator: ",",
        accepts: { $0.split(separator: ",").allSatisfy { $0.hasPrefix("nats://") || $0.hasPrefix("tls://") } })
    static let natsReplicas = ServeOption(
        "nats-replicas", .integer(1...5), default: nil, "1, or 3 with three servers or more", allowed: "a whole number from 1 to 5",
        meaning: "Copies a NATS cluster keeps of the streams and the registrations bucket Herald creates.")
    static let natsCredentials = ServeOption(
        "nats-credentials", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "A NATS credentials file (JWT and NKey seed), for servers with decentralised auth.")
    static let natsTokenFile = ServeOption(
        "nats-token-file", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "A file holding the NATS authentication token (the token itself is never logged or printed).")
    static let natsTLSCA = ServeOption(
        "nats-tls-ca", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "The CA file to trust for NATS over TLS; any nats-tls-* setting turns TLS on.")
    static let natsTLSCertificate = ServeOption(
        "nats-tls-cert", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "A client certificate file for NATS servers that ask for one (with nats-tls-key).")
    static let natsTLSKey = ServeOption(
        "nats-tls-key", .string, default: nil, "none", allowed: "a non-empty file path",
        meaning: "The client certificate's key file (with nats-tls-cert).")
    static let natsStream = ServeOption(
        "nats-stream", .string, default: nil, "HERALD_<PROJECT-ID>", allowed: "a stream name (no '.', '*', '>' or spaces)",
        meaning: "The JetStream stream of token messages; created when missing.", accepts: isNATSName)
    static let natsConsumer = ServeOption(
        "nats-consumer", .string, default: nil, "herald-<installation ID>", allowed: "a consumer name (no '.', '*', '>' or spaces)",
        meaning: "This instance's durable JetStream consumer.", accepts: isNATSName)
    static let natsTopicDelivery = ServeOption(
        "nats-topic-delivery", .string, default: .string("fan-out"), "fan-out",
        allowed:
            "fan-out (every subscribed instance connected now), stored (every subscribed instance, also one back within the TTL), or shared:GROUP",
        meaning: "How topic messages reach the instances.", accepts: { ServeSettings.topicDelivery($0) != nil })
    static let natsAckWait = ServeOption(
        "nats-ack-wait", .integer(1...86_400), default: .integer(30), "30", allowed: "a whole number of seconds from 1 to 86400",
        meaning: "Seconds JetStream waits for a token message's ack before delivering it again.")
    static let natsMaxAckPending = ServeOption(
        "nats-max-ack-pending", .integer(1...1_000_000), default: .integer(1024), "1024", allowed: "a whole number from 1 to 1000000",
        meaning: "Token messages JetStream sends this instance without an ack yet.")
    static let natsMaxDeliver = ServeOption(
        "nats-max-deliver", .integer(-1...1_000_000), default: .integer(-1), "-1",
        allowed: "-1 (no limit) or a whole number from 1 to 1000000",
        meaning: "Deliveries of one token message at most.")
    static let natsStreamMaxAgeDays = ServeOption(
        "nats-stream-max-age-days", .integer(1...3_650), default: .integer(28), "28", allowed: "a whole number of days from 1 to 3650",
        meaning: "Days the stream keeps a token message (FCM's longest time to live is 28 days).")
    static let natsStreamMaxMessages = ServeOption(
        "nats-stream-max-messages", .integer(-1...Int.max), default: .integer(-1), "-1", allowed: "-1 (no limit) or a whole number",
        meaning: "Messages the stream keeps at most (when the stream is created).")
    static let natsStreamMaxBytes = ServeOption(
        "nats-stream-max-bytes", .integer(-1...Int.max), default: .integer(-1), "-1", allowed: "-1 (no limit) or a whole number",
        meaning: "Bytes the stream keeps at most (when the stream is created).")
    static let natsMaxHeldMessages = ServeOption(
        "nats-max-held-messages", .integer(0...10_000_000), default: .integer(65536), "65536", allowed: "a whole number from 0 to 10000000",
        meaning: "Topic messages held in order while the bus is full; past it they are dropped (recorded).")
    static let natsPingInterval = ServeOption(
        "nats-ping-interval", .integer(1...3_600), default: .integer(20), "20", allowed: "a whole number of seconds from 1 to 3600",
        meaning: "Seconds between PINGs to the NATS server; after nats-max-pings-out unanswered ones the connection is stale and replaced.")
    static let natsMaxPingsOut = ServeOption(
        "nats-max-pings-out", .integer(1...100), default: .integer(2), "2", allowed: "a whole number from 1 to 100",
        meaning: "PINGs without a PONG before the NATS connection is called stale (and reconnected).")
    static let gateway = ServeOption(
        "gateway", .boolean, default: .boolean(false), "false", allowed: "true or false",
        meaning:
            "Gateway mode: the HTTP endpoint's sends go to the fleet through NATS (needs nats-servers and http), not to this instance; so do UnifiedPush pushes (POST /up/{token}) to the instances' endpoints."
    )

    /// Every setting, in the order `--print-config` and the documentation list them.
    static let all: [ServeOption] = [
        http, socket, projectID, senderID, dataDirectory, echo, presenter, unifiedPush, unifiedPushEndpointURL, authTokenFile, apnsKeys,
        logLevel, shutdownGrace, maxReplays,
        contentModifierDeadline, analyticsStore, analyticsRetentionDays, plugins, metrics, allowUnauthenticatedNetwork,
        allowPlaintextNetwork, fcmProxy, tlsCertificate, tlsKey, tlsClientCA, deliveryMetrics,
        execFetchCommand, execFetchArguments, execFetchEnvironment, execFetchTimeout, execFetchConcurrency,
        tokenWebhookURL, tokenWebhookSecretFile, tokenWebhookCA, tokenWebhookMaxAttempts, imageAttachmentCA, imageAttachmentMaxBytes,
        natsServers, natsReplicas, natsCredentials, natsTokenFile, natsTLSCA, natsTLSCertificate, natsTLSKey, natsStream, natsConsumer,
        natsTopicDelivery, natsAckWait, natsMaxAckPending, natsMaxDeliver, natsStreamMaxAgeDays, natsStreamMaxMessages,
        natsStreamMaxBytes, natsMaxHeldMessages, natsPingInterval, natsMaxPingsOut, gateway,
    ]

    /// Environment variables of Herald's that are not settings: the secret itself, and the config file's path.
    static let otherEnvironmentNames: Set<String> = ["HERALD_AUTH_TOKEN", "HERALD_CONFIG"]
}

private func isNATSName(_ text: String) -> Bool {
    !text.isEmpty && !text.contains { $0 == "." || $0 == "*" || $0 == ">" || $0 == " " || $0 == "\t" }
}

private func isTCPAddressOrNone(_ text: String) -> Bool {
    text == "none" || SocketAddress(parsing: text)?.port != nil
}

/// The settings `herald serve` runs with, resolved from its defaults, the config file, the environment and its flags.
struct ServeSettings: Sendable {
    /// Every key's value (absent: not set) and where it came from.
    private(set) var values: [String: SettingValue] = [:]
    private(set) var sources: [String: SettingSource] = [:]
    /// The config file's `categories` section (``CategoriesConfiguration``).
    var categories: [NotificationCategory] = []

    init() {
        for option in ServeOption.all {
            if let value = option.defaultValue { values[option.key] = value }
            sources[option.key] = .defaultValue
        }
    }

    mutating func set(_ option: ServeOption, _ value: SettingValue, from source: SettingSource) {
        values[option.key] = value
        sources[option.key] = source
    }

    private func string(_ option: ServeOption) -> String? {
        if case .string(let text)? = values[option.key] { return text }
        return nil
    }

    private func integer(_ option: ServeOption) -> Int {
        if case .integer(let number)? = values[option.key] { return number }
        if case .integer(let number)? = option.defaultValue { return number }
        return 0
    }

    private func boolean(_ option: ServeOption) -> Bool {
        if case .boolean(let flag)? = values[option.key] { return flag }
        return option.defaultValue == .boolean(true)
    }

    /// The HTTP receiver's address, `nil` when off.
    var http: String? { string(ServeOption.http).flatMap { $0 == "none" ? nil : $0 } }
    /// The socket receiver's address as written (the default: `herald.sock` in the data directory), `nil` when off.
    var socket: String? {
        let text = string(ServeOption.socket) ?? "\(dataDirectory)/herald.sock"
        return text == "none" ? nil : text
    }
    var projectID: String { string(ServeOption.projectID) ?? "herald" }
    var senderID: String { string(ServeOption.senderID) ?? "herald" }
    var dataDirectory: String { string(ServeOption.dataDirectory) ?? "herald-data" }
    var echo: Bool { boolean(ServeOption.echo) }
    var presenter: String { string(ServeOption.presenter) ?? "log" }
    var unifiedPush: Bool { boolean(ServeOption.unifiedPush) }
    /// The UnifiedPush endpoint URL prefix: as set, or the HTTP endpoint's `/up/`.
    var unifiedPushEndpointURL: String {
        string(ServeOption.unifiedPushEndpointURL) ?? "\(tlsCertificate == nil ? "http" : "https")://\(http ?? "127.0.0.1:8080")/up/"
    }
    var authTokenFile: String? { string(ServeOption.authTokenFile) }
    var logLevel: Logger.Level { string(ServeOption.logLevel).flatMap(Logger.Level.init(rawValue:)) ?? .info }
    var shutdownGrace: Int { integer(ServeOption.shutdownGrace) }
    var maxReplays: Int { integer(ServeOption.maxReplays) }
    var contentModifierDeadline: Int { integer(ServeOption.contentModifierDeadline) }
    var analyticsStore: Bool { boolean(ServeOption.analyticsStore) }
    var analyticsRetentionDays: Int { integer(ServeOption.analyticsRetentionDays) }
    var plugins: [String] {
        if case .list(let paths)? = values[ServeOption.plugins.key] { return paths }
        return []
    }
    var apnsKeys: [APNsKeySetting] {
        if case .list(let keys)? = values[ServeOption.apnsKeys.key] { return keys.compactMap(APNsKeySetting.init(parsing:)) }
        return []
    }
    var metrics: String? { string(ServeOption.metrics).flatMap { $0 == "none" ? nil : $0 } }
    var allowUnauthenticatedNetwork: Bool { boolean(ServeOption.allowUnauthenticatedNetwork) }
    var allowPlaintextNetwork: Bool { boolean(ServeOption.allowPlaintextNetwork) }
    var tlsCertificate: String? { string(ServeOption.tlsCertificate) }
    var tlsKey: String? { string(ServeOption.tlsKey) }
    var tlsClientCA: String? { string(ServeOption.tlsClientCA) }
    var deliveryMetrics: String? { string(ServeOption.deliveryMetrics).flatMap { $0 == "none" ? nil : $0 } }

    /// The background-fetch worker's options, `nil` when no command is set.
    var execFetchOptions: ExecFetchWorker.Options? {
        guard let command = string(ServeOption.execFetchCommand) else { return nil }
        var arguments: [String] = []
        if case .list(let items)? = values[ServeOption.execFetchArguments.key] { arguments = items }
        var environment: [String: String] = [:]
        if case .list(let items)? = values[ServeOption.execFetchEnvironment.key] {
            for item in items { if let (name, value) = Self.environmentEntry(item) { environment[name] = value } }
        }
        return ExecFetchWorker.Options(
            command: command, arguments: arguments, environment: environment,
            timeout: .seconds(integer(ServeOption.execFetchTimeout)), maxConcurrent: integer(ServeOption.execFetchConcurrency))
    }

    /// The token webhook's URL, `nil` when off.
    var tokenWebhookURL: String? { string(ServeOption.tokenWebhookURL) }
    var tokenWebhookSecretFile: String? { string(ServeOption.tokenWebhookSecretFile) }
    var tokenWebhookCA: String? { string(ServeOption.tokenWebhookCA) }
    var imageAttachmentCA: String? { string(ServeOption.imageAttachmentCA) }
    var imageAttachmentMaxBytes: Int { integer(ServeOption.imageAttachmentMaxBytes) }
    /// `nil`: no limit.
    var tokenWebhookMaxAttempts: Int? {
        let attempts = integer(ServeOption.tokenWebhookMaxAttempts)
        return attempts == 0 ? nil : attempts
    }

    /// `NAME=value`, NAME a non-empty name without `=`; `nil` otherwise.
    static func environmentEntry(_ text: String) -> (String, String)? {
        guard let equals = text.firstIndex(of: "="), equals != text.startIndex else { return nil }
        return (String(text[..<equals]), String(text[text.index(after: equals)...]))
    }

    var natsServers: [String] {
        if case .list(let servers)? = values[ServeOption.natsServers.key] {
            return servers.flatMap { $0.split(separator: ",").map(String.init) }
        }
        return []
    }
    var gateway: Bool { boolean(ServeOption.gateway) }
    var fcmProxy: Bool { boolean(ServeOption.fcmProxy) }
    var natsTokenFile: String? { string(ServeOption.natsTokenFile) }

    /// NATSReceiver's options from the nats-* settings (`authToken` read from nats-token-file by the caller), or
    /// `nil` when no server is given (NATS off).
    func natsOptions(authToken: String?) -> NATSReceiver.Options? {
        guard !natsServers.isEmpty else { return nil }
        var options = NATSReceiver.Options(servers: natsServers)
        options.credentialsFile = string(ServeOption.natsCredentials)
        options.authToken = authToken
        let ca = string(ServeOption.natsTLSCA)
        let certificate = string(ServeOption.natsTLSCertificate)
        let key = string(ServeOption.natsTLSKey)
        if ca != nil || certificate != nil || key != nil {
            options.tls = .init(caFile: ca, certificateFile: certificate, keyFile: key)
        }
        options.stream = string(ServeOption.natsStream)
        options.consumer = string(ServeOption.natsConsumer)
        options.topicDelivery = Self.topicDelivery(string(ServeOption.natsTopicDelivery) ?? "fan-out") ?? .fanOut
        options.ackWait = .seconds(integer(ServeOption.natsAckWait))
        options.maxAckPending = integer(ServeOption.natsMaxAckPending)
        options.maxDeliver = integer(ServeOption.natsMaxDeliver)
        options.streamMaxAge = .seconds(integer(ServeOption.natsStreamMaxAgeDays) * 86_400)
        options.streamMaxMessages = integer(ServeOption.natsStreamMaxMessages)
        options.streamMaxBytes = integer(ServeOption.natsStreamMaxBytes)
        options.maxHeldMessages = integer(ServeOption.natsMaxHeldMessages)
        options.pingInterval = .seconds(integer(ServeOption.natsPingInterval))
        options.maxPingsOut = integer(ServeOption.natsMaxPingsOut)
        if values[ServeOption.natsReplicas.key] != nil { options.replicas = integer(ServeOption.natsReplicas) }
        return options
    }

    /// `fan-out`, or `shared:GROUP` (a queue group name: no spaces, '*' or '>').
    static func topicDelivery(_ text: String) -> NATSReceiver.TopicDelivery? {
        if text == "fan-out" { return .fanOut }
        if text == "stored" { return .stored }
        guard text.hasPrefix("shared:") else { return nil }
        let group = String(text.dropFirst("shared:".count))
        guard !group.isEmpty, !group.contains(where: { " \t*>".contains($0) }) else { return nil }
        return .shared(group: group)
    }

    /// The address of a socket setting: what ``SocketAddress/init(parsing:)`` reads, or a bare file name (a path
    /// relative to the working directory).
    static func socketAddress(_ text: String) -> SocketAddress? {
        if let address = SocketAddress(parsing: text) { return address }
        guard !text.isEmpty, !text.contains(":") else { return nil }
        return .unix(path: text)
    }
}

/// Reads `herald serve`'s settings: defaults, then the YAML config file, then `HERALD_*` environment variables, then
/// flags, each overriding the one before. Every value is checked where it is read, so an error names its source.
enum ServeConfiguration {
    /// The settings, and warnings for `HERALD_*` environment variables that are not settings (the environment is
    /// shared with other programs, so they do not stop the start).
    ///
    /// - Parameters:
    ///   - file: the config file's path, or `nil` for none.
    ///   - environment: the process's environment.
    ///   - flags: the values given as flags, by key, with the flag's name as written.
    /// - Throws: ``ConfigurationError`` for a file that cannot be read or is not valid YAML, an unknown key, a value of
    ///   the wrong type or out of range, wherever it came from.
    static func resolve(
        file: String?, environment: [String: String], flags: [(key: String, value: SettingValue, flag: String)]
    ) throws -> (settings: ServeSettings, warnings: [String]) {
        var settings = ServeSettings()
        if let file { try readFile(file, into: &settings) }
        let warnings = try readEnvironment(environment, into: &settings)
        for (key, value, flag) in flags {
            guard let option = ServeOption.all.first(where: { $0.key == key }) else { continue }
            let source = SettingSource.flag(flag)
            switch value {
            case .list(let items):
                if let bad = items.first(where: { !option.accepts($0) }) { throw invalid(option, "'\(bad)'", at: source) }
            default:
                guard isAllowed(value, for: option) else { throw invalid(option, quoted(value), at: source) }
            }
            settings.set(option, value, from: source)
        }
        return (settings, warnings)
    }

    // MARK: The file

    static func readFile(_ path: String, into settings: inout ServeSettings) throws {
        guard let bytes = readWholeFile(path) else {
            throw ConfigurationError(message: "herald: cannot read the config file \(path): \(String(cString: strerror(errno)))")
        }
        try readFile(contents: bytes, path: path, into: &settings)
    }

    /// The config file's `bytes` (read from `path`, which errors name) into `settings`: what the fuzz target
    /// (Fuzz/Sources/FuzzConfig) drives.
    static func readFile(contents bytes: [UInt8], path: String, into settings: inout ServeSettings) throws {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError(message: "herald: config file \(path): not UTF-8 text")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw ConfigurationError(message: "herald: config file \(path)\(yamlProblem(error))")
        }
        // An empty file (or one of comments only) sets nothing.
        guard let root else { return }
        guard let mapping = root.mapping else {
            throw ConfigurationError(
                message: "herald: config file \(path): the top level must be a mapping of keys to values (key: value lines)")
        }
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line ?? 0
            guard let key = keyNode.scalar?.string else {
                throw ConfigurationError(message: "herald: config file \(path), line \(line): a key must be a plain name")
            }
            if key == "categories" {
                settings.categories = try CategoriesConfiguration.read(valueNode, path: path)
                continue
            }
            guard let option = ServeOption.all.first(where: { $0.key == key }) else {
                let suggestion = nearest(to: key, among: ServeOption.all.map(\.key)).map { " (did you mean '\($0)'?)" } ?? ""
                throw ConfigurationError(
                    message: """
                        herald: config file \(path), line \(line): unknown key '\(key)'\(suggestion); the keys are \
                        \(ServeOption.all.map(\.key).joined(separator: ", ")), categories
                        """)
            }
            let source = SettingSource.file(path: path, line: line)
            guard let value = decode(valueNode, as: option.kind), isAllowed(value, for: option) else {
                throw invalid(option, shown(valueNode), at: source)
            }
            settings.set(option, value, from: source)
        }
    }

    /// `node` as a value of `kind`, or `nil` when it is not one. Strings take any scalar as written (`sender-id: 123`
    /// is the string "123"); integers must be written as whole numbers; booleans as YAML has them (true, false, yes,
    /// no, on, off); lists as sequences of scalars. An empty value (`key:` alone) is never a value.
    static func decode(_ node: Node, as kind: ServeOption.Kind) -> SettingValue? {
        if isNull(node) { return nil }
        switch kind {
        case .string:
            return node.scalar.map { .string($0.string) }
        case .integer:
            return node.scalar.flatMap { Int($0.string) }.map { .integer($0) }
        case .boolean:
            return node.scalar.flatMap { Bool.construct(from: $0) }.map { .boolean($0) }
        case .list:
            guard let sequence = node.sequence else { return nil }
            var items: [String] = []
            for item in sequence {
                guard let scalar = item.scalar, !isNull(item) else { return nil }
                items.append(scalar.string)
            }
            return .list(items)
        }
    }

    /// Whether `node` is YAML's null: nothing after the colon, `~` or `null`.
    static func isNull(_ node: Node) -> Bool {
        node.scalar != nil && node.tag == Tag(.null)
    }

    /// How an error shows a YAML value: a scalar quoted, anything else by what it is.
    static func shown(_ node: Node) -> String {
        switch node {
        case .scalar(let scalar): isNull(node) ? "an empty value" : "'\(scalar.string)'"
        case .sequence: "a list"
        case .mapping: "a mapping"
        case .alias: "an alias"
        }
    }

    /// Yams' error as `, line L, column C: not valid YAML: problem` (one line; Yams' own text spans several).
    static func yamlProblem(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return ", line \(mark.line), column \(mark.column): not valid YAML: \(problem)"
        case .duplicatedKeysInMapping(let duplicates, let context):
            return ", line \(context.mark.line): the key \(duplicates.sorted().joined(separator: ", ")) is given more than once"
        case .reader(let problem, _, _, _):
            return ": not valid YAML: \(problem)"
        default:
            return ": not valid YAML: \(error)"
        }
    }

    // MARK: The environment

    static func readEnvironment(_ environment: [String: String], into settings: inout ServeSettings) throws -> [String] {
        for option in ServeOption.all {
            // An empty variable counts as not set, as shells treat it.
            guard let text = environment[option.environmentName], !text.isEmpty else { continue }
            let source = SettingSource.environment(option.environmentName)
            guard let value = decode(text, as: option.kind, separator: option.environmentSeparator), isAllowed(value, for: option) else {
                throw invalid(option, "'\(text)'", at: source)
            }
            settings.set(option, value, from: source)
        }
        let known = Set(ServeOption.all.map(\.environmentName)).union(ServeOption.otherEnvironmentNames)
        return environment.keys.filter { $0.hasPrefix("HERALD_") && !known.contains($0) }.sorted().map { name in
            let suggestion = nearest(to: name, among: known.sorted()).map { " (did you mean \($0)?)" } ?? ""
            return "environment \(name) is not a setting of herald serve and is ignored\(suggestion)"
        }
    }

    /// `text` from an environment variable as a value of `kind`: integers as whole numbers, booleans as true / false /
    /// yes / no / on / off / 1 / 0, lists separated by ':' (as PATH).
    static func decode(_ text: String, as kind: ServeOption.Kind, separator: Character = ":") -> SettingValue? {
        switch kind {
        case .string:
            return .string(text)
        case .integer:
            return Int(text).map { .integer($0) }
        case .boolean:
            switch text.lowercased() {
            case "true", "yes", "on", "1": return .boolean(true)
            case "false", "no", "off", "0": return .boolean(false)
            default: return nil
            }
        case .list:
            return .list(text.split(separator: separator).map(String.init))
        }
    }

    // MARK: Checks and messages

    static func isAllowed(_ value: SettingValue, for option: ServeOption) -> Bool {
        switch (option.kind, value) {
        case (.string, .string(let text)): option.accepts(text)
        case (.integer(let range), .integer(let number)): range.contains(number)
        case (.boolean, .boolean): true
        case (.list, .list(let items)): items.allSatisfy(option.accepts)
        default: false
        }
    }

    static func invalid(_ option: ServeOption, _ shown: String, at source: SettingSource) -> ConfigurationError {
        let place = if case .file = source { "\(source), key \(option.key)" } else { "\(source)" }
        return ConfigurationError(message: "herald: \(place): \(shown) is not valid; allowed: \(option.allowed)")
    }

    static func quoted(_ value: SettingValue) -> String {
        switch value {
        case .string(let text): "'\(text)'"
        case .integer(let number): "'\(number)'"
        case .boolean(let flag): "'\(flag)'"
        case .list(let items): "'\(items.joined(separator: ":"))'"
        }
    }

    /// The candidate closest to `word` by edit distance, when it is close enough to be a slip (at most a third of
    /// the word's length, and at most 3).
    static func nearest(to word: String, among candidates: [String]) -> String? {
        let limit = min(3, max(1, word.count / 3))
        let scored = candidates.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= limit }
        return scored.min { $0.1 < $1.1 }?.0
    }

    /// Levenshtein distance between `a` and `b`.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// The whole contents of the file at `path`, or `nil` (with `errno` set) when it cannot be read.
func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var contents: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count < 0, errno == EINTR { continue }
        guard count >= 0 else { return nil }
        if count == 0 { return contents }
        contents += buffer[0..<count]
    }
}

extension ServeSettings {
    /// The effective configuration as a config file: one `key: value` line per setting with its source in a comment.
    /// Unset settings (the auth token file) are commented out. The bearer secret itself is never shown.
    func rendered(environment: [String: String]) -> String {
        var lines = ["# herald serve: the effective configuration; each line says where its value came from"]
        for option in ServeOption.all {
            let source = sources[option.key] ?? .defaultValue
            var origin = "\(source)"
            if option.key == ServeOption.socket.key, values[option.key] == nil { origin += " (herald.sock in data-dir)" }
            let value: String
            switch values[option.key] {
            case .string(let text)?: value = Self.yamlScalar(text)
            case .integer(let number)?: value = "\(number)"
            case .boolean(let flag)?: value = "\(flag)"
            case .list(let items)?:
                // A server URL may carry a password: shown as ***, like the receiver's logs show it.
                let shown = option.key == ServeOption.natsServers.key ? items.map(NATSReceiver.redactingCredentials) : items
                value = "[" + shown.map(Self.yamlScalar).joined(separator: ", ") + "]"
            case nil:
                if option.key == ServeOption.socket.key, let socket {
                    value = Self.yamlScalar(socket)
                } else {
                    guard option.key == ServeOption.authTokenFile.key else {
                        lines.append("# \(option.key): not set; \(option.defaultText)")
                        continue
                    }
                    let secret =
                        environment["HERALD_AUTH_TOKEN"].map { $0.isEmpty ? "" : "; the bearer secret comes from HERALD_AUTH_TOKEN" } ?? ""
                    lines.append("# \(option.key): not set\(secret.isEmpty ? "; no bearer secret" : secret)")
                    continue
                }
            }
            lines.append("\(option.key): \(value)  # \(origin)")
        }
        if !categories.isEmpty { lines += CategoriesConfiguration.rendered(categories) }
        return lines.joined(separator: "\n")
    }

    /// `text` as a YAML scalar: plain when that reads back as the same string, else double-quoted.
    static func yamlScalar(_ text: String) -> String {
        let plain =
            !text.isEmpty && text.allSatisfy { $0.isLetter || $0.isNumber || "._/-:@+".contains($0) }
            && !text.hasSuffix(":") && !text.hasPrefix("-")
        if plain { return text }
        var escaped = ""
        for character in text {
            switch character {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return "\"\(escaped)\""
    }
}
