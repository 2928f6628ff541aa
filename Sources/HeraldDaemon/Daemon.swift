package import ArgumentParser
import CSystemd
import Glibc
import Herald
import HeraldDesktopPresenter
import HeraldDynamicPlugins
import HeraldEchoHandler
import HeraldExecFetchWorker
import HeraldHTTPReceiver
import HeraldImageAttachment
import HeraldJSONLExport
import HeraldNATSReceiver
import HeraldPrometheusMetrics
import HeraldSQLite
import HeraldSocketReceiver
import HeraldTLS
import HeraldTokenWebhook
import HeraldUnifiedPush
import Logging
import ServiceLifecycle

/// `herald serve`'s command line: the config file, `--print-config`, `--print-reference`, and every setting as a flag
/// (read with the schema, not by swift-argument-parser). The flags have no defaults of their own: a flag not given
/// leaves the setting to the environment, the file or the default (see ``ServeOption`` and ``ServeConfiguration``).
package struct ServeArguments: ParsableArguments {
    /// What `herald serve --help` says above the flags.
    package static let abstract =
        "Run a Herald daemon: FCM v1 over HTTP, JSON lines over a Unix socket, the SQLite store in the data directory."

    /// What `herald serve --help` says below the flags: how settings are read, and every setting.
    package static func discussion() -> String {
        """
        Each setting is read from, in rising precedence: its default, the YAML config file (--config FILE or \
        HERALD_CONFIG), its environment variable (HERALD_ and the key in upper case, '-' as '_') and its flag. The \
        file's keys are the flags' names without '--' (plugins: [PATH, ...] for --plugin): the daemon's at the top \
        level, each plugin's under its section (TokenWebhook:, indented below it; or at the top level). An unknown key or a bad \
        value stops the start with exit status 64, naming the file and line, the variable or the flag. \
        --print-config shows the effective settings and where each came from; --print-reference prints the \
        configuration reference.

        SETTINGS, by the plugin that owns them:


        """ + ServeOption.schema.helpText()
    }

    @Option(help: ArgumentHelp("A YAML config file (default: HERALD_CONFIG, else none).", valueName: "file"))
    package var config: String?

    @Flag(
        name: .customLong("print-config"),
        help: "Print the effective configuration (a valid config file, each value's source in a comment) and exit.")
    package var printConfig = false

    @Flag(
        name: .customLong("print-reference"),
        help: "Print the configuration reference (Markdown: every setting of every section, its flag, variable and default) and exit.")
    package var printReference = false

    /// The settings given as flags, read with the schema (``ServeOption/schema``): what swift-argument-parser does
    /// not know, in order.
    @Argument(parsing: .allUnrecognized, help: .hidden)
    package var settingArguments: [String] = []

    package init() {}
}

/// The TLS context of every TCP listener, from tls-cert, tls-key, tls-sni-certs and tls-client-ca; `nil` without
/// them. Its files are read now, so a missing or wrong one stops the start with the file named.
func tlsContext(_ settings: ServeSettings, logger: Logger) throws -> TLSServerContext? {
    guard let certificate = settings.tlsCertificate, let key = settings.tlsKey else { return nil }
    do {
        var tlsLogger = logger
        tlsLogger[metadataKey: "component"] = "tls"
        var configuration = TLSServerContext.Configuration(certificateFile: certificate, keyFile: key, clientCAFile: settings.tlsClientCA)
        configuration.sniCertificates = settings.tlsSNICertificates.map {
            CertificateFiles(certificateFile: $0.certificate, keyFile: $0.key)
        }
        let context = try TLSServerContext(configuration: configuration, logger: tlsLogger)
        logCertificates(context, "TLS certificate loaded", logger: logger, level: .info, clientCertificates: settings.tlsClientCA != nil)
        return context
    } catch {
        throw CommandFailure(message: "herald: \(error)")
    }
}

