import ArgumentParser
import Glibc
public import Herald
import HeraldEventLoop
import HeraldHTTPReceiver
public import Logging
import ServiceLifecycle

/// `herald serve` as a library: the same settings (flags, `HERALD_*` variables, the YAML file, `--print-config`),
/// the same bundled plugins, the same lifecycle (SIGTERM and SIGINT stop it gracefully, SIGHUP reloads, sd_notify
/// under systemd, the data directory's lock) — with plugins of your own added.
///
/// ```swift
/// var daemon = Daemon()
/// daemon.addPlugin { setup in MyHandler(logger: setup.logger) }
/// try await daemon.run(arguments: Array(CommandLine.arguments.dropFirst()))
/// ```
public struct Daemon: Sendable {
    /// What a plugin of the embedder is made with: the daemon's Herald and its resolved settings.
    public struct PluginSetup: Sendable {
        /// The daemon's Herald, not yet started.
        public let herald: Herald
        /// Every setting's value, the embedder's own sections' included (``Daemon/addSettings(_:)``).
        public let configuration: ConfigurationValues
        /// The data directory (`data-dir`), created and locked.
        public let dataDirectory: String
        /// The daemon's logger.
        public let logger: Logger
    }

    /// A daemon that is ready: its plugins started, its listeners listening.
    public struct Running: Sendable {
        /// The daemon's Herald.
        public let herald: Herald
        /// The address the HTTP endpoint listens on (port 0 replaced by the port chosen), `nil` without one.
        public let httpAddress: SocketAddress?
        /// The data directory (`data-dir`).
        public let dataDirectory: String
        let group: GroupHandle

        /// Stops the daemon as SIGTERM does: no new messages, those in flight finished within the shutdown grace.
        /// ``Daemon/run(arguments:environment:)`` then returns.
        public func stop() async {
            await group.stop()
        }
    }

    /// Makes one plugin of the embedder's, or none (`nil`: its settings leave it off).
    public typealias PluginFactory = @Sendable (PluginSetup) throws -> (any HeraldPlugin)?

    private(set) var sections: [ConfigurationSection] = []
    private(set) var pluginFactories: [PluginFactory] = []
    private(set) var readyHandlers: [@Sendable (Running) async -> Void] = []

    /// Whether the daemon bootstraps swift-log's `LoggingSystem` (standard error, at `log-level`) the first time one
    /// runs in the process. A program that bootstraps it itself sets this to `false` (swift-log allows one bootstrap
    /// per process); the daemon's own logger follows `log-level` either way.
    public var bootstrapsLogging = true

    /// Whether SIGTERM and SIGINT stop the daemon gracefully, as they stop `herald serve`. Their handling (by
    /// swift-service-lifecycle) leaves them ignored by the process for good, and children started later inherit
    /// that: a daemon in a process that must keep them — a test's — sets this to `false` and stops with
    /// ``Running/stop()``.
    public var stopsOnSignals = true

    /// A daemon with the bundled plugins only.
    public init() {}

    /// Adds a section of settings, read like the daemon's own (a flag, a `HERALD_*` variable, a YAML key in the file's
    /// section of the section's name or at its top level, shown by `--print-config` and `--print-reference`); a plugin
    /// reads their values from ``PluginSetup/configuration``. A section named `categories` or `plugin-settings` (the
    /// file's own sections) is a programming error.
    public mutating func addSettings(_ section: ConfigurationSection) {
        precondition(
            section.fileSection.map { !["categories", PluginSettings.key].contains($0) } ?? true,
            "the config file's \(section.name) is not a plugin's section")
        sections.append(section)
    }

    /// Adds a plugin (a handler, a receiver, an analytics sink, a presenter, a worker: any role Herald has), made
    /// once the settings are resolved, registered after the bundled ones. A thrown error stops the start.
    /// A plugin that conforms to `LiveConfigurable` gets the new values of the live settings at each reload (SIGHUP).
    public mutating func addPlugin(_ make: @escaping PluginFactory) {
        pluginFactories.append(make)
    }

    /// Adds what runs once the daemon is ready (after systemd's `READY=1`), before it waits for its stop; the daemon
    /// waits for it, so a long task belongs in a task of its own.
    public mutating func onReady(_ body: @escaping @Sendable (Running) async -> Void) {
        readyHandlers.append(body)
    }

