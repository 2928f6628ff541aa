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
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a Herald daemon: FCM v1 over HTTP, JSON lines over a Unix socket, the SQLite store in the data directory."
    )

    @Option(help: ArgumentHelp("The HTTP receiver's address, HOST:PORT; 'none' turns it off.", valueName: "host:port"))
    var http: String = "127.0.0.1:8080"

    @Option(help: ArgumentHelp("The socket receiver's Unix socket path (default: herald.sock in the data directory) or HOST:PORT; 'none' turns it off.", valueName: "path"))
    var socket: String?

    @Option(name: .customLong("project-id"), help: "The project ID senders address (projects/{project}/messages:send).")
    var projectID: String = "herald"

    @Option(name: .customLong("sender-id"), help: "The sender ID (project number) tokens are minted for.")
    var senderID: String = "herald"

    @Option(name: .customLong("data-dir"), help: "The data directory: the SQLite store (identity, topics, inbox) and the default socket.")
    var dataDirectory: String = "herald-data"

    @Flag(help: "Write one JSON object per line on standard output for every handled event.")
    var echo = false

    @Option(name: .customLong("auth-token-file"), help: ArgumentHelp("A file holding the bearer secret senders must present (else HERALD_AUTH_TOKEN; with neither, HTTP listens on loopback only).", valueName: "file"))
    var authTokenFile: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (logs go to standard error).")
    var logLevel: String = "info"

    @Option(name: .customLong("shutdown-grace"), help: "Seconds to finish in-flight messages after SIGTERM / SIGINT.")
    var shutdownGrace: Int = 10

    @Flag(name: .customLong("no-analytics-store"), help: "Do not keep analytics events in DATA-DIR/analytics.sqlite (herald report reads them).")
    var noAnalyticsStore = false

    @Option(name: .customLong("analytics-retention-days"), help: "Days of analytics events kept in the analytics store; 0 keeps everything.")
    var analyticsRetentionDays: Int = 90

    @Option(name: .customLong("plugin"), help: ArgumentHelp("Load a handler plugin from a shared object (the C ABI of herald_plugin.h); repeatable. All load or none do.", valueName: "path"))
    var plugins: [String] = []

    @Option(help: ArgumentHelp("Serve Prometheus metrics (GET /metrics) on HOST:PORT; 'none' (the default) turns it off.", valueName: "host:port"))
    var metrics: String = "none"

    @Option(name: .customLong("delivery-metrics"), help: ArgumentHelp("Write FCM's delivery-metrics export as JSON lines to FILE (rotated by size); 'none' (the default) turns it off.", valueName: "file"))
    var deliveryMetrics: String = "none"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(logLevel)'")
        }
        if http != "none", SocketAddress(parsing: http)?.port == nil {
            throw ValidationError("--http must be HOST:PORT (a numeric address or localhost) or 'none', not '\(http)'")
        }
        if let socket, socket != "none", SocketAddress(parsing: socket) == nil {
            throw ValidationError("--socket must be a path, unix:PATH, HOST:PORT or 'none', not '\(socket)'")
        }
        guard shutdownGrace >= 0 else { throw ValidationError("--shutdown-grace must be 0 or more seconds") }
        guard analyticsRetentionDays >= 0 else { throw ValidationError("--analytics-retention-days must be 0 or more days") }
        if metrics != "none", SocketAddress(parsing: metrics)?.port == nil {
            throw ValidationError("--metrics must be HOST:PORT (a numeric address or localhost) or 'none', not '\(metrics)'")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "herald")
        let daemon = Daemon(command: self, secret: try BearerSecret.load(file: authTokenFile), logger: logger)
        // SIGTERM and SIGINT start the group's graceful shutdown; the daemon then stops Herald, which gets
        // --shutdown-grace for messages in flight. Past that and a margin, the group cancels.
        var configuration = ServiceGroupConfiguration(services: [daemon], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        configuration.maximumGracefulShutdownDuration = .seconds(shutdownGrace + 10)
        do {
            try await ServiceGroup(configuration: configuration).run()
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }
}

/// `herald serve`'s one service: opens the stores, registers the plugins, runs Herald until the group's
/// graceful shutdown, and tells systemd where it stands (READY, STOPPING, WATCHDOG) when run under it.
final class Daemon: Service, @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable; `Serve` is a value of plain settings.
    private let command: Serve
    private let secret: String?
    private let logger: Logger

    init(command: Serve, secret: String?, logger: Logger) {
        self.command = command
        self.secret = secret
        self.logger = logger
    }

    func run() async throws {
        let command = self.command
        var configuration = Herald.Configuration(senderID: command.senderID)
        configuration.projectID = command.projectID
        configuration.shutdownGracePeriod = .seconds(command.shutdownGrace)
        // The data directory's lock, held for the daemon's whole life (the kernel drops it when the process ends,
        // even on SIGKILL): a second daemon on the directory is refused, and `herald topics` finds this one.
        let socketSetting = command.socket ?? "\(command.dataDirectory)/herald.sock"
        let lock: DataDirectoryLock
        do {
            try makeDirectories(command.dataDirectory)
            lock = try DataDirectoryLock.acquire(directory: command.dataDirectory, owner: .init(
                http: command.http == "none" ? nil : command.http, projectID: command.projectID,
                socket: socketSetting == "none" ? nil : socketSetting))
        } catch {
            throw (error as? CommandFailure) ?? CommandFailure(message: "herald: \(error)")
        }
        defer { lock.release() }
        let store: SQLiteStore
        let analyticsStore: SQLiteAnalyticsStore?
        do {
            store = try SQLiteStore(directory: command.dataDirectory)
            analyticsStore = command.noAnalyticsStore
                ? nil
                : try SQLiteAnalyticsStore(
                    directory: command.dataDirectory,
                    options: .init(retentionDays: command.analyticsRetentionDays > 0 ? command.analyticsRetentionDays : nil))
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
        if !command.echo {
            let token = try await herald.token()
            writeLine("registration token: \(token)")
        }
        let watchdog = Systemd.startWatchdog(on: loop)
        Systemd.notify("READY=1\nSTATUS=receiving")
        let logger = self.logger
        let grace = command.shutdownGrace
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
        let command = self.command
        if command.http != "none", let address = SocketAddress(parsing: command.http) {
            try herald.register(HTTPReceiver(options: .init(address: address, secret: secret)))
        }
        let socketSetting = command.socket ?? "\(command.dataDirectory)/herald.sock"
        if socketSetting != "none",
           let address = SocketAddress(parsing: socketSetting.contains("/") || socketSetting.hasPrefix("unix:") ? socketSetting : "./\(socketSetting)") {
            try herald.register(SocketReceiver(options: .init(addresses: [address])))
        }
        if let analyticsStore { try herald.register(analyticsStore) }
        if command.metrics != "none", let address = SocketAddress(parsing: command.metrics) {
            try herald.register(PrometheusExporter(options: .init(address: address)))
        }
        if command.deliveryMetrics != "none" {
            try herald.register(JSONLExport(options: .init(path: command.deliveryMetrics), installationID: { [weak herald] in try? await herald?.installationID() }))
        }
        // Dynamic plugins: all or none, refused with an error naming the file; the daemon never starts half-loaded.
        for plugin in try DynamicPlugin.loadAll(paths: command.plugins) {
            try herald.register(plugin)
        }
        if command.echo {
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
