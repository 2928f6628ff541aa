import Glibc
public import Herald
import HeraldDBus
import HeraldEventLoop
import Logging

/// Shows notifications on the Linux desktop through the freedesktop notification service
/// (`org.freedesktop.Notifications` on the session bus: GNOME Shell, KDE Plasma, dunst, mako, xfce4-notifyd), and
/// brings what the person does with them back as responses — the Linux counterpart of what an Apple device does
/// with `UNNotificationPresentationOptions` and `UNNotificationResponse`.
///
/// A notification pops up when `willPresent` answers `.banner` (or `.alert`); `.sound` plays its sound, `.badge`
/// sets the launcher count (`com.canonical.Unity.LauncherEntry`, with ``Options/desktopEntry``). Clicking it
/// answers with `NotificationResponse/defaultActionIdentifier`, a button with its action's identifier, an inline
/// reply (KDE) with the text-input action and its text, and closing it — only for a category with
/// `NotificationCategory/Options/customDismissAction` — with `NotificationResponse/dismissActionIdentifier`.
/// The bus records the open and dismiss analytics events, as for an Apple app.
///
/// Without a bus or a notification service, it warns once and logs each notification (as Herald does without a
/// presenter), keeps the last ``Options/pendingLimit`` of them, and presents those when a service appears; a lost
/// bus connection is reconnected with backoff. Everything runs on the Herald loop: sd-bus from libsystemd, polled
/// by libuv.
public final class DesktopPresenter: Presenter, @unchecked Sendable {
    // @unchecked Sendable: `session` is set under a lock; everything it holds lives on the loop thread.

    /// Settings of the presenter.
    public struct Options: Sendable, Hashable {
        /// The session bus address (`unix:path=...`). `nil`: `DBUS_SESSION_BUS_ADDRESS`, else
        /// `unix:path=$XDG_RUNTIME_DIR/bus`.
        public var busAddress: String?
        /// The application name notifications show (`app_name`).
        public var appName: String = "Herald"
        /// The application icon: a themed icon name or a `file://` URL; empty for none.
        public var appIcon: String = ""
        /// The application's desktop entry (its `.desktop` file name without the extension): the `desktop-entry`
        /// hint, and the launcher whose badge `.badge` sets. `nil`: no hint, no badge.
        public var desktopEntry: String?
        /// The title of the default action (clicking the notification), for servers that show it.
        public var defaultActionTitle: String = "Open"
        /// The first wait before reconnecting to a lost bus; doubled after each failed attempt.
        public var reconnectDelay: Duration = .milliseconds(250)
        /// The longest wait between reconnection attempts.
        public var maxReconnectDelay: Duration = .seconds(30)
        /// How long a call to the notification service may take.
        public var callTimeout: Duration = .seconds(10)
        /// How many notifications are kept while no service is there, to present when one appears (the oldest
        /// go first).
        public var pendingLimit: Int = 32
        /// How many shown notifications are remembered for their responses (the oldest are forgotten first).
        public var rememberedNotifications: Int = 1024

        public init() {}
    }

    private let options: Options
    private let session = Locked<PresenterSession?>(nil)

    public init(options: Options = Options()) {
        self.options = options
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "desktop", summary: "shows notifications through org.freedesktop.Notifications on the session bus")
    }

    public func start(_ context: PluginContext) async throws {
        let session = PresenterSession(options: options, context: context)
        self.session.withLock { $0 = session }
        try await context.loop.submit { session.connect() }
    }

    public func stop() async {
        guard let session = session.withLock({ $0 }) else { return }
        try? await session.loop.submit { session.stop() }
        self.session.withLock { $0 = nil }
    }

    public func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        guard let session = session.withLock({ $0 }) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let job = PresenterSession.Job(message: message, options: options, actions: actions, continuation: continuation)
            if session.loop.inEventLoop {
                session.enqueue(job)
            } else {
                session.loop.execute { session.enqueue(job) }
            }
        }
    }

    /// What the presenter is doing now, for tests and logs: `disconnected`, `connecting`, `no-service`,
    /// `resolving` or `ready`. Call from any thread.
    public func state() async -> String {
        guard let session = session.withLock({ $0 }) else { return "stopped" }
        return (try? await session.loop.submit { session.phase.name }) ?? "stopped"
    }
}