    /// Every setting the daemon reads: its own, the bundled plugins', then the sections added.
    public var schema: ConfigurationSchema {
        ConfigurationSchema([ServeOption.daemonSection] + ServeOption.pluginSections + sections)
    }

    /// Runs the daemon as `herald serve` runs with `arguments` (its flags, without the program's name) until SIGTERM,
    /// SIGINT or ``Running/stop()``. `--print-config` and `--print-reference` print and return.
    ///
    /// - Parameters:
    ///   - arguments: `herald serve`'s flags and settings, without the program's name.
    ///   - environment: the `HERALD_*` variables are read from it; the process's when `nil`.
    /// - Throws: ``DaemonError``: exit status 64 for a bad flag or setting (named with its file and line, variable or
    ///   flag), 1 for a failure to start or run (a data directory in use, a port taken, a plugin's error).
    public func run(arguments: [String], environment: [String: String]? = nil) async throws {
        let parsed: ServeArguments
        do {
            parsed = try ServeArguments.parse(arguments)
        } catch {
            let status = ServeArguments.exitCode(for: error)
            guard status != .success else {
                writeLine(ServeArguments.fullMessage(for: error))
                return
            }
            throw DaemonError(message: ServeArguments.fullMessage(for: error), exitStatus: status.rawValue)
        }
        try await run(parsed, environment: environment ?? processEnvironment())
    }

    /// Runs the daemon with `arguments` (``run(arguments:environment:)``) and exits the process: 0 when it stopped,
    /// else the error's status with its message on standard error.
    public func main(arguments: [String] = Array(CommandLine.arguments.dropFirst())) async -> Never {
        do {
            try await run(arguments: arguments)
            exit(0)
        } catch let error as DaemonError {
            writeLine(error.message, to: STDERR_FILENO)
            exit(error.exitStatus)
        } catch {
            writeLine("herald: \(error)", to: STDERR_FILENO)
            exit(1)
        }
    }

    /// `herald serve` with its arguments parsed.
    package func run(_ arguments: ServeArguments, environment: [String: String]) async throws {
        let schema = self.schema
        if arguments.printReference {
            writeLine(ServeOption.reference(schema: schema))
            return
        }
        let settings: ServeSettings
        let warnings: [String]
        let flags: [(key: String, value: SettingValue, flag: String)]
        let file = arguments.config ?? environment["HERALD_CONFIG"].flatMap { $0.isEmpty ? nil : $0 }
        do {
            flags = try schema.parse(arguments: arguments.settingArguments).map { ($0.key, $0.value, $0.flag) }
            (settings, warnings) = try ServeConfiguration.resolve(file: file, environment: environment, flags: flags, schema: schema)
        } catch let error as ConfigurationError {
            throw DaemonError(usage: error.message)
        }
        try Self.check(settings)
        if arguments.printConfig {
            for warning in warnings { writeLine("herald: warning: \(warning)", to: STDERR_FILENO) }
            writeLine(settings.rendered(environment: environment))
            return
        }
        // From here the daemon starts: a SIGHUP until its loop watches for them is noted, not fatal.
        EarlyHangup.noteFromNow()
        // The string catalogs of localized alerts: a broken one stops the start, as a bad setting does.
        let localization: AlertLocalization
        do {
            localization = try AlertLocalization.load(
                directory: "\(settings.dataDirectory)/Localizable", locale: AlertLocalization.locale(environment: environment))
        } catch {
            throw DaemonError(usage: "herald: \(error)")
        }
        let level = LiveLogLevel(settings.logLevel)
        // Standard error, shared by the daemon's handlers so that its lines keep their order (and by the process's
        // other loggers when this daemon bootstraps logging).
        let output = LogOutput(descriptor: STDERR_FILENO)
        if bootstrapsLogging { LogBootstrap.once(level: level, output: output) }
        let logger = Logger(label: "herald", factory: { label in LiveLevelLogHandler(label: label, level: level, output: output) })
        for warning in warnings { logger.warning("\(warning)") }
        do {
            let natsToken = try settings.natsTokenFile.map { try readSecret(file: $0, what: "NATS token file") }
            let tls = try tlsContext(settings, logger: logger)
            let reload = ConfigurationReload(
                running: settings,
                resolve: { try ServeConfiguration.resolve(file: file, environment: environment, flags: flags, schema: schema).settings },
                logLevel: level, tls: tls, logger: logger)
            let handle = GroupHandle()
            let daemon = DaemonService(
                settings: settings, secret: try BearerSecret.load(file: settings.authTokenFile, environment: environment),
                natsToken: natsToken, tls: tls, reload: reload, localization: localization, logger: logger, embedder: self,
                group: handle)
            // SIGTERM and SIGINT (or Running.stop()) start the group's graceful shutdown; the daemon then stops Herald,
            // which gets the shutdown grace for messages in flight. Past that and a margin, the group cancels.
            var configuration = ServiceGroupConfiguration(
                services: [daemon], gracefulShutdownSignals: stopsOnSignals ? [.sigterm, .sigint] : [], logger: logger)
            configuration.maximumGracefulShutdownDuration = .seconds(settings.shutdownGrace + 10)
            let group = ServiceGroup(configuration: configuration)
            handle.set(group)
            try await group.run()
        } catch let failure as CommandFailure {
            throw DaemonError(message: failure.message, exitStatus: 1)
        } catch {
            throw DaemonError(message: "herald: \(error)", exitStatus: 1)
        }
    }

