import ArgumentParser
import EchoHandler
import Glibc
import HTTPReceiver
import Herald
import HeraldDynamicPlugins
import HeraldSQLite
import JSONLExport
import Logging
import CSystemd
import ServiceLifecycle
import PrometheusMetrics
import SocketReceiver

/// `herald serve`: a daemon with the HTTP and socket receivers, the SQLite store and its durable inbox,
/// and (with `--echo`) one JSON line per handled event on standard output. SIGTERM or SIGINT stops it:
/// no new messages, in-flight ones finished within the grace period, exit 0.
///
/// Every setting comes from, in rising precedence, its default, the YAML config file (`--config`), a `HERALD_*`
/// environment variable and its flag (see ``ServeOption`` and ``ServeConfiguration``). So the flags here have no
/// defaults of their own: a flag not given leaves the setting to the environment, the file or the default.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a Herald daemon: FCM v1 over HTTP, JSON lines over a Unix socket, the SQLite store in the data directory.",
        discussion: """
        Each setting is read from, in rising precedence: its default, the YAML config file (--config FILE or \
        HERALD_CONFIG), its environment variable (HERALD_ and the key in upper case, '-' as '_') and its flag. The \
        file's keys are the flags' names without '--' (plugins: [PATH, ...] for --plugin). An unknown key or a bad \
        value stops the start with exit status 64, naming the file and line, the variable or the flag. \
        --print-config shows the effective settings and where each came from.
        """
    )

    @Option(help: ArgumentHelp("A YAML config file (default: HERALD_CONFIG, else none).", valueName: "file"))
    var config: String?

    @Flag(name: .customLong("print-config"), help: "Print the effective configuration (a valid config file, each value's source in a comment) and exit.")
    var printConfig = false

    @Option(help: ArgumentHelp(ServeOption.http.help, valueName: "host:port"))
    var http: String?

    @Option(help: ArgumentHelp(ServeOption.socket.help, valueName: "path"))
    var socket: String?

    @Option(name: .customLong("project-id"), help: ArgumentHelp(ServeOption.projectID.help))
    var projectID: String?

    @Option(name: .customLong("sender-id"), help: ArgumentHelp(ServeOption.senderID.help))
    var senderID: String?

    @Option(name: .customLong("data-dir"), help: ArgumentHelp(ServeOption.dataDirectory.help, valueName: "dir"))
    var dataDirectory: String?

    @Flag(inversion: .prefixedNo, help: ArgumentHelp(ServeOption.echo.help))
    var echo: Bool?

    @Option(name: .customLong("auth-token-file"), help: ArgumentHelp(ServeOption.authTokenFile.help, valueName: "file"))
    var authTokenFile: String?

    @Option(name: .customLong("log-level"), help: ArgumentHelp(ServeOption.logLevel.help, valueName: "level"))
    var logLevel: String?

    @Option(name: .customLong("shutdown-grace"), help: ArgumentHelp(ServeOption.shutdownGrace.help, valueName: "seconds"))
    var shutdownGrace: Int?

    @Flag(name: .customLong("analytics-store"), inversion: .prefixedNo, help: ArgumentHelp(ServeOption.analyticsStore.help))
    var analyticsStore: Bool?

    @Option(name: .customLong("analytics-retention-days"), help: ArgumentHelp(ServeOption.analyticsRetentionDays.help, valueName: "days"))
    var analyticsRetentionDays: Int?

    @Option(name: .customLong("plugin"), help: ArgumentHelp(ServeOption.plugins.help, valueName: "path"))
    var plugins: [String] = []

    @Option(help: ArgumentHelp(ServeOption.metrics.help, valueName: "host:port"))
    var metrics: String?

    @Option(name: .customLong("delivery-metrics"), help: ArgumentHelp(ServeOption.deliveryMetrics.help, valueName: "file"))
    var deliveryMetrics: String?

    /// The settings given as flags, with each flag's name as written.
    var flagValues: [(key: String, value: SettingValue, flag: String)] {
        var given: [(key: String, value: SettingValue, flag: String)] = []
        func add(_ option: ServeOption, _ value: SettingValue?, flag: String? = nil) {
            if let value { given.append((option.key, value, flag ?? option.flag)) }
        }
        add(.http, http.map { .string($0) })
        add(.socket, socket.map { .string($0) })
        add(.projectID, projectID.map { .string($0) })
        add(.senderID, senderID.map { .string($0) })
        add(.dataDirectory, dataDirectory.map { .string($0) })
        add(.echo, echo.map { .boolean($0) }, flag: echo == false ? "--no-echo" : "--echo")
        add(.authTokenFile, authTokenFile.map { .string($0) })
        add(.logLevel, logLevel.map { .string($0) })
        add(.shutdownGrace, shutdownGrace.map { .integer($0) })
        add(.analyticsStore, analyticsStore.map { .boolean($0) }, flag: analyticsStore == false ? "--no-analytics-store" : "--analytics-store")
        add(.analyticsRetentionDays, analyticsRetentionDays.map { .integer($0) })
        add(.plugins, plugins.isEmpty ? nil : .list(plugins))
        add(.metrics, metrics.map { .string($0) })
        add(.deliveryMetrics, deliveryMetrics.map { .string($0) })
        return given
    }

    func run() async throws {
        let environment = processEnvironment()
        let settings: ServeSettings
        let warnings: [String]
        do {
            (settings, warnings) = try ServeConfiguration.resolve(
                file: config ?? environment["HERALD_CONFIG"].flatMap { $0.isEmpty ? nil : $0 }, environment: environment, flags: flagValues)
        } catch let error as ConfigurationError {
            writeLine(error.message, to: STDERR_FILENO)
            throw ExitCode(64)
        }
        if printConfig {
            for warning in warnings { writeLine("herald: warning: \(warning)", to: STDERR_FILENO) }
            writeLine(settings.rendered(environment: environment))
            return
        }
        let level = settings.logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "herald")
        for warning in warnings { logger.warning("\(warning)") }
        let daemon = Daemon(settings: settings, secret: try BearerSecret.load(file: settings.authTokenFile), logger: logger)
        // SIGTERM and SIGINT start the group's graceful shutdown; the daemon then stops Herald, which gets
        // the shutdown grace for messages in flight. Past that and a margin, the group cancels.
        var configuration = ServiceGroupConfiguration(services: [daemon], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(settings.shutdownGrace + 10)
        do {
            try await ServiceGroup(configuration: configuration).run()
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }
}

