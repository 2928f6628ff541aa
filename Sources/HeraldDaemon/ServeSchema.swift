import Herald
import HeraldDesktopPresenter
import HeraldEchoHandler
import HeraldExecFetchWorker
import HeraldHTTPReceiver
import HeraldImageAttachment
import HeraldJSONLExport
import HeraldNATSReceiver
import HeraldPrometheusMetrics
import HeraldSQLite
import HeraldSocketReceiver
import HeraldTokenWebhook
import HeraldUnifiedPush
import Logging

/// A setting of `herald serve`: one of the composed schema's (``ServeOption/all``).
typealias ServeOption = ConfigurationSetting

/// A setting's value, as `herald serve` reads it.
typealias SettingValue = ConfigurationValue

/// The daemon's own settings: what no plugin owns (identity, the data directory, logging, lifecycle, the listeners'
/// shared TLS and network policy, dynamic plugins, the presenter).
extension ServeOption {
    static let projectID = ServeOption(
        "project-id", .string, default: .string("herald"), "herald", allowed: "a non-empty project ID",
        help: "The project ID senders address (projects/{project}/messages:send).", valueName: "id")
    static let senderID = ServeOption(
        "sender-id", .string, default: .string("herald"), "herald", allowed: "a non-empty sender ID",
        help: "The sender ID (project number) tokens are minted for.", valueName: "id")
    static let dataDirectory = ServeOption(
        "data-dir", .string, default: .string("herald-data"), "herald-data", allowed: "a non-empty directory path",
        help:
            "The data directory: the store (herald.sqlite: identity, topics, quarantine; inbox.log: the durable inbox), the analytics store and the default socket.",
        valueName: "dir")
    static let presenter = ServeOption(
        "presenter", .oneOf(["desktop", "log", "none"]), default: .string("log"), "log", allowed: "desktop, log or none",
        help:
            "Where notifications are shown: 'desktop' through org.freedesktop.Notifications on the session bus, 'log' as a log line, 'none' nowhere.",
        valueName: "desktop|log|none")
    static let logLevel = ServeOption(
        "log-level", .oneOf(Logger.Level.allCases.map(\.rawValue)), default: .string("info"), "info",
        allowed: Logger.Level.allCases.map(\.rawValue).joined(separator: ", "), help: "How much is logged on standard error.",
        valueName: "level", live: true)
    static let shutdownGrace = ServeOption(
        "shutdown-grace", .integer(0...86_400), default: .integer(10), "10", allowed: "a whole number of seconds from 0 to 86400",
        help: "Seconds to finish in-flight messages after SIGTERM / SIGINT.", valueName: "seconds")
    static let maxReplays = ServeOption(
        "max-replays", .integer(1...1_000), default: .integer(3), "3", allowed: "a whole number from 1 to 1000",
        help:
            "Starts that may replay a message still pending; past it the message is quarantined (its handling likely crashes the daemon).",
        valueName: "starts")
    static let maxInFlight = ServeOption(
        "max-in-flight", .integer(1...1_000_000), default: .integer(4096), "4096", allowed: "a whole number from 1 to 1000000",
        help:
            "Messages accepted and not yet handled, at most (with the durable inbox a message counts until its group is committed and it is handled). Past it HTTP senders get QUOTA_EXCEEDED (429), the listeners stop reading and JetStream messages are handed back for a later delivery, until half are done. An embedded instance's default is 1024; 4096 drains a JetStream backlog 20-38 % faster at the same peak memory.",
        valueName: "count")
    static let contentModifierDeadline = ServeOption(
        "content-modifier-deadline", .integer(1...600), default: .integer(30), "30", allowed: "a whole number of seconds from 1 to 600",
        help:
            "Seconds content modifiers (the image download) may take with a mutable-content notification before it is presented as it is.",
        valueName: "seconds")
    static let backgroundFetchDeadline = ServeOption(
        "background-fetch-deadline", .integer(1...3_600), default: .integer(30), "30",
        allowed: "a whole number of seconds from 1 to 3600",
        help:
            "Seconds a background fetch (a silent message's workers: exec-fetch, a plugin's) may take, from when its worker starts; then it is cancelled and counted failed. Keep exec-fetch-timeout below it.",
        valueName: "seconds")
    static let plugins = ServeOption(
        "plugins", .list, default: .list([]), "none",
        allowed: "a list of paths of shared objects, e.g. [/usr/lib/herald/libweather.so] (environment: separated by ':')",
        help: "Load a handler plugin from a shared object (the C ABI of herald_plugin.h); repeatable. All load or none do.",
        flag: "--plugin", valueName: "path")
    static let allowUnauthenticatedNetwork = ServeOption(
        "allow-unauthenticated-network", .boolean, default: .boolean(false), "false", allowed: "true or false",
        help:
            "Let the listeners without authentication (a TCP socket address, metrics) listen beyond loopback; the HTTP endpoint needs a secret there regardless."
    )
    static let allowPlaintextNetwork = ServeOption(
        "allow-plaintext-network", .boolean, default: .boolean(false), "false", allowed: "true or false",
        help: "Let the HTTP listeners (the HTTP endpoint, metrics) serve plain HTTP beyond loopback without TLS; the log says so at start.")
    static let tlsCertificate = ServeOption(
        "tls-cert", .string, default: nil, "none (no TLS)", allowed: "a non-empty file path",
        help:
            "The TLS certificate chain (PEM, the server's first) of every TCP listener (HTTP, a TCP socket, metrics); with tls-key. TLS 1.2 and 1.3; ALPN h2 and http/1.1 on the HTTP endpoint. SIGHUP reads it again: new handshakes use it, open connections keep theirs.",
        valueName: "file")
    static let tlsKey = ServeOption(
        "tls-key", .string, default: nil, "none", allowed: "a non-empty file path",
        help: "The TLS certificate's private key (PEM); with tls-cert. SIGHUP reads it again.", valueName: "file")
    static let tlsSNICertificates = ServeOption(
        "tls-sni-certs", .list, default: .list([]), "none (one certificate for every name)",
        allowed: "a list of CERT:KEY, two PEM files (the certificate's path without a colon) (environment: separated by ',')",
        help:
            "Another TLS certificate chain and its key, chosen by the name the client asks for (SNI): a handshake gets the first of tls-cert and these whose subjectAltName DNS names match it (*.example.org matches one label), tls-cert when none does or the client sends no name; repeatable; needs tls-cert. SIGHUP reads them again.",
        flag: "--tls-sni-cert", valueName: "cert:key", environmentSeparator: ",", accepts: { sniCertificate($0) != nil })
    static let tlsClientCA = ServeOption(
        "tls-client-ca", .string, default: nil, "none (no client certificates)", allowed: "a non-empty file path",
        help: "CA certificates (PEM): TLS clients must present a certificate one of them signed (mutual TLS); needs tls-cert.",
        valueName: "file")