/// One line per certificate of `context`: the file, its serial, subject, end of validity and the names it serves
/// (SNI; the default also serves every other name and clients sending none).
func logCertificates(_ context: TLSServerContext, _ message: Logger.Message, logger: Logger, level: Logger.Level, clientCertificates: Bool)
{
    let files =
        [CertificateFiles(certificateFile: context.configuration.certificateFile, keyFile: context.configuration.keyFile)]
        + context.configuration.sniCertificates
    for (index, summary) in context.certificates.enumerated() {
        var metadata: Logger.Metadata = [
            "file": "\(index < files.count ? files[index].certificateFile : "")", "serial": "\(summary.serial)",
            "subject": "\(summary.subject)", "notAfter": "\(summary.notAfter)",
            "names": "\(summary.names.isEmpty ? "none (subject's common name)" : summary.names.joined(separator: ", "))",
        ]
        if index == 0 {
            metadata["serves"] =
                "\(files.count > 1 ? "its names, and every name no other certificate has, and clients sending none" : "every name")"
            metadata["clientCertificates"] = "\(clientCertificates ? "required" : "not asked for")"
        } else {
            metadata["serves"] = "its names (SNI)"
        }
        logger.log(level: level, message, metadata: metadata)
    }
}

/// The process's environment variables.
package func processEnvironment() -> [String: String] {
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
final class DaemonService: Service, Sendable {
    private let settings: ServeSettings
    private let secret: String?
    private let natsToken: String?
    private let tls: TLSServerContext?
    private let reload: ConfigurationReload
    private let localization: AlertLocalization
    private let logger: Logger
    /// The embedder's plugins and what it runs once the daemon is ready.
    private let embedder: Daemon
    private let group: GroupHandle

    init(
        settings: ServeSettings, secret: String?, natsToken: String?, tls: TLSServerContext?, reload: ConfigurationReload,
        localization: AlertLocalization, logger: Logger, embedder: Daemon, group: GroupHandle
    ) {
        self.embedder = embedder
        self.group = group
        self.settings = settings
        self.secret = secret
        self.natsToken = natsToken
        self.tls = tls
        self.reload = reload
        self.localization = localization
        self.logger = logger
    }

    func run() async throws {
        let settings = self.settings
        var configuration = Herald.Configuration(senderID: settings.senderID)
        configuration.projectID = settings.projectID
        configuration.shutdownGracePeriod = .seconds(settings.shutdownGrace)
        configuration.maxReplays = settings.maxReplays
        configuration.maxInFlight = settings.maxInFlight
        configuration.contentModifierDeadline = .seconds(settings.contentModifierDeadline)
        configuration.backgroundFetchDeadline = .seconds(settings.backgroundFetchDeadline)
        configuration.alertLocalization = localization
        // The data directory's lock, held for the daemon's whole life (the kernel drops it when the process ends,
        // even on SIGKILL): a second daemon on the directory is refused, and `herald topics` finds this one.
        let lock: DataDirectoryLock
        do {
            try makeDirectories(settings.dataDirectory)
            lock = try DataDirectoryLock.acquire(
                directory: settings.dataDirectory,
                // Over TLS the address is written as an https URL, so that `herald topics` speaks TLS to it.
                owner: .init(
                    http: settings.http.map { settings.tlsCertificate == nil ? $0 : "https://\($0)" }, projectID: settings.projectID,
                    socket: settings.socket))
        } catch {
            throw (error as? CommandFailure) ?? CommandFailure(message: "herald: \(error)")
        }
        defer { lock.release() }
        let (store, analyticsStore) = try openStores()
        // A gateway's NATS calls block a pool thread each (a registration read, a JetStream publish): more threads,
        // more sends in progress at once.
        let loop = EventLoop(name: "herald", blockingThreads: settings.gateway ? 32 : 4)
        // Joined after the loop has closed: the process exits only once the loop thread has ended (OpenSSL's exit
        // handler must not run while that thread frees its TLS state).
        let loopThread = try loop.startJoinable()
        let herald = Herald(configuration: configuration, store: store, loop: loop, logger: logger)
        let inherited = Systemd.offerInheritedSockets()
        if !inherited.isEmpty {
            logger.info("listening sockets from the service manager", metadata: ["addresses": "\(inherited.map { "\($0)" })"])
        }
        let httpReceiver: HTTPReceiver?
        do {
            httpReceiver = try register(on: herald, store: store, analyticsStore: analyticsStore)
            let setup = Daemon.PluginSetup(
                herald: herald, configuration: settings.configuration, dataDirectory: settings.dataDirectory, logger: logger)
            for make in embedder.pluginFactories {
                guard let plugin = try make(setup) else { continue }
                try herald.register(plugin)
                if let live = plugin as? any LiveConfigurable { reload.add(live) }
            }
            // `--presenter log`: a line per notification, as the bus writes one when no presenter is registered, so
            // not beside a presenter of the embedder's or a plugin's either.
            if !herald.registeredPlugins.contains(where: { $0.roles.contains(.presenter) }) {
                try herald.register(LogLinePresenter(logger: logger, loop: loop))
            }
            try await herald.start()
            for address in InheritedSockets.closeUntaken() {
                logger.warning(
                    "a listening socket from the service manager matches no listener of the configuration, and is closed: give the listener exactly this address",
                    metadata: ["address": "\(address)"])
            }
        } catch {
            await herald.shutdown()
            await loop.shutdownGracefully()
            loopThread.join()
            throw (error as? CommandFailure) ?? CommandFailure(message: "herald: \(error)")
        }
        if !(settings.echo && settings.isEnabled(EchoHandler.Settings.section)) {
            let token = try await herald.token()
            writeLine("registration token: \(token)")
        }
        try await reloadOnHangup(loop: loop)
        let watchdog = Systemd.startWatchdog(on: loop)
        Systemd.notify("READY=1\nSTATUS=receiving")
        if !embedder.readyHandlers.isEmpty {
            let running = Daemon.Running(
                herald: herald, httpAddress: try await httpReceiver?.listeningAddress(), dataDirectory: settings.dataDirectory,
                group: group)
            for handler in embedder.readyHandlers { await handler(running) }
        }
        let logger = self.logger
        let grace = settings.shutdownGrace
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await herald.waitUntilStopped()
            } onCancel: {
                Task { await herald.shutdown() }
            }
        } onGracefulShutdown: {
            logger.notice("stopping", metadata: ["grace": "\(grace)s"])
            Task { await herald.shutdown() }
            // Without waiting: the stop must not hang on a service manager that reads no more (the process's exit is
            // what it goes by; this line only says why the stop takes a while).
            Systemd.notifyWithoutWaiting("STOPPING=1\nSTATUS=finishing messages in flight")
        }
        watchdog?.cancel()
        await loop.shutdownGracefully()
        loopThread.join()
        // A stopped store is its database file and the inbox's log, each self-contained: damage to either is then
        // seen at the next start, not hidden behind a write-ahead log SQLite would read first.
        do {
            try store.checkpoint()
        } catch {
            logger.warning("could not checkpoint the store at stop; it stays in its write-ahead log", metadata: ["error": "\(error)"])
        }
        logger.notice("stopped")
    }

    /// SIGHUP reloads the configuration (``ConfigurationReload``), on a pool thread: it reads files. New TLS
    /// handshakes use a reloaded certificate; connections already open keep theirs. SIGHUPs are taken one at a time;
    /// those that came during the start give one reload here.
    private func reloadOnHangup(loop: EventLoop) async throws {
        let reload = self.reload
        // Off the loop: a reload reads the file and may open TLS keys.
        let reloadNow: @Sendable () -> Void = { Task { try? await loop.offload { reload.reload() } } }
        try await loop.submit {
            _ = try SignalWatcher.watch(SIGHUP, on: loop) { _ in reloadNow() }
        }
        // A SIGHUP during the start (noted since `EarlyHangup.noteFromNow()`): one reload now. One that came after the
        // watcher took over is also answered by it; a second reload of the same file changes nothing.
        if EarlyHangup.take() {
            logger.notice("SIGHUP came during the start; reloading the configuration now")
            reloadNow()
        }
    }

    /// The data directory's store and, unless it is turned off, its analytics store. Refuses a directory whose store
    /// is missing while an earlier run's analytics store is there (see `missingStore(in:)`).
    private func openStores() throws -> (SQLiteStore, SQLiteAnalyticsStore?) {
        if let failure = Self.missingStore(in: settings.dataDirectory) { throw failure }
        do {
            let store = try SQLiteStore(directory: settings.dataDirectory)
            let analyticsStore =
                settings.analyticsStore && settings.isEnabled(SQLiteAnalyticsStore.Settings.section)
                ? try SQLiteAnalyticsStore(
                    directory: settings.dataDirectory,
                    options: .init(retentionDays: settings.analyticsRetentionDays > 0 ? settings.analyticsRetentionDays : nil))
                : nil
            return (store, analyticsStore)
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }

    /// A data directory whose herald.sqlite is gone while the analytics store of an earlier run is still there: the
    /// store was deleted or moved. Starting would mint a new registration token and lose the messages the earlier run
    /// accepted but had not handled, so the daemon refuses, saying what to do.
    static func missingStore(in directory: String) -> CommandFailure? {
        let store = "\(directory)/herald.sqlite"
        let analytics = "\(directory)/analytics.sqlite"
        // With the store's write-ahead log still there, SQLiteStore says more (it refuses the orphaned log).
        guard access(store, F_OK) != 0, access(store + "-wal", F_OK) != 0, access(analytics, F_OK) == 0 else { return nil }
        return CommandFailure(
            message:
                "herald: the Herald store \(store) is missing, but \(analytics) of an earlier run is there: the store (registration token, topics, messages not yet handled) was deleted or moved. Put it back, or move the data directory aside to start afresh with a new registration token."
        )
    }

    /// Registers the bundled plugins the settings ask for; returns the HTTP receiver when there is one.
    private func register(on herald: Herald, store: SQLiteStore, analyticsStore: SQLiteAnalyticsStore?) throws -> HTTPReceiver? {
        let settings = self.settings
        var httpReceiver: HTTPReceiver?
        // Registered after the HTTP receiver, which hands it the pushes to its endpoints.
        var distributorOptions = UnifiedPushDistributor.Options(endpointURL: settings.unifiedPushEndpointURL)
        distributorOptions.callTimeout = .seconds(settings.unifiedPushCallTimeout)
        let distributor =
            settings.unifiedPush && settings.isEnabled(UnifiedPushDistributor.Settings.section)
            ? UnifiedPushDistributor(options: distributorOptions, store: store) : nil
        let nats = settings.isEnabled(NATSReceiver.Settings.section) ? try settings.natsOptions(authToken: natsToken) : nil
        // Gateway mode: the HTTP endpoint's sends go to NATS; this daemon is not an instance of the fleet (no
        // NATS receiver). Otherwise NATS, when configured, is one more way in.
        var forwarder: NATSGateway?
        var webPush: (any WebPushEndpoint)? = distributor
        if let nats {
            if settings.gateway {
                // The gateway also takes the fleet's UnifiedPush pushes (POST /up/{token}) and passes them on.
                let gateway = NATSGateway(options: nats, webPushEndpointURL: settings.unifiedPushEndpointURL)
                try herald.register(gateway)
                forwarder = gateway
                webPush = gateway
            } else {
                try herald.register(NATSReceiver(options: nats))
            }
        }
        if let http = settings.http, let address = SocketAddress(parsing: http), settings.isEnabled(HTTPReceiver.Settings.section) {
            var options = HTTPReceiver.Options(address: address, secret: secret)
            options.forwarder = forwarder
            options.apnsKeys = try settings.apnsKeys.map { try $0.load() }
            options.tls = tls
            options.allowPlaintextNetwork = settings.allowPlaintextNetwork
            options.webPush = webPush
            let directory = settings.dataDirectory
            // A gateway's senders are the fleet's (its NATS bucket), an instance's are in its store.
            // Read again every two seconds while the daemon runs, from the store only when it has changed.
            let senders = CachedStoreRead(directory: directory) { try storedSenders(directory: directory) }
            let keys = CachedStoreRead(directory: directory) { try ServiceAccountCredentials.publicKeys(directory: directory) }
            options.senders = forwarder?.senderOptions ?? SenderOptions { try senders.value() }
            options.serviceAccounts = ServiceAccountOptions { try keys.value() }
            if settings.fcmProxy { options.fcmProxy = try ServiceAccountCredentials.proxyContext(directory: directory, logger: logger) }
            let receiver = HTTPReceiver(options: options)
            try herald.register(receiver)
            httpReceiver = receiver
        }
        if let socket = settings.socket, let address = SocketReceiver.Settings.address(socket),
            settings.isEnabled(SocketReceiver.Settings.section)
        {
            var options = SocketReceiver.Options(addresses: [address])
            options.allowUnauthenticatedNetwork = settings.allowUnauthenticatedNetwork
            options.tls = tls
            try herald.register(SocketReceiver(options: options))
        }
        if let analyticsStore { try herald.register(analyticsStore) }
        if let metrics = settings.metrics, let address = SocketAddress(parsing: metrics),
            settings.isEnabled(PrometheusExporter.Settings.section)
        {
            var options = PrometheusExporter.Options(address: address)
            options.allowUnauthenticatedNetwork = settings.allowUnauthenticatedNetwork
            options.allowPlaintextNetwork = settings.allowPlaintextNetwork
            options.tls = tls
            try herald.register(PrometheusExporter(options: options))
        }
        if Systemd.listening { try herald.register(SystemdStatus()) }
        if let deliveryMetrics = settings.deliveryMetrics, settings.isEnabled(JSONLExport.Settings.section) {
            try herald.register(
                JSONLExport(options: .init(path: deliveryMetrics), installationID: { [weak herald] in try? await herald?.installationID() })
            )
        }
        if let execFetch = settings.execFetchOptions, settings.isEnabled(ExecFetchWorker.Settings.section) {
            let worker = ExecFetchWorker(options: execFetch)
            try herald.register(worker)
            reload.add(worker)
            settings.warnIfExecFetchOutlastsDeadline(logger: logger)
        }
        if let url = settings.tokenWebhookURL, settings.isEnabled(TokenWebhook.Settings.section) {
            let secret = try settings.tokenWebhookSecretFile.map { try readSecret(file: $0, what: "token webhook secret file") }
            let options = TokenWebhook.Options(
                url: url, secret: secret, maximumAttempts: settings.tokenWebhookMaxAttempts, caFile: settings.tokenWebhookCA)
            let webhook = try TokenWebhook(options: options, herald: herald)
            try herald.register(webhook)
            reload.add(webhook)
        }
        // Dynamic plugins: all or none, refused with an error naming the file; the daemon never starts half-loaded.
        // Each gets its own plugin-settings section as its JSON configuration ({} without one).
        let specifications = settings.plugins.map { path in
            DynamicPlugin.Specification(path: path, configuration: settings.pluginSettings.last { $0.path == path }?.settings ?? [:])
        }
        for plugin in try DynamicPlugin.loadAll(specifications) {
            try herald.register(plugin)
            for category in plugin.categories { try herald.register(category: category) }
        }
        // The config file's categories win over a plugin's of the same identifier: the operator has the last word.
        for category in settings.categories { try herald.register(category: category) }
        // mutable-content notifications with an https image (FCM's notification.image) get it attached.
        if settings.isEnabled(ImageAttachment.Settings.section) {
            try herald.register(
                ImageAttachment(
                    options: .init(
                        directory: "\(settings.dataDirectory)/attachments", maximumBytes: settings.imageAttachmentMaxBytes,
                        caFile: settings.imageAttachmentCA)))
        }
        switch settings.presenter {
        case "desktop" where settings.isEnabled(DesktopPresenter.Settings.section):
            try herald.register(DesktopPresenter(options: .init(configuration: settings.configuration)))
        case "none": try herald.register(SilentPresenter())
        default: break  // log: registered once the embedder's plugins are, unless one of them presents (`run()`)
        }
        if let distributor {
            try herald.register(distributor)
            // Its endpoints are reached through the fleet's gateway too; stopped before it (plugins stop in reverse).
            if let nats, !settings.gateway { try herald.register(NATSWebPushRelay(options: nats, endpoint: distributor)) }
        }
        if settings.echo, settings.isEnabled(EchoHandler.Settings.section) {
            try herald.register(EchoHandler(installationID: { [weak herald] in try? await herald?.installationID() }))
        }
        return httpReceiver
    }
}

/// `--presenter none`: notifications are shown nowhere, not even logged. Synchronous: it never suspends.
private final class SilentPresenter: SynchronousPresenter {
    var descriptor: PluginDescriptor { PluginDescriptor(name: "none", summary: "shows notifications nowhere") }
}

/// The service manager's notification protocol (`sd_notify(3)`): nothing happens unless systemd started the daemon
/// with `Type=notify` (it sets `NOTIFY_SOCKET`).
enum Systemd {
    /// Sends `state` through libsystemd, which waits while the service manager's queue of notifications is full:
    /// for the start and reloads (`READY=1`, `RELOADING=1`), which happen off the loop and which the service manager
    /// must not miss. (`STOPPING=1` is sent without waiting: a stop must end even if nobody reads.)
    static func notify(_ state: String) {
        _ = sd_notify(0, state)
    }

    /// Sends `state` without waiting, for what the loop sends (the watchdog's pings, the status line): a service
    /// manager slow to read its socket fills the socket's queue (`net.unix.max_dgram_qlen` datagrams, 10 by default)
    /// and `sd_notify` would then hold the loop in `sendmsg` until it reads — every connection of the daemon with
    /// it. libsystemd has no call that does not wait, so this sends the documented datagram itself: `state` to the
    /// `AF_UNIX` socket `NOTIFY_SOCKET` names, a path or an abstract name written with a leading "@" (another kind of
    /// address, such as `vsock:`, goes through libsystemd). Returns whether it was sent; `true` when nobody listens.
    @discardableResult
    static func notifyWithoutWaiting(_ state: String) -> Bool {
        guard let variable = getenv("NOTIFY_SOCKET"), variable.pointee != 0 else { return true }
        var name = Array(String(cString: variable).utf8)
        guard name[0] == UInt8(ascii: "/") || name[0] == UInt8(ascii: "@") else {
            notify(state)
            return true
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let abstract = name[0] == UInt8(ascii: "@")
        if abstract { name[0] = 0 }
        // A path keeps room for its terminating zero (the rest of `address` is zero already); an abstract name has none.
        guard name.count + (abstract ? 0 : 1) <= MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count + (abstract ? 0 : 1))
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let sent = Array(state.utf8).withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        return sent == state.utf8.count
    }

    /// Whether systemd (or anything standing in for it) takes notifications: `NOTIFY_SOCKET` is set.
    static var listening: Bool { getenv("NOTIFY_SOCKET").map { $0.pointee != 0 } ?? false }

    /// The listening sockets systemd passed (socket activation: `LISTEN_FDS`, checked against `LISTEN_PID`), offered
    /// to the listeners whose addresses they have; the variables are then unset, so children never see them.
    /// Returns the sockets' addresses, for the log.
    static func offerInheritedSockets() -> [SocketAddress] {
        let count = sd_listen_fds(1)
        guard count > 0 else { return [] }
        return (0..<count).compactMap { InheritedSockets.offer(SD_LISTEN_FDS_START + $0) }
    }

    /// With `WatchdogSec=` set (systemd passes `WATCHDOG_USEC`), pings `WATCHDOG=1` from the event loop at half
    /// the interval, so a stuck loop — not just a live process — is what systemd notices. A ping systemd has no room
    /// for is dropped: the next one follows half an interval later.
    static func startWatchdog(on loop: EventLoop) -> RepeatedTask? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        let half = Duration.microseconds(Int64(microseconds / 2))
        return loop.scheduleRepeatedTask(initialDelay: .zero, delay: half) { _ in notifyWithoutWaiting("WATCHDOG=1") }
    }
}

