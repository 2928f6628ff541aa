import CSystemd
import Glibc
import Herald
import HeraldExecFetchWorker
import HeraldTLS
import Logging
import Synchronization

/// SIGHUPs that arrive while the daemon starts, before its loop watches for them (a log rotation's `kill -HUP`, a
/// reload asked for at boot): noted, and answered with one reload once the loop watches, instead of ending the process
/// (SIGHUP's default action).
enum EarlyHangup {
    private static let received = Atomic<Bool>(false)

    /// Notes each SIGHUP from now until the loop's watcher takes the signal over.
    static func noteFromNow() {
        signal(SIGHUP) { _ in EarlyHangup.received.store(true, ordering: .relaxed) }
    }

    /// Whether a SIGHUP was noted (and forgets it).
    static func take() -> Bool {
        received.exchange(false, ordering: .relaxed)
    }
}

/// The daemon's log level, which a reload (SIGHUP) can change while every logger already made keeps working.
final class LiveLogLevel: Sendable {
    private let raw: Atomic<UInt8>

    init(_ level: Logger.Level) { raw = Atomic(Self.code(level)) }

    var level: Logger.Level {
        get { Logger.Level.allCases[Int(raw.load(ordering: .relaxed))] }
        set { raw.store(Self.code(newValue), ordering: .relaxed) }
    }

    private static func code(_ level: Logger.Level) -> UInt8 { UInt8(Logger.Level.allCases.firstIndex(of: level)!) }
}

/// What SIGHUP does to a running `herald serve`: read the configuration again (the file; flags and the environment
/// cannot change under a running process) and apply what can change live — the settings the schema marks live (the
/// log level here, a plugin's through ``LiveConfigurable``), and the TLS certificate and key read again from their
/// files — telling systemd `RELOADING=1` first and `READY=1` after. Every other changed setting is named in the log as
/// needing a restart; a configuration that no longer resolves changes nothing.
final class ConfigurationReload: Sendable {
    /// Settings that take effect on reload: those the schema marks live.
    let liveKeys: Set<String>

    private let resolve: @Sendable () throws -> ServeSettings
    private let logLevel: LiveLogLevel
    private let tls: TLSServerContext?
    private let logger: Logger
    /// The settings in force: those of the start with the live changes since, and the plugins that take live
    /// changes. Reloads take turns on it.
    private let inForce: Locked<(settings: ServeSettings, plugins: [any LiveConfigurable])>

    init(
        running: ServeSettings, resolve: @escaping @Sendable () throws -> ServeSettings, logLevel: LiveLogLevel, tls: TLSServerContext?,
        logger: Logger
    ) {
        inForce = Locked((running, []))
        liveKeys = Set(running.schema.settings.filter(\.isLive).map(\.key))
        self.resolve = resolve
        self.logLevel = logLevel
        self.tls = tls
        self.logger = logger
    }

    /// The settings' keys whose values differ between `old` and `new` (the categories counted as one key).
    static func changedKeys(_ old: ServeSettings, _ new: ServeSettings) -> [String] {
        var changed = new.schema.settings.map(\.key).filter { old.values[$0] != new.values[$0] }
        if old.categories != new.categories { changed.append("categories") }
        return changed
    }

    /// Adds a plugin whose live settings each reload hands on (``LiveConfigurable/applyLiveSettings(_:)``).
    func add(_ plugin: any LiveConfigurable) {
        inForce.withLock { $0.plugins.append(plugin) }
    }

    /// Reloads (blocking: it reads files), comparing with the settings in force.
    func reload() {
        inForce.withLock { $0.settings = reload(running: $0.settings, plugins: $0.plugins) }
    }

    private func reload(running: ServeSettings, plugins: [any LiveConfigurable]) -> ServeSettings {
        Systemd.notify("RELOADING=1\nMONOTONIC_USEC=\(Self.monotonicMicroseconds())\nSTATUS=reloading the configuration")
        defer { Systemd.notify("READY=1\nSTATUS=receiving") }
        let new: ServeSettings
        do {
            new = try resolve()
        } catch {
            let message = (error as? ConfigurationError)?.message ?? "\(error)"
            logger.error("configuration reload failed (SIGHUP); the configuration in force stays", metadata: ["error": "\(message)"])
            return running
        }
        let changed = Self.changedKeys(running, new)
        let applied = changed.filter { liveKeys.contains($0) }
        let needRestart = changed.filter { !liveKeys.contains($0) }
        var inForce = running
        for key in applied { inForce.adopt(key, from: new) }
        if applied.contains(ServeOption.logLevel.key) { logLevel.level = new.logLevel }
        if !applied.isEmpty {
            for plugin in plugins { plugin.applyLiveSettings(inForce.configuration) }
            if applied.contains(ExecFetchWorker.Settings.timeout.key) { inForce.warnIfExecFetchOutlastsDeadline(logger: logger) }
        }
        if let tls {
            do {
                try tls.reload()
                logCertificates(
                    tls, "TLS certificate reloaded (SIGHUP); new handshakes use it", logger: logger, level: .notice,
                    clientCertificates: tls.configuration.clientCAFile != nil)
            } catch {
                logger.error("TLS reload failed (SIGHUP); the certificates in use stay", metadata: ["error": "\(error)"])
            }
        }
        logger.notice("configuration reloaded (SIGHUP)", metadata: ["applied": "\(applied)", "needsRestart": "\(needRestart)"])
        if !needRestart.isEmpty {
            logger.warning("changed settings take effect at the next start", metadata: ["settings": "\(needRestart)"])
        }
        return inForce
    }

    static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
    }
}