    static let disabledPlugins = ServeOption(
        "disable-plugins", .list, default: .list([]), "none",
        allowed: "a list of bundled plugins' names: \(pluginSections.map(\.name).joined(separator: ", ")) (environment: separated by ',')",
        help: "A bundled plugin not to start, by name, whatever its own settings say; repeatable.", flag: "--disable-plugin",
        valueName: "name", environmentSeparator: ",", accepts: { name in pluginSections.contains { $0.name == name } })

    /// `CERT:KEY` as its two paths (split at the first colon); `nil` when either is empty.
    static func sniCertificate(_ text: String) -> (certificate: String, key: String)? {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let certificate = String(text[..<colon])
        let key = String(text[text.index(after: colon)...])
        guard !certificate.isEmpty, !key.isEmpty else { return nil }
        return (certificate, key)
    }

    /// The daemon's own section: its keys stand at the config file's top level, not in a section of their own.
    static let daemonSection = ConfigurationSection(
        name: "herald serve", summary: "The daemon itself: identity, data, logging, lifecycle, the listeners' TLS, dynamic plugins.",
        settings: [
            projectID, senderID, dataDirectory, presenter, logLevel, shutdownGrace, maxReplays, maxInFlight, contentModifierDeadline,
            backgroundFetchDeadline, plugins,
            allowUnauthenticatedNetwork, allowPlaintextNetwork, tlsCertificate, tlsKey, tlsSNICertificates, tlsClientCA,
            disabledPlugins,
        ], topLevel: true)

    /// The bundled plugins' sections, in the order `--print-config`, `--help` and the reference list them.
    static let pluginSections = [
        HTTPReceiver.Settings.section, SocketReceiver.Settings.section, DesktopPresenter.Settings.section, EchoHandler.Settings.section,
        UnifiedPushDistributor.Settings.section, SQLiteAnalyticsStore.Settings.section, PrometheusExporter.Settings.section,
        JSONLExport.Settings.section, ExecFetchWorker.Settings.section, TokenWebhook.Settings.section, ImageAttachment.Settings.section,
        NATSReceiver.Settings.section,
    ]

    /// `herald serve`'s schema: the daemon's own section, then each bundled plugin's.
    static let schema = ConfigurationSchema([daemonSection] + pluginSections)

    /// The settings reference page (`herald serve --print-reference`; docs/operators/settings.md is this page).
    static var reference: String { reference(schema: schema) }

    /// The settings reference page of `schema` (`--print-reference`).
    static func reference(schema: ConfigurationSchema) -> String {
        schema.markdownReference(
            title: "Settings of `herald serve`",
            introduction: """
                <!-- Generated by `herald serve --print-reference`: edit the settings in the code, not this page (a test \
                fails when the two differ). -->

                Each setting is read from, in rising precedence: its default, the YAML config file (`--config FILE` or \
                `HERALD_CONFIG`), its environment variable and its flag. The config file is a mapping of the keys below to \
                values (lists as YAML sequences; in an environment variable, separated as the setting says): the \
                daemon's own at the top level, each plugin's in a section named after the plugin (`TokenWebhook:` and \
                its keys indented below it; a plugin's key may also stand at the top level, but not both), plus \
                `categories` (notification categories and their actions) and `plugin-settings` (each dynamic plugin's own \
                settings, see configuration.md). An unknown key or a bad value stops the start \
                with exit status 64, naming the file and line, the variable or the flag, and what is allowed. \
                `herald serve --print-config` prints the effective configuration and where each value came from. On \
                SIGHUP the daemon reads the config file again and applies the settings marked live; the others take \
                effect at the next start. `HERALD_AUTH_TOKEN` holds the bearer secret itself when `auth-token-file` is \
                not set.

                The settings are grouped by the plugin that owns them; each plugin declares them beside its options.
                """)
    }

    /// Every setting, in the order `--print-config` and the documentation list them.
    static let all: [ServeOption] = schema.settings

    /// Environment variables of Herald's that are not settings: the secret itself, and the config file's path.
    static let otherEnvironmentNames: Set<String> = ["HERALD_AUTH_TOKEN", "HERALD_CONFIG"]
}