/// The process's environment variables.
func processEnvironment() -> [String: String] {
    var environment: [String: String] = [:]
    var entry = environ
    while let pointer = entry.pointee {
        let text = String(cString: pointer)
        if let equals = text.firstIndex(of: "=") {
            environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
        }
        entry += 1
    }
    return environment
}

/// `herald serve`'s one service: opens the stores, registers the plugins, runs Herald until the group's
/// graceful shutdown, and tells systemd where it stands (READY, STOPPING, WATCHDOG) when run under it.
final class Daemon: Service, Sendable {
    private let settings: ServeSettings
    private let secret: String?
    private let logger: Logger

    init(settings: ServeSettings, secret: String?, logger: Logger) {
        self.settings = settings
        self.secret = secret
        self.logger = logger
    }

    func run() async throws {
        let settings = self.settings
        var configuration = Herald.Configuration(senderID: settings.senderID)
        configuration.projectID = settings.projectID
        configuration.shutdownGracePeriod = .seconds(settings.shutdownGrace)
        // The data directory's lock, held for the daemon's whole life (the kernel drops it when the process ends,
        // even on SIGKILL): a second daemon on the directory is refused, and `herald topics` finds this one.
        let lock: DataDirectoryLock
        do {
            try makeDirectories(settings.dataDirectory)
            lock = try DataDirectoryLock.acquire(directory: settings.dataDirectory, owner: .init(
                http: settings.http, projectID: settings.projectID, socket: settings.socket))
        } catch {
            throw (error as? CommandFailure) ?? CommandFailure(message: "herald: \(error)")
        }
        defer { lock.release() }
        let store: SQLiteStore
        let analyticsStore: SQLiteAnalyticsStore?
        do {
            store = try SQLiteStore(directory: settings.dataDirectory)
            analyticsStore = settings.analyticsStore
                ? try SQLiteAnalyticsStore(
                    directory: settings.dataDirectory,
                    options: .init(retentionDays: settings.analyticsRetentionDays > 0 ? settings.analyticsRetentionDays : nil))
                : nil
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
        let loop = EventLoop(name: "herald")
        try loop.start()
        let herald = Herald(configuration: configuration, store: store, loop: loop, logger: logger)
        do {
            try register(on: herald, analyticsStore: analyticsStore)
            try await herald.start()
        } catch {
            await herald.shutdown()
            await loop.shutdownGracefully()
            throw CommandFailure(message: "herald: \(error)")
        }
        if !settings.echo {
            let token = try await herald.token()
            writeLine("registration token: \(token)")
        }
        let watchdog = Systemd.startWatchdog(on: loop)
        Systemd.notify("READY=1\nSTATUS=receiving")
        let logger = self.logger
        let grace = settings.shutdownGrace
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await herald.waitUntilStopped()
            } onCancel: {
                Task { await herald.shutdown() }
            }
        } onGracefulShutdown: {
            Systemd.notify("STOPPING=1\nSTATUS=finishing messages in flight")
            logger.notice("stopping", metadata: ["grace": "\(grace)s"])
            Task { await herald.shutdown() }
        }
        watchdog?.cancel()
        await loop.shutdownGracefully()
        logger.notice("stopped")
    }

    private func register(on herald: Herald, analyticsStore: SQLiteAnalyticsStore?) throws {
        let settings = self.settings
        if let http = settings.http, let address = SocketAddress(parsing: http) {
            try herald.register(HTTPReceiver(options: .init(address: address, secret: secret)))
        }
        if let socket = settings.socket, let address = ServeSettings.socketAddress(socket) {
            try herald.register(SocketReceiver(options: .init(addresses: [address])))
        }
        if let analyticsStore { try herald.register(analyticsStore) }
        if let metrics = settings.metrics, let address = SocketAddress(parsing: metrics) {
            try herald.register(PrometheusExporter(options: .init(address: address)))
        }
        if let deliveryMetrics = settings.deliveryMetrics {
            try herald.register(JSONLExport(options: .init(path: deliveryMetrics), installationID: { [weak herald] in try? await herald?.installationID() }))
        }
        // Dynamic plugins: all or none, refused with an error naming the file; the daemon never starts half-loaded.
        for plugin in try DynamicPlugin.loadAll(paths: settings.plugins) {
            try herald.register(plugin)
        }
        if settings.echo {
            try herald.register(EchoHandler(installationID: { [weak herald] in try? await herald?.installationID() }))
        }
    }
}