/// The presenter while it runs: the bus connection, the service's state and the notifications it shows. Used on
/// the loop thread only.
final class PresenterSession: @unchecked Sendable {
    // @unchecked Sendable: every member is used on the loop thread only.

    static let service = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"
    static let busService = "org.freedesktop.DBus"
    static let busPath = "/org/freedesktop/DBus"

    struct Job: Sendable {
        var message: RemoteMessage
        var options: PresentationOptions
        var actions: [NotificationAction]
        /// Resumed once the notification is shown, logged or refused.
        var continuation: CheckedContinuation<Void, Never>?

        mutating func finish() {
            continuation?.resume()
            continuation = nil
        }
    }

    enum Phase {
        case disconnected
        /// Connected, asking who owns the service.
        case connecting
        case noService
        /// A service is there (`owner`, or activatable when `nil`); asking for its capabilities.
        case resolving(owner: String?)
        case ready(owner: String?, capabilities: Set<String>)

        var name: String {
            switch self {
            case .disconnected: "disconnected"
            case .connecting: "connecting"
            case .noService: "no-service"
            case .resolving: "resolving"
            case .ready: "ready"
            }
        }
    }

    /// A shown notification, by the server's ID.
    struct Shown {
        var messageID: String
        var replacementKey: String?
        var textActionIdentifier: String?
        var reportsDismissal: Bool
        var answered = false
    }

    let loop: EventLoop
    private let options: DesktopPresenter.Options
    private let bus: MessageBus
    private let logger: Logger
    private let categories: [String: NotificationCategory]

    private(set) var phase = Phase.disconnected
    private var connection: DBusConnection?
    private var pending: [Job] = []
    private var shown: [UInt32: Shown] = [:]
    private var shownOrder: [UInt32] = []
    private var replacements: [String: UInt32] = [:]
    /// Replacement keys with a `Notify` in flight, and the notifications of that key waiting for its ID.
    private var waitingForKey: [String: [Job]] = [:]
    private var reconnectDelay: Duration
    private var reconnectTask: ScheduledTask?
    private var warnedNoBus = false
    private var warnedNoService = false
    private var stopped = false

    init(options: DesktopPresenter.Options, context: PluginContext) {
        self.options = options
        self.loop = context.loop
        self.bus = context.bus
        self.logger = context.logger
        self.categories = context.categories
        self.reconnectDelay = options.reconnectDelay
    }

    // MARK: Connection

    private var address: String? { sessionBusAddress(configured: options.busAddress) }

    func connect() {
        reconnectTask = nil
        guard !stopped, connection == nil else { return }
        guard let address else {
            busUnavailable("no session bus address (DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are not set)")
            return
        }
        let connection: DBusConnection
        do {
            connection = try DBusConnection(loop: loop, address: address)
        } catch {
            busUnavailable("\(error)")
            return
        }
        self.connection = connection
        phase = .connecting
        connection.onLost = { [unowned self] reason in connectionLost(reason) }
        connection.onSignal = { [unowned self] signal in didReceive(signal) }
        connection.addMatch(
            "type='signal',sender='\(Self.busService)',path='\(Self.busPath)',interface='\(Self.busService)',member='NameOwnerChanged',arg0='\(Self.service)'"
        )
        connection.addMatch("type='signal',path='\(Self.path)',interface='\(Self.service)'")
        callBus("GetNameOwner", [.string(Self.service)]) { [unowned self] result in
            switch result {
            case .success(let reply):
                connected()
                // A change of owner signalled before this answer was read is as new (the match came first).
                guard case .connecting = phase else { return }
                serviceAppeared(owner: reply.string())
            case .failure(let error) where error.name == "org.freedesktop.DBus.Error.NameHasNoOwner":
                connected()
                guard case .connecting = phase else { return }
                lookForActivatableService()
            case .failure(let error):
                // Neither an owner nor a clear "none" (no answer in time, say): left so, the presenter would wait in
                // `connecting` until the service's name changed hands, keeping what arrives. Ask again, on a new
                // connection, after the backoff.
                connection.nextTurnIfOpen { [self] in
                    guard case .connecting = phase else { return }
                    logger.debug("asking for the notification service failed; asking again", metadata: ["error": "\(error)"])
                    askAgainLater()
                }
            }
        }
    }

