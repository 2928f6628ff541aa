// WeatherDaemon: a Linux daemon that embeds Herald, as a weather app would.
//
// It keeps Herald's SQLite store (identity, topics, durable inbox) in its own data directory, receives over the
// socket receiver (and HTTP when asked), subscribes to the topic "weather" at start, refreshes a forecast cache file on
// silent pushes, presents display notifications with presentation options that depend on their category, logs through
// swift-log, and runs Herald as a swift-service-lifecycle Service in a ServiceGroup, which stops it cleanly on
// SIGTERM / SIGINT (exit status 0).
//
//     swift run WeatherDaemon                                   # weather-data/, socket weather-data/herald.sock
//     swift run herald send --socket weather-data/herald.sock --topic weather --content-available \
//         --data city=Oslo --data summary=sleet --data high=3     # refreshes weather-data/forecast.json
//     swift run herald topics list --data-dir weather-data       # weather

import ArgumentParser
import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldSQLite
import HeraldSocketReceiver
import Logging
import ServiceLifecycle

@main
struct WeatherDaemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "WeatherDaemon",
        abstract: "A weather daemon on Herald: subscribes to 'weather', refreshes a forecast cache on silent pushes, presents warnings."
    )

    @Option(name: .customLong("data-dir"), help: "The data directory: Herald's store, the lock, the default socket and the forecast cache.")
    var dataDirectory: String = "weather-data"

    @Option(
        help: ArgumentHelp(
            "The socket receiver's Unix path (default: herald.sock in the data directory) or HOST:PORT; 'none' turns it off.",
            valueName: "path"))
    var socket: String?

    @Option(
        help: ArgumentHelp(
            "Also receive FCM v1 over HTTP on HOST:PORT (loopback only: no bearer secret); 'none' (the default) turns it off.",
            valueName: "host:port"))
    var http: String = "none"

    @Option(help: ArgumentHelp("The forecast cache file (default: forecast.json in the data directory).", valueName: "file"))
    var cache: String?

    @Option(name: .customLong("project-id"), help: "The project ID senders address over HTTP.")
    var projectID: String = "herald"

    @Option(name: .customLong("sender-id"), help: "The sender ID tokens are minted for.")
    var senderID: String = "herald"

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (logs go to standard error).")
    var logLevel: String = "info"

    var socketSetting: String { socket ?? "\(dataDirectory)/herald.sock" }

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError(
                "--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(logLevel)'")
        }
        if http != "none", SocketAddress(parsing: http)?.port == nil {
            throw ValidationError("--http must be HOST:PORT or 'none', not '\(http)'")
        }
        if socketSetting != "none", Self.socketAddress(socketSetting) == nil {
            throw ValidationError("--socket must be a path, HOST:PORT or 'none', not '\(socketSetting)'")
        }
    }

    /// A Unix path (a bare name is taken in the current directory) or HOST:PORT.
    static func socketAddress(_ setting: String) -> SocketAddress? {
        SocketAddress(parsing: setting.contains("/") || setting.hasPrefix("unix:") ? setting : "./\(setting)")
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "weather")

        // The data directory's lock first: a second daemon on this directory stops here, and `herald topics` finds
        // this one (and its HTTP address) through it. Then the store.
        let lock: DataDirectoryLock
        let store: SQLiteStore
        do {
            try FileManager.default.createDirectory(
                atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            lock = try DataDirectoryLock.acquire(
                directory: dataDirectory,
                owner: .init(
                    http: http == "none" ? nil : http, projectID: projectID, socket: socketSetting == "none" ? nil : socketSetting))
            store = try SQLiteStore(directory: dataDirectory)
        } catch {
            logger.critical("cannot use the data directory", metadata: ["directory": "\(dataDirectory)", "error": "\(error)"])
            throw ExitCode.failure
        }
        defer { lock.release() }

        var configuration = Herald.Configuration(senderID: senderID)
        configuration.projectID = projectID
        let herald = Herald(configuration: configuration, store: store, logger: logger)
        let cachePath = cache ?? "\(dataDirectory)/forecast.json"
        try herald.register(WeatherApp(cache: ForecastCache(path: cachePath), logger: logger))
        try herald.register(category: WeatherApp.severeWeather)
        try herald.register(category: WeatherApp.forecast)
        if socketSetting != "none", let address = Self.socketAddress(socketSetting) {
            try herald.register(SocketReceiver(options: .init(addresses: [address])))
        }
        if http != "none", let address = SocketAddress(parsing: http) {
            try herald.register(HTTPReceiver(options: .init(address: address)))
        }

        // Herald is a swift-service-lifecycle Service: the group runs it until SIGTERM or SIGINT, then shuts it down
        // gracefully (messages in flight finish, the socket file is removed) and returns.
        var group = ServiceGroupConfiguration(services: [herald], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        group.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod + .seconds(5)
        do {
            try await ServiceGroup(configuration: group).run()
        } catch {
            logger.critical("stopped by an error", metadata: ["error": "\(error)"])
            throw ExitCode.failure
        }
        logger.notice("stopped")
    }
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