/// The service manager's notification protocol through libsystemd (`sd_notify(3)`): nothing happens unless
/// systemd started the daemon with `Type=notify` (it sets `NOTIFY_SOCKET`).
enum Systemd {
    static func notify(_ state: String) {
        _ = sd_notify(0, state)
    }

    /// With `WatchdogSec=` set (systemd passes `WATCHDOG_USEC`), pings `WATCHDOG=1` from the event loop at half
    /// the interval, so a stuck loop — not just a live process — is what systemd notices.
    static func startWatchdog(on loop: EventLoop) -> RepeatedTask? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        let half = Duration.microseconds(Int64(microseconds / 2))
        return loop.scheduleRepeatedTask(initialDelay: .zero, delay: half) { _ in notify("WATCHDOG=1") }
    }
}

/// The bearer secret from `--auth-token-file` or `HERALD_AUTH_TOKEN` (the file wins); surrounding
/// whitespace, such as a trailing newline, is not part of it.
enum BearerSecret {
    static func load(file: String?) throws -> String? {
        if let file {
            guard let contents = readWholeFile(file) else {
                throw CommandFailure(message: "herald: cannot read the auth token file \(file): \(String(cString: strerror(errno)))")
            }
            let secret = trimmed(String(decoding: contents, as: UTF8.self))
            guard !secret.isEmpty else { throw CommandFailure(message: "herald: the auth token file \(file) is empty") }
            return secret
        }
        if let value = getenv("HERALD_AUTH_TOKEN").map({ String(cString: $0) }) {
            let secret = trimmed(value)
            return secret.isEmpty ? nil : secret
        }
        return nil
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

/// `text` without leading and trailing spaces, tabs and line breaks.
func trimmed(_ text: String) -> String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
    return String(text.drop(while: isSpace).reversed().drop(while: isSpace).reversed())
}

/// Writes `text` and a newline to standard output at once (unbuffered, so a parent reading a pipe sees it now).
func writeLine(_ text: String) {
    let bytes = Array((text + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else { return }
        offset += written
    }
}

/// `mkdir -p` with mode 0700 for what it creates; an existing directory is fine.
func makeDirectories(_ path: String) throws {
    var prefix = path.hasPrefix("/") ? "/" : ""
    for component in path.split(separator: "/") {
        prefix += component
        if mkdir(prefix, 0o700) != 0, errno != EEXIST {
            throw CommandFailure(message: "herald: cannot create \(prefix): \(String(cString: strerror(errno)))")
        }
        prefix += "/"
    }
}