    /// The checks across settings, which no single setting's own check can make.
    private static func check(_ settings: ServeSettings) throws {
        if settings.gateway, settings.natsServers.isEmpty || settings.http == nil {
            throw DaemonError(
                usage: "herald: gateway mode needs NATS servers (nats-servers / --nats-server) and the HTTP endpoint (http not none)")
        }
        if settings.unifiedPush, settings.http == nil || settings.gateway {
            throw DaemonError(
                usage:
                    "herald: unifiedpush needs this instance's HTTP endpoint (http not none, not a gateway: a gateway takes the fleet's UnifiedPush pushes on its own, set unifiedpush-endpoint-url for their VAPID audience)"
            )
        }
        if (settings.tlsCertificate == nil) != (settings.tlsKey == nil)
            || (settings.tlsCertificate == nil && (settings.tlsClientCA != nil || !settings.tlsSNICertificates.isEmpty))
        {
            throw DaemonError(
                usage:
                    "herald: TLS needs both a certificate and its key (tls-cert and tls-key / --tls-cert and --tls-key); tls-client-ca and tls-sni-certs need them too"
            )
        }
        if settings.fcmProxy, settings.http == nil || settings.tlsCertificate != nil {
            throw DaemonError(
                usage:
                    "herald: the FCM proxy needs the HTTP endpoint (http not none) without TLS (no tls-cert): app servers reach a proxy in clear (HTTPS_PROXY=http://...) and TLS runs inside each tunnel"
            )
        }
    }
}

/// Why a daemon did not start or stopped with a failure: the one-line message `herald serve` prints on standard
/// error, and its exit status.
public struct DaemonError: Error, Equatable, CustomStringConvertible {
    /// The message, starting `herald: `.
    public let message: String
    /// 64 (EX_USAGE) for a bad flag or setting, 1 for anything else.
    public let exitStatus: Int32

    /// A failure with `message` and `exitStatus`.
    public init(message: String, exitStatus: Int32) {
        self.message = message
        self.exitStatus = exitStatus
    }

    /// A bad flag or setting: exit status 64.
    init(usage message: String) {
        self.init(message: message, exitStatus: 64)
    }

    public var description: String { message }
}

/// A daemon's service group, once made: what ``Daemon/Running/stop()`` shuts down gracefully.
final class GroupHandle: Sendable {
    private let group = Locked<ServiceGroup?>(nil)

    func set(_ group: ServiceGroup) {
        self.group.withLock { $0 = group }
    }

    func stop() async {
        guard let group = group.withLock({ $0 }) else { return }
        await group.triggerGracefulShutdown()
    }
}

/// swift-log's one bootstrap of the process, made by the first daemon that runs (at its log level).
private enum LogBootstrap {
    private static let done = Locked(false)

    static func once(level: LiveLogLevel, output: LogOutput) {
        done.withLock { done in
            guard !done else { return }
            done = true
            LoggingSystem.bootstrap { label in LiveLevelLogHandler(label: label, level: level, output: output) }
        }
    }
}
