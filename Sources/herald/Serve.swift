import ArgumentParser
import EchoHandler
import Glibc
import HTTPReceiver
import Herald
import HeraldSQLite
import JSONLExport
import Logging
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
        let secret = try BearerSecret.load(file: authTokenFile)

        var configuration = Herald.Configuration(senderID: senderID)
        configuration.projectID = projectID
        configuration.shutdownGracePeriod = .seconds(shutdownGrace)
        let store: SQLiteStore
        let analyticsStore: SQLiteAnalyticsStore?
        do {
            store = try SQLiteStore(directory: dataDirectory)
            analyticsStore = noAnalyticsStore
                ? nil : try SQLiteAnalyticsStore(directory: dataDirectory, options: .init(retentionDays: analyticsRetentionDays > 0 ? analyticsRetentionDays : nil))
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
        // The loop and the signal watchers come first, so SIGTERM during start-up is a clean stop, not a kill.
        let loop = EventLoop(name: "herald")
        try loop.start()
        let termination = try await Termination(on: loop)
        let herald = Herald(configuration: configuration, store: store, loop: loop, logger: logger)

        if http != "none", let address = SocketAddress(parsing: http) {
            try herald.register(HTTPReceiver(options: .init(address: address, secret: secret)))
        }
        let socketSetting = socket ?? "\(dataDirectory)/herald.sock"
        if socketSetting != "none", let address = SocketAddress(parsing: socketSetting.contains("/") || socketSetting.hasPrefix("unix:") ? socketSetting : "./\(socketSetting)") {
            try herald.register(SocketReceiver(options: .init(addresses: [address])))
        }
        if let analyticsStore { try herald.register(analyticsStore) }
        if metrics != "none", let address = SocketAddress(parsing: metrics) {
            try herald.register(PrometheusExporter(options: .init(address: address)))
        }
        if deliveryMetrics != "none" {
            try herald.register(JSONLExport(options: .init(path: deliveryMetrics), installationID: { try? await herald.installationID() }))
        }
        if echo {
            try herald.register(EchoHandler(installationID: { try? await herald.installationID() }))
        }

        do {
            try await herald.start()
        } catch {
            await herald.shutdown()
            await loop.shutdownGracefully()
            throw CommandFailure(message: "herald: \(error)")
        }
        if !echo {
            let token = try await herald.token()
            writeLine("registration token: \(token)")
        }
        let signal = await termination.signal()
        logger.notice("stopping", metadata: ["signal": "\(signal == SIGTERM ? "SIGTERM" : "SIGINT")", "grace": "\(shutdownGrace)s"])
        await herald.shutdown()
        await loop.shutdownGracefully()
        logger.notice("stopped")
    }
}

/// Watches SIGTERM and SIGINT from the moment it is made; ``signal()`` returns the first that arrived (at once
/// when it came before the call).
final class Termination: @unchecked Sendable {
    // @unchecked Sendable: `received`, `waiter` and `watchers` are touched on the loop thread only.
    private let loop: EventLoop
    private var received: Int32?
    private var waiter: CheckedContinuation<Int32, Never>?
    private var watchers: [SignalWatcher] = []

    init(on loop: EventLoop) async throws {
        self.loop = loop
        try await loop.submit {
            for signal in [SIGTERM, SIGINT] {
                self.watchers.append(try SignalWatcher.watch(signal, on: loop) { [unowned self] number in
                    guard self.received == nil else { return }
                    self.received = number
                    for watcher in self.watchers { watcher.close() }
                    self.waiter?.resume(returning: number)
                    self.waiter = nil
                })
            }
        }
    }

    /// The first of SIGTERM / SIGINT, waiting for it if none came yet.
    func signal() async -> Int32 {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            loop.execute {
                if let received = self.received { continuation.resume(returning: received) } else { self.waiter = continuation }
            }
        }
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