    /// Drops the connection and connects again after the backoff; what is kept stays kept.
    private func askAgainLater() {
        guard !stopped else { return }
        connection?.onLost = { _ in }
        connection?.close()
        connection = nil
        phase = .disconnected
        scheduleReconnect()
    }

    private func connected() {
        if warnedNoBus { logger.info("connected to the session bus", metadata: ["address": "\(connection?.address ?? "")"]) }
        warnedNoBus = false
        reconnectDelay = options.reconnectDelay
    }

    /// No service runs now; one the bus starts on demand counts as there.
    private func lookForActivatableService() {
        callBus("ListActivatableNames", []) { [unowned self] result in
            // A service that took the name while the bus was asked (its NameOwnerChanged came first) is there,
            // whatever this answer says: it must not be taken back.
            guard case .connecting = phase else { return }
            switch result {
            case .success(let reply) where reply.stringArray()?.contains(Self.service) == true: serviceAppeared(owner: nil)
            case .success: serviceAbsent()
            case .failure:
                connection?.nextTurnIfOpen { [self] in
                    guard case .connecting = phase else { return }
                    serviceAbsent()
                }
            }
        }
    }

    private func callBus(_ member: String, _ arguments: [DBusValue], reply: @escaping DBusConnection.Reply) {
        guard let connection else { return reply(.failure(.disconnected)) }
        connection.call(
            destination: Self.busService, path: Self.busPath, interface: Self.busService, member: member, arguments: arguments,
            timeout: options.callTimeout, reply: reply)
    }

    private func callService(_ member: String, _ arguments: [DBusValue], reply: @escaping DBusConnection.Reply) {
        guard let connection else { return reply(.failure(.disconnected)) }
        connection.call(
            destination: Self.service, path: Self.path, interface: Self.service, member: member, arguments: arguments,
            timeout: options.callTimeout, reply: reply)
    }

    private func busUnavailable(_ reason: String) {
        guard !stopped else { return }
        phase = .disconnected
        if !warnedNoBus {
            warnedNoBus = true
            logger.warning(
                "no session bus: notifications go to the log until it is there; trying again with backoff",
                metadata: ["reason": "\(reason)"])
        } else {
            logger.debug("session bus still unavailable", metadata: ["reason": "\(reason)"])
        }
        logPending()
        scheduleReconnect()
    }

    private func connectionLost(_ reason: String) {
        connection = nil
        forgetShown()
        busUnavailable("connection lost: \(reason)")
    }

    private func scheduleReconnect() {
        guard !stopped, reconnectTask == nil else { return }
        let delay = reconnectDelay
        reconnectDelay = min(reconnectDelay * 2, options.maxReconnectDelay)
        reconnectTask = loop.scheduleTask(in: delay) { [self] in connect() }
    }

    func stop() {
        stopped = true
        _ = reconnectTask?.cancel()
        reconnectTask = nil
        connection?.onLost = { _ in }
        connection?.close()
        connection = nil
        phase = .disconnected
        for index in pending.indices { pending[index].finish() }
        pending = []
        for var job in waitingForKey.values.joined() { job.finish() }
        waitingForKey = [:]
    }

    // MARK: The service

    private func serviceAppeared(owner: String?) {
        phase = .resolving(owner: owner)
        callService("GetCapabilities", []) { [unowned self] result in
            guard case .resolving(let current) = phase, current == owner else { return }
            switch result {
            case .success(let reply):
                let capabilities = Set(reply.stringArray() ?? [])
                phase = .ready(owner: owner, capabilities: capabilities)
                if warnedNoService { logger.info("a notification service is on the session bus; presenting again") }
                warnedNoService = false
                logger.debug("notification service ready", metadata: ["capabilities": "\(capabilities.sorted())"])
                presentPending()
            case .failure(let error):
                connection?.nextTurnIfOpen { [self] in
                    guard case .resolving(let current) = phase, current == owner else { return }
                    logger.debug("the notification service did not answer GetCapabilities", metadata: ["error": "\(error)"])
                    serviceAbsent()
                }
            }
        }
    }