/// The bearer secret from `--auth-token-file` or `HERALD_AUTH_TOKEN` (the file wins); surrounding
/// whitespace, such as a trailing newline, is not part of it.
package enum BearerSecret {
    /// The secret; `environment` is the process's unless given.
    package static func load(file: String?, environment: [String: String]? = nil) throws -> String? {
        if let file { return try readSecret(file: file, what: "auth token file") }
        if let value = environment.map({ $0["HERALD_AUTH_TOKEN"] }) ?? getenv("HERALD_AUTH_TOKEN").map({ String(cString: $0) }) {
            let secret = trimmed(value)
            return secret.isEmpty ? nil : secret
        }
        return nil
    }
}

/// A secret kept in a file (the bearer secret, the NATS token): its contents without surrounding whitespace. The
/// secret is never part of an error.
func readSecret(file: String, what: String) throws -> String {
    guard let contents = readWholeFile(file) else {
        throw CommandFailure(message: "herald: cannot read the \(what) \(file): \(String(cString: strerror(errno)))")
    }
    let secret = trimmed(String(decoding: contents, as: UTF8.self))
    guard !secret.isEmpty else { throw CommandFailure(message: "herald: the \(what) \(file) is empty") }
    return secret
}

/// `text` without leading and trailing spaces, tabs and line breaks.
func trimmed(_ text: String) -> String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
    return String(text.drop(while: isSpace).reversed().drop(while: isSpace).reversed())
}

/// A failure the command reports as one line on standard error (no usage text) with exit status 1.
package struct CommandFailure: Error, CustomStringConvertible {
    package let message: String
    package var description: String { message }

    package init(message: String) { self.message = message }
}

/// Writes `text` and a newline to file descriptor `fd`.
package func writeLine(_ text: String, to fd: Int32) {
    let bytes = Array((text + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}

/// Writes `text` and a newline to standard output at once (unbuffered, so a parent reading a pipe sees it now).
package func writeLine(_ text: String) {
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