    private func serviceAbsent() {
        guard !stopped else { return }
        phase = .noService
        forgetShown()
        if !warnedNoService {
            warnedNoService = true
            logger.warning(
                "no notification service (\(Self.service)) on the session bus: notifications go to the log until one appears")
        }
        logPending()
    }

    private func didReceive(_ signal: DBusMessage) {
        guard let member = signal.member else { return }
        if signal.interface == Self.busService, member == "NameOwnerChanged" {
            let name = signal.string()
            _ = signal.string()  // the old owner
            guard name == Self.service, let newOwner = signal.string() else { return }
            if newOwner.isEmpty {
                if case .connecting = phase { return }
                serviceAbsent()
            } else {
                forgetShown()
                serviceAppeared(owner: newOwner)
            }
            return
        }
        guard signal.interface == Self.service else { return }
        switch phase {
        case .ready(let owner, _) where owner == nil || owner == signal.sender: break
        case .resolving(let owner) where owner == nil || owner == signal.sender: break
        default: return
        }
        switch member {
        case "ActionInvoked":
            guard let id = signal.uint32(), let key = signal.string() else { return }
            actionInvoked(id: id, key: key)
        case "NotificationReplied":
            guard let id = signal.uint32(), let text = signal.string() else { return }
            replied(id: id, text: text)
        case "NotificationClosed":
            guard let id = signal.uint32(), let reason = signal.uint32() else { return }
            closed(id: id, reason: reason)
        default:
            break
        }
    }

    // MARK: Presenting

    func enqueue(_ job: Job) {
        var job = job
        guard !stopped else { return job.finish() }
        if job.options.contains(.badge), let badge = job.message.aps.badge { setBadge(badge) }
        guard NotifyRequest.popsUp(job.message, options: job.options) else { return job.finish() }
        dispatch(job)
    }

    /// Shows `job` now, keeps it until the service is known, or logs and keeps it while there is none.
    private func dispatch(_ job: Job) {
        var job = job
        guard !stopped else { return job.finish() }
        switch phase {
        case .ready(_, let capabilities): notify(job, capabilities: capabilities)
        case .connecting, .resolving: keep(job)
        case .disconnected, .noService:
            log(job.message, options: job.options)
            job.finish()
            keep(job)
        }
    }

    private func keep(_ job: Job) {
        pending.append(job)
        while pending.count > max(options.pendingLimit, 0) {
            var dropped = pending.removeFirst()
            if dropped.continuation != nil { log(dropped.message, options: dropped.options) }
            dropped.finish()
        }
    }

    private func logPending() {
        for index in pending.indices where pending[index].continuation != nil {
            log(pending[index].message, options: pending[index].options)
            pending[index].finish()
        }
    }

    private func presentPending() {
        let jobs = pending
        pending = []
        let now = Int64(time(nil))
        for job in jobs {
            var job = job
            if job.message.isExpired(atSeconds: now) {
                job.finish()
                continue
            }
            dispatch(job)
        }
    }

    /// The log line Herald writes for a notification when no presenter shows it.
    private func log(_ message: RemoteMessage, options: PresentationOptions) {
        logger.info(
            "notification",
            metadata: [
                "message_id": "\(message.messageID ?? "")", "title": "\(message.aps.alert?.title ?? "")",
                "body": "\(message.aps.alert?.body ?? "")", "options": "\(options)",
            ])
    }

    private func notify(_ job: Job, capabilities: Set<String>) {
        let request = NotifyRequest(
            message: job.message, options: job.options, actions: job.actions, capabilities: capabilities, settings: options)
        if let key = request.replacementKey {
            // The one before with this key is still on its way: its ID is what this one replaces.
            if waitingForKey[key] != nil {
                waitingForKey[key]?.append(job)
                return
            }
            waitingForKey[key] = []
        }
        let replaces = request.replacementKey.flatMap { replacements[$0] } ?? 0
        let category = job.message.aps.category.flatMap { categories[$0] }
        callService("Notify", request.arguments(replacesID: replaces)) { [unowned self] result in
            var job = job
            defer {
                if let key = request.replacementKey, let next = waitingForKey.removeValue(forKey: key) {
                    for job in next { dispatch(job) }
                }
            }
            switch result {
            case .success(let reply):
                if let id = reply.uint32(), let messageID = job.message.messageID {
                    remember(
                        id,
                        Shown(
                            messageID: messageID, replacementKey: request.replacementKey,
                            textActionIdentifier: request.textActionIdentifier,
                            reportsDismissal: category?.options.contains(.customDismissAction) == true))
                }
                job.finish()
            case .failure where stopped:
                job.finish()
            case .failure(let error) where error.isUnreachable:
                logger.debug("the notification service went away while presenting", metadata: ["error": "\(error)"])
                log(job.message, options: job.options)
                job.finish()
                keep(job)
            case .failure(let error):
                logger.warning(
                    "the notification service refused a notification",
                    metadata: ["message_id": "\(job.message.messageID ?? "")", "error": "\(error)"])
                log(job.message, options: job.options)
                job.finish()
            }
        }
    }

    private func remember(_ id: UInt32, _ notification: Shown) {
        if shown.updateValue(notification, forKey: id) == nil { shownOrder.append(id) }
        if let key = notification.replacementKey { replacements[key] = id }
        while shownOrder.count > max(options.rememberedNotifications, 1) {
            let oldest = shownOrder.removeFirst()
            if let forgotten = shown.removeValue(forKey: oldest), let key = forgotten.replacementKey, replacements[key] == oldest {
                replacements[key] = nil
            }
        }
    }

    private func forgetShown() {
        shown = [:]
        shownOrder = []
        replacements = [:]
    }

    /// `.badge`: the count on the application's launcher, as GNOME's and KDE's docks read it.
    private func setBadge(_ count: Int) {
        guard let entry = options.desktopEntry, !entry.isEmpty, let connection else { return }
        connection.emitSignal(
            path: "/com/canonical/unity/launcherentry/\(Self.launcherPathComponent(entry))", interface: "com.canonical.Unity.LauncherEntry",
            member: "Update",
            arguments: [
                .string("application://\(entry).desktop"),
                .dictionary([DBusEntry("count", .int64(Int64(count))), DBusEntry("count-visible", .boolean(count > 0))]),
            ])
    }

    /// An object path element for `entry`: letters and digits kept, everything else as `_` and its hex code.
    static func launcherPathComponent(_ entry: String) -> String {
        var component = ""
        for byte in entry.utf8 {
            if (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) {
                component.append(Character(Unicode.Scalar(byte)))
            } else {
                component += "_" + String(byte, radix: 16)
            }
        }
        return component
    }

    // MARK: Responses

    private func actionInvoked(id: UInt32, key: String) {
        guard var notification = shown[id], !notification.answered else { return }
        notification.answered = true
        shown[id] = notification
        if key == NotifyRequest.inlineReplyKey { return }
        respond(
            notification.messageID, action: key == NotifyRequest.defaultActionKey ? NotificationResponse.defaultActionIdentifier : key,
            text: nil)
    }

    private func replied(id: UInt32, text: String) {
        guard var notification = shown[id], let action = notification.textActionIdentifier else { return }
        notification.answered = true
        shown[id] = notification
        respond(notification.messageID, action: action, text: text)
    }

    private func closed(id: UInt32, reason: UInt32) {
        guard let notification = shown.removeValue(forKey: id) else { return }
        shownOrder.removeAll { $0 == id }
        if let key = notification.replacementKey, replacements[key] == id { replacements[key] = nil }
        // 2: dismissed by the user. Expiry (1) and CloseNotification (3) are no response, as on an Apple device.
        if reason == 2, notification.reportsDismissal, !notification.answered {
            respond(notification.messageID, action: NotificationResponse.dismissActionIdentifier, text: nil)
        }
    }

    private func respond(_ messageID: String, action: String, text: String?) {
        Task(executorPreference: loop.taskExecutor) { [bus, logger] in
            do {
                try await bus.respond(to: messageID, action: action, userText: text)
            } catch {
                logger.warning("a response could not be delivered", metadata: ["message_id": "\(messageID)", "error": "\(error)"])
            }
        }
    }
}
