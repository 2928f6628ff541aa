import Glibc
import Herald
import HeraldDBus
import HeraldHTTPReceiver
import HeraldSQLite
import Logging

/// The distributor's state and its bus connection, on the loop thread: the registrations by endpoint token, the
/// pushes waiting for their apps, the calls in flight.
final class DistributorEngine: @unchecked Sendable {
    // @unchecked Sendable: loop thread only; captured by the blocking pool's completions, which run on the loop.

    static let busService = "org.freedesktop.DBus"
    static let busPath = "/org/freedesktop/DBus"
    static let distributorPath = "/org/unifiedpush/Distributor"
    static let connectorPath = "/org/unifiedpush/Connector"
    static let succeeded = "REGISTRATION_SUCCEEDED"
    static let failed = "REGISTRATION_FAILED"

    let loop: EventLoop
    private let bus: MessageBus
    private let options: UnifiedPushDistributor.Options
    private let store: SQLiteStore
    private let logger: Logger
    /// The push service's origin, the `aud` of VAPID tokens: the endpoint URL's.
    private let audience: String

    private var registrations: [String: UnifiedPushRegistration] = [:]
    /// The pushes waiting, by endpoint token, oldest first.
    private var waiting: [String: [UnifiedPushMessage]] = [:]
    /// Pushes whose `Message` call is in flight.
    private var inFlight: Set<String> = []
    /// Endpoint tokens of Connector1 apps whose name the bus is being asked about.
    private var checkingOwner: Set<String> = []
    /// Pushes accepted and waiting for their commit, with their senders' answers; pushes to forget at the next one.
    private var adding: [(message: UnifiedPushMessage, answer: (WebPushAnswer) -> Void)] = []
    private var finishing: [String] = []
    private var committing = false
    /// Pushes offered at least once (a push with TTL 0 is dropped after its first attempt).
    private var attempted: Set<String> = []
    private var connection: DBusConnection?
    private(set) var ownsName = false
    /// Whether the refusal of the name was logged at `error` since the name was last Herald's.
    private var warnedNoName = false
    private var reconnectDelay: Duration
    private var reconnectTask: ScheduledTask?
    private var retryTask: ScheduledTask?
    /// Endpoints whose pushes are offered again soon, after a `Message` call the app failed or did not answer in time,
    /// and the wait before the next such offer (doubling from a second up to the retry interval, reset by a success).
    private var redeliveries: [String: ScheduledTask] = [:]
    private var redeliveryDelays: [String: Duration] = [:]
    private var stopped = false
    /// A stop under way: told once the calls in flight ended and the store has what they did; the bound on the wait.
    private var stopDone: (() -> Void)?
    private var stopDeadline: ScheduledTask?
    /// Told once no commit runs and none is queued.
    private var committedWaiters: [() -> Void] = []
    /// Told the endpoints served at every change.
    private var observers: [@Sendable ([WebPushRegistration]) -> Void] = []

    init(options: UnifiedPushDistributor.Options, store: SQLiteStore, context: PluginContext) {
        self.options = options
        self.store = store
        self.loop = context.loop
        self.bus = context.bus
        self.logger = context.logger
        self.reconnectDelay = options.reconnectDelay
        self.audience = VAPID.origin(of: options.endpointURL)
    }

    func load(registrations: [UnifiedPushRegistration], messages: [UnifiedPushMessage]) {
        for registration in registrations { self.registrations[registration.endpointToken] = registration }
        for message in messages { waiting[message.endpointToken, default: []].append(message) }
    }

    /// Calls `changed` with the endpoints served now and after every change.
    func observeEndpoints(_ changed: @escaping @Sendable ([WebPushRegistration]) -> Void) {
        observers.append(changed)
        changed(endpoints)
    }

    private var endpoints: [WebPushRegistration] {
        registrations.values.filter { !$0.dropped }.map { WebPushRegistration(token: $0.endpointToken, vapid: $0.vapid) }
    }

    private func endpointsChanged() {
        let endpoints = endpoints
        for observer in observers { observer(endpoints) }
    }

    // MARK: The bus

    private var address: String? { sessionBusAddress(configured: options.busAddress) }

    func connect() {
        reconnectTask = nil
        guard !stopped, connection == nil else { return }
        guard let address else { return unavailable("no session bus address (DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are not set)") }
        let connection: DBusConnection
        do {
            connection = try DBusConnection(loop: loop, address: address)
        } catch {
            return unavailable("\(error)")
        }
        self.connection = connection
        connection.onLost = { [unowned self] reason in
            forgetConnection()
            unavailable("connection lost: \(reason)")
        }
        connection.onSignal = { [unowned self] signal in nameOwnerChanged(signal) }
        connection.addObject(path: Self.distributorPath) { [unowned self] call in handle(call) }
        connection.addMatch("type='signal',sender='\(Self.busService)',path='\(Self.busPath)',member='NameOwnerChanged'")
        // DBUS_NAME_FLAG_DO_NOT_QUEUE (4): owned now, or refused.
        callBus("RequestName", [.string(options.serviceName), .uint32(4)]) { [unowned self] result in
            switch result {
            case .success(let reply) where reply.uint32() == 1 || reply.uint32() == 4:
                ownsName = true
                reconnectDelay = options.reconnectDelay
                warnedNoName = false
                logger.info("UnifiedPush distributor on the session bus", metadata: ["name": "\(options.serviceName)"])
                dropUnregistered()
                deliverAll()
            case .success:
                withoutName(
                    "another process owns the distributor's name on the bus: apps cannot register with Herald until it is free",
                    metadata: ["name": "\(options.serviceName)"])
            case .failure(let error):
                // Unless the connection was lost (that loss is the news, `onLost`, not this).
                connection.nextTurnIfOpen { [self] in
                    guard !stopped else { return }
                    withoutName(
                        "cannot own the distributor's name on the bus: apps cannot register with Herald until it can",
                        metadata: ["name": "\(options.serviceName)", "error": "\(error)"])
                }
            }
        }
        scheduleRetry()
    }

    /// The name was refused (another process owns it, the bus's policy, no answer in time): said once, at `error`
    /// (again at `debug`), then asked again on a new connection after the backoff, until the name is Herald's.
    private func withoutName(_ message: Logger.Message, metadata: Logger.Metadata) {
        guard !stopped else { return }
        if warnedNoName {
            logger.debug("\(message); asking again", metadata: metadata)
        } else {
            warnedNoName = true
            logger.error("\(message); asking again with backoff", metadata: metadata)
        }
        connection?.onLost = { _ in }
        connection?.close()
        forgetConnection()
        guard reconnectTask == nil else { return }
        let delay = reconnectDelay
        reconnectDelay = min(reconnectDelay * 2, options.maxReconnectDelay)
        reconnectTask = loop.scheduleTask(in: delay) { [self] in connect() }
    }

    /// What belonged to the connection that is gone (lost, or closed to ask for the name again).
    private func forgetConnection() {
        connection = nil
        ownsName = false
        inFlight = []
        checkingOwner = []
    }

    private func unavailable(_ reason: String) {
        guard !stopped else { return }
        logger.warning("no session bus for the UnifiedPush distributor; trying again with backoff", metadata: ["reason": "\(reason)"])
        guard reconnectTask == nil else { return }
        let delay = reconnectDelay
        reconnectDelay = min(reconnectDelay * 2, options.maxReconnectDelay)
        reconnectTask = loop.scheduleTask(in: delay) { [self] in connect() }
    }

    private func scheduleRetry() {
        guard !stopped, retryTask == nil else { return }
        retryTask = loop.scheduleTask(in: options.retryInterval) { [self] in
            retryTask = nil
            deliverAll()
            scheduleRetry()
        }
    }

    /// Stops offering pushes and lets what is under way end before closing the connection, so that a push the app
    /// takes now is written down as handed over rather than handed over again at the next start: the `Message` calls
    /// in flight are answered (or fail, or time out), the Connector1 calls sd-bus still queues are written to the
    /// bus, and the store commits what they did. `done` runs once all that is over; it takes at most the call
    /// timeout.
    func stop(done: @escaping () -> Void) {
        guard !stopped else { return whenCommitted(done) }
        stopped = true
        _ = reconnectTask?.cancel()
        reconnectTask = nil
        _ = retryTask?.cancel()
        retryTask = nil
        for task in redeliveries.values { _ = task.cancel() }
        redeliveries = [:]
        stopDone = done
        if connection != nil, !inFlight.isEmpty {
            logger.info("stopping once the Message calls in flight end", metadata: ["calls": "\(inFlight.count)"])
        }
        stopDeadline = loop.scheduleTask(in: options.callTimeout) { [self] in
            stopDeadline = nil
            closeForStop()
        }
        advanceStop()
    }

    /// A step of a stop: once no `Message` call is in flight, waits for sd-bus's queue to be written, then closes.
    private func advanceStop() {
        guard stopDone != nil else { return }
        guard let connection else { return closeForStop() }
        guard inFlight.isEmpty else { return }
        connection.whenWritten { [self] _ in closeForStop() }
    }

    private func closeForStop() {
        guard let done = stopDone else { return }
        stopDone = nil
        _ = stopDeadline?.cancel()
        stopDeadline = nil
        connection?.onLost = { _ in }
        connection?.close()
        connection = nil
        ownsName = false
        whenCommitted(done)
    }

    private func callBus(_ member: String, _ arguments: [DBusValue], reply: @escaping DBusConnection.Reply) {
        guard let connection else { return reply(.failure(.disconnected)) }
        connection.call(
            destination: Self.busService, path: Self.busPath, interface: Self.busService, member: member, arguments: arguments,
            timeout: options.callTimeout, reply: reply)
    }

    /// Calls `member` of the app's Connector (the interface of the registration's version).
    private func callConnector(
        _ registration: UnifiedPushRegistration, _ member: String, _ arguments: [DBusValue], reply: @escaping DBusConnection.Reply
    ) {
        guard let connection else { return reply(.failure(.disconnected)) }
        connection.call(
            destination: registration.service, path: Self.connectorPath, interface: "org.unifiedpush.Connector\(registration.version)",
            member: member, arguments: arguments, timeout: options.callTimeout, reply: reply)
    }

    /// An app's name got an owner: what waits for it is offered now.
    private func nameOwnerChanged(_ signal: DBusMessage) {
        guard signal.member == "NameOwnerChanged", let name = signal.string(), signal.string() != nil, let owner = signal.string(),
            !owner.isEmpty
        else { return }
        for (token, registration) in registrations where registration.service == name { deliver(endpointToken: token) }
    }

    // MARK: Distributor1 and Distributor2

    /// One call to `/org/unifiedpush/Distributor`; whether it is one of ours.
    private func handle(_ call: DBusIncomingCall) -> Bool {
        let message = call.message
        guard let sender = message.sender else { return false }
        switch (message.interface, message.member) {
        case ("org.unifiedpush.Distributor1", "Register"):
            guard let service = message.string(), let token = message.string(), let description = message.string() else {
                call.fail(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "Register takes (serviceName, token, description)")
                return true
            }
            register(service: service, token: token, description: description, version: 1, vapid: nil, sender: sender) { [self] failure in
                call.reply([.string(failure == nil ? Self.succeeded : Self.failed), .string(failure ?? "")])
                connection?.flush()
            }
        case ("org.unifiedpush.Distributor2", "Register"):
            guard let arguments = message.dictionary() else {
                call.fail(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "Register takes an a{sv} dictionary")
                return true
            }
            register(
                service: arguments.string("service") ?? "", token: arguments.string("token") ?? "",
                description: arguments.string("description") ?? "", version: 2, vapid: arguments.string("vapid"), sender: sender
            ) { [self] failure in
                var result = [DBusEntry("success", .string(failure == nil ? Self.succeeded : Self.failed))]
                if let failure { result.append(DBusEntry("reason", .string(failure))) }
                call.reply([.dictionary(result)])
                connection?.flush()
            }
        case ("org.unifiedpush.Distributor1", "Unregister"):
            guard let token = message.string() else {
                call.fail(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "Unregister takes (token)")
                return true
            }
            unregister(token: token, service: nil, sender: sender) { [self] in
                call.reply([])
                connection?.flush()
            }
        case ("org.unifiedpush.Distributor2", "Unregister"):
            guard let arguments = message.dictionary(), let token = arguments.string("token") else {
                call.fail(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "Unregister takes an a{sv} dictionary with a token")
                return true
            }
            unregister(token: token, service: arguments.string("service"), sender: sender) { [self] in
                call.reply([.dictionary([])])
                connection?.flush()
            }
        default:
            return false
        }
        return true
    }

    /// Registers (or finds again) `service`'s registration `token`; `done` gets `nil` or why it failed (one of the
    /// spec's reasons and a sentence).
    private func register(
        service: String, token: String, description: String, version: Int, vapid: String?, sender: String,
        done: @escaping (String?) -> Void
    ) {
        guard !service.isEmpty, !token.isEmpty else { return done("INTERNAL_ERROR: a registration needs a service name and a token") }
        if let vapid, !VAPID.isPublicKey(vapid) {
            return done("VAPID_REQUIRED: the vapid key is not a P-256 public key (the uncompressed point, base64url)")
        }
        ownerCheck(service: service, sender: sender) { [self] owned in
            guard owned else { return done("UNAUTHORIZED: the caller does not own the service name \(service)") }
            var registration =
                registrations.values.first { $0.service == service && $0.token == token && !$0.dropped }
                ?? UnifiedPushRegistration(
                    endpointToken: Self.randomToken(), service: service, token: token, description: description, version: version,
                    vapid: vapid, registeredAt: Int64(time(nil)) * 1000)
            registration.description = description
            registration.version = version
            registration.vapid = vapid
            let saved = registration
            let store = store
            let done = Unchecked(done)
            loop.offload {
                try store.saveUnifiedPushRegistration(saved)
            } then: { [self] result in
                switch result {
                case .success:
                    registrations[saved.endpointToken] = saved
                    endpointsChanged()
                    done.value(nil)
                    logger.info(
                        "UnifiedPush app registered",
                        metadata: ["service": "\(service)", "endpoint_token": "\(saved.endpointToken)", "version": "\(version)"])
                    newEndpoint(saved)
                case .failure(let error):
                    logger.error("cannot save a UnifiedPush registration", metadata: ["error": "\(error)"])
                    done.value("INTERNAL_ERROR: the registration could not be saved")
                }
            }
        }
    }

    /// Whether `sender` (a unique name) owns `service`.
    private func ownerCheck(service: String, sender: String, _ done: @escaping (Bool) -> Void) {
        callBus("GetNameOwner", [.string(service)]) { result in
            if case .success(let reply) = result { done(reply.string() == sender) } else { done(false) }
        }
    }

    private func newEndpoint(_ registration: UnifiedPushRegistration) {
        let endpoint = options.endpointURL + registration.endpointToken
        let arguments: [DBusValue] =
            registration.version == 1
            ? [.string(registration.token), .string(endpoint)]
            : [.dictionary([DBusEntry("token", .string(registration.token)), DBusEntry("endpoint", .string(endpoint))])]
        callConnector(registration, "NewEndpoint", arguments) { [self] result in
            if case .failure(let error) = result, !stopped, error.name != "org.freedesktop.DBus.Error.NoReply" {
                logger.warning(
                    "the app did not take its new endpoint", metadata: ["service": "\(registration.service)", "error": "\(error)"])
            }
        }
        deliver(endpointToken: registration.endpointToken)
    }

    /// Drops the registration `token` of the app that calls (of `service` when given, which the caller must own).
    private func unregister(token: String, service: String?, sender: String, done: @escaping () -> Void) {
        let candidates = registrations.values.filter { $0.token == token && (service == nil || $0.service == service) }
        unregister(candidates[...], sender: sender, done: done)
    }

    /// Drops the first of `candidates` whose service `sender` owns; none: nothing changes (an app cannot drop
    /// another's registration).
    private func unregister(_ candidates: ArraySlice<UnifiedPushRegistration>, sender: String, done: @escaping () -> Void) {
        guard let registration = candidates.first else {
            logger.debug("Unregister of no registration of the caller's; ignored", metadata: ["sender": "\(sender)"])
            return done()
        }
        ownerCheck(service: registration.service, sender: sender) { [self] owned in
            guard owned else { return unregister(candidates.dropFirst(), sender: sender, done: done) }
            drop(registration, done: done)
        }
    }

    /// Deletes `registration` (and its waiting pushes), then tells its app `Unregistered`.
    private func drop(_ registration: UnifiedPushRegistration, done: @escaping () -> Void = {}) {
        let store = store
        let endpointToken = registration.endpointToken
        let done = Unchecked(done)
        registrations[endpointToken] = nil
        for message in waiting[endpointToken] ?? [] {
            record(.messageDropped, message, service: registration.service, reason: .unregistered)
        }
        waiting[endpointToken] = nil
        endpointsChanged()
        loop.offload {
            try store.deleteUnifiedPushRegistration(endpointToken: endpointToken)
        } then: { [self] result in
            if case .failure(let error) = result {
                logger.error("cannot delete a UnifiedPush registration", metadata: ["error": "\(error)"])
            }
            done.value()
            logger.info(
                "UnifiedPush app unregistered", metadata: ["service": "\(registration.service)", "endpoint_token": "\(endpointToken)"])
            let arguments: [DBusValue] =
                registration.version == 1 ? [.string(registration.token)] : [.dictionary([DBusEntry("token", .string(registration.token))])]
            callConnector(registration, "Unregistered", arguments) { _ in }
        }
    }

    /// Registrations `herald up unregister` dropped while the daemon was stopped: their apps are told now.
    private func dropUnregistered() {
        for registration in registrations.values where registration.dropped { drop(registration) }
    }

    // MARK: Pushes

    func receive(_ push: WebPush, answer: @escaping (WebPushAnswer) -> Void) {
        guard let registration = registrations[push.token], !registration.dropped else {
            refused(.unregistered, detail: "unknown or unregistered endpoint")
            return answer(.notFound)
        }
        // A push passed on by the fleet's gateway, which answered its sender with this ID: kept once.
        if let id = push.messageID,
            waiting[registration.endpointToken]?.contains(where: { $0.messageID == id }) == true
                || adding.contains(where: { $0.message.messageID == id })
        {
            return answer(.created(messageID: id))
        }
        if let key = registration.vapid, !push.authorized {
            do {
                try VAPID.verify(authorization: push.authorization, key: key, audience: audience, now: Int64(time(nil)))
            } catch {
                refused(.invalid, detail: error.description, service: registration.service)
                return answer(.refused(status: error.status, reason: error.description))
            }
        }
        let count =
            (waiting[registration.endpointToken]?.count ?? 0) + adding.count { $0.message.endpointToken == registration.endpointToken }
        guard count < options.maximumWaitingPerEndpoint else {
            refused(.rejectedBackpressure, detail: "too many pushes wait for the app", service: registration.service)
            return answer(
                .refused(status: 429, reason: "\(count) pushes already wait for this endpoint's app; try again once it took some."))
        }
        let now = Self.now()
        let message = UnifiedPushMessage(
            messageID: push.messageID ?? Self.randomToken(), endpointToken: registration.endpointToken, body: push.body, topic: push.topic,
            urgency: push.urgency, expiresAt: now + push.ttl * 1000, receivedAt: now)
        adding.append((message, answer))
        commit()
    }

    /// Writes what is queued (pushes to keep, pushes to forget) in one transaction, on the blocking pool; what is
    /// queued meanwhile goes in the next one, started as this one ends. The senders of the pushes kept are answered
    /// once their transaction is committed.
    private func commit() {
        guard !committing, !adding.isEmpty || !finishing.isEmpty else {
            if !committing, !committedWaiters.isEmpty {
                let waiters = committedWaiters
                committedWaiters = []
                for waiter in waiters { waiter() }
            }
            return
        }
        committing = true
        let batch = Unchecked(adding)
        let messages = adding.map(\.message)
        let finished = finishing
        adding = []
        finishing = []
        let store = store
        loop.offload {
            try store.commitUnifiedPush(adding: messages, finishing: finished, now: Self.now())
        } then: { [self] result in
            committing = false
            switch result {
            case .success(let outcomes):
                for ((message, answer), outcome) in zip(batch.value, outcomes) {
                    let replaced: [String]
                    switch outcome {
                    case .kept(let ids): replaced = ids
                    case .alreadySeen:
                        // Offered again after it was dealt with (JetStream redelivering what this instance took just
                        // before its acknowledgement got through): kept once, handed over once.
                        logger.debug(
                            "a push offered again was already handed over; not kept again", metadata: ["id": "\(message.messageID)"])
                        answer(.created(messageID: message.messageID))
                        continue
                    case .unregistered: replaced = []
                    }
                    guard outcome != .unregistered, let registration = registrations[message.endpointToken] else {
                        // Unregistered while the push waited for its commit.
                        refused(.unregistered, detail: "endpoint unregistered while the push was being stored")
                        answer(.notFound)
                        continue
                    }
                    record(.notificationReceive, message, service: registration.service)
                    if !replaced.isEmpty {
                        for old in waiting[message.endpointToken] ?? [] where replaced.contains(old.messageID) {
                            record(.messageDropped, old, service: registration.service, reason: .collapsed)
                        }
                        waiting[message.endpointToken]?.removeAll { replaced.contains($0.messageID) }
                    }
                    waiting[message.endpointToken, default: []].append(message)
                    answer(.created(messageID: message.messageID))
                }
                for token in Set(messages.map(\.endpointToken)) { deliver(endpointToken: token) }
            case .failure(let error):
                logger.error("cannot write UnifiedPush messages to the store", metadata: ["error": "\(error)"])
                for (message, answer) in batch.value {
                    record(
                        .messageDropped, message, service: registrations[message.endpointToken]?.service, reason: .storeFailure,
                        detail: "\(error)")
                    answer(.refused(status: 503, reason: "The push could not be kept; try again later."))
                }
            // Pushes handed over but not forgotten are offered again after a restart, with their IDs.
            }
            commit()
        }
    }

    /// Runs `body` once no commit runs and none is queued (at once when so).
    private func whenCommitted(_ body: @escaping () -> Void) {
        committedWaiters.append(body)
        commit()
    }

    private func deliverAll() {
        for token in waiting.keys { deliver(endpointToken: token) }
    }

    /// Offers the waiting pushes of `endpointToken` to its app; expired ones are forgotten.
    private func deliver(endpointToken: String) {
        guard !stopped, ownsName, let registration = registrations[endpointToken], !registration.dropped,
            let messages = waiting[endpointToken]
        else {
            return
        }
        if registration.version == 1 { return deliverWithoutReply(registration) }
        let now = Self.now()
        var expired: [String] = []
        var calls = messages.count { inFlight.contains($0.messageID) }
        for message in messages where !inFlight.contains(message.messageID) {
            guard calls < options.maximumCallsInFlight else { break }
            // sd-bus may answer earlier calls while this loop makes its own (a reply read while a call is sent): a
            // push of this copy of the list may have been handed over and forgotten meanwhile.
            guard waiting[endpointToken]?.contains(where: { $0.messageID == message.messageID }) == true else { continue }
            if hasExpired(message, now: now) {
                expired.append(message.messageID)
                record(.messageDropped, message, service: registration.service, reason: .expired)
                continue
            }
            inFlight.insert(message.messageID)
            attempted.insert(message.messageID)
            calls += 1
            let arguments: [DBusValue] = [
                .dictionary([
                    DBusEntry("token", .string(registration.token)), DBusEntry("message", .bytes(message.body)),
                    DBusEntry("id", .string(message.messageID)),
                ])
            ]
            callConnector(registration, "Message", arguments) { [self] result in
                inFlight.remove(message.messageID)
                // A stop waits for the calls in flight (this one's push finished first, below).
                defer { advanceStop() }
                switch result {
                case .success:
                    redeliveryDelays[endpointToken] = nil
                    delivered(message, service: registration.service)
                    // The next waiting push takes its place (on the loop's next turn: this may run inside a call).
                    loop.execute { [self] in deliver(endpointToken: endpointToken) }
                case .failure(let error):
                    let away = Self.appAway(error)
                    logger.log(
                        level: away ? .debug : .notice, "the app did not take a push; it waits",
                        metadata: ["service": "\(registration.service)", "error": "\(error)"])
                    if message.expiresAt == message.receivedAt {
                        record(
                            .messageDropped, message, service: registration.service, reason: .expired,
                            detail: "TTL 0 and the app did not take it")
                        finish([message.messageID], endpointToken: endpointToken)
                    } else if !away {
                        redeliverLater(endpointToken)
                    }
                }
            }
        }
        if !expired.isEmpty { finish(expired, endpointToken: endpointToken) }
    }

    /// Whether a failed call says the app is not on the bus: its pushes are offered when its name has an owner again
    /// (`NameOwnerChanged`) or the connection is back, not sooner.
    private static func appAway(_ error: DBusCallError) -> Bool {
        [
            "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
            DBusCallError.disconnected.name,
        ].contains(error.name)
    }

    /// Offers the waiting pushes of `endpointToken` again after a wait: a `Message` call failed while the app is on
    /// the bus (it answered with an error, or not within the call timeout). Without this only a success offers the
    /// next pushes, so once every call in flight had failed the rest waited for the retry interval. The wait doubles
    /// from a second up to the retry interval while calls keep failing; a success resets it.
    private func redeliverLater(_ endpointToken: String) {
        guard !stopped, redeliveries[endpointToken] == nil else { return }
        let delay = min(redeliveryDelays[endpointToken] ?? .seconds(1), options.retryInterval)
        redeliveryDelays[endpointToken] = min(delay * 2, options.retryInterval)
        redeliveries[endpointToken] = loop.scheduleTask(in: delay) { [self] in
            redeliveries[endpointToken] = nil
            deliver(endpointToken: endpointToken)
        }
    }

    /// Whether `message` is to be dropped rather than offered: past its TTL, or TTL 0 and offered once already.
    private func hasExpired(_ message: UnifiedPushMessage, now: Int64) -> Bool {
        message.expiresAt < now || (message.expiresAt == message.receivedAt && attempted.contains(message.messageID))
    }

    /// Offers the waiting pushes of a Connector1 app, whose `Message` may be a no-reply method (the spec allows it;
    /// such an app never answers): each is sent asking for no answer and counts as handed over once sent. The bus
    /// drops such a call unseen when nobody owns the app's name, so the pushes go only once the bus says the name
    /// has an owner; without one, the bus is asked to start the app (D-Bus activation) and the pushes wait for its
    /// name to appear (or for the next try).
    private func deliverWithoutReply(_ registration: UnifiedPushRegistration) {
        let endpointToken = registration.endpointToken
        guard !checkingOwner.contains(endpointToken) else { return }
        checkingOwner.insert(endpointToken)
        callBus("NameHasOwner", [.string(registration.service)]) { [self] result in
            switch result {
            case .success(let reply) where reply.boolean() == true:
                checkingOwner.remove(endpointToken)
                sendWithoutReply(endpointToken: endpointToken)
            case .success:
                // Started (or someone took the name meanwhile): offered again; not startable: they wait.
                callBus("StartServiceByName", [.string(registration.service), .uint32(0)]) { [self] result in
                    checkingOwner.remove(endpointToken)
                    switch result {
                    case .success: deliver(endpointToken: endpointToken)
                    case .failure(let error): notTaken(endpointToken: endpointToken, service: registration.service, error: error)
                    }
                }
            case .failure(let error):
                checkingOwner.remove(endpointToken)
                notTaken(endpointToken: endpointToken, service: registration.service, error: error)
            }
        }
    }

    /// Sends the waiting pushes of `endpointToken` (a Connector1 app whose name has an owner) without waiting for
    /// answers, and forgets them once they are written to the bus: sd-bus queues what the socket does not take at
    /// once (a burst), and a push forgotten while only queued here would be lost to a kill.
    private func sendWithoutReply(endpointToken: String) {
        guard !stopped, let connection, let registration = registrations[endpointToken], !registration.dropped,
            let messages = waiting[endpointToken]
        else { return }
        let now = Self.now()
        var expired: [String] = []
        var sent: [UnifiedPushMessage] = []
        for message in messages where !inFlight.contains(message.messageID) {
            if hasExpired(message, now: now) {
                expired.append(message.messageID)
                record(.messageDropped, message, service: registration.service, reason: .expired)
                continue
            }
            let queued = connection.send(
                destination: registration.service, path: Self.connectorPath, interface: "org.unifiedpush.Connector1", member: "Message",
                arguments: [.string(registration.token), .bytes(message.body), .string(message.messageID)])
            // Not queued (the connection is closing): it waits for the next try.
            guard queued else { break }
            inFlight.insert(message.messageID)
            sent.append(message)
        }
        if !expired.isEmpty { finish(expired, endpointToken: endpointToken) }
        guard !sent.isEmpty else { return }
        connection.whenWritten { [self] written in
            for message in sent { inFlight.remove(message.messageID) }
            defer { advanceStop() }
            // The connection closed first: they wait for the next try (handed over again, with their IDs, if they
            // were written after all).
            guard written else { return }
            // Not counted when dropped meanwhile (its app unregistered): counted as that.
            let stillWaiting = Set((waiting[endpointToken] ?? []).map(\.messageID))
            for message in sent where stillWaiting.contains(message.messageID) {
                record(.messageDelivered, message, service: registration.service)
            }
            finish(sent.map(\.messageID), endpointToken: endpointToken)
        }
    }

    /// The app of `endpointToken` could not be reached or started: its pushes wait, but those with TTL 0 are dropped.
    private func notTaken(endpointToken: String, service: String, error: DBusCallError) {
        logger.debug("the app is not on the bus; its pushes wait", metadata: ["service": "\(service)", "error": "\(error)"])
        let now = waiting[endpointToken]?.filter { $0.expiresAt == $0.receivedAt } ?? []
        guard !now.isEmpty else { return }
        for message in now {
            record(.messageDropped, message, service: service, reason: .expired, detail: "TTL 0 and the app did not take it")
        }
        finish(now.map(\.messageID), endpointToken: endpointToken)
    }

    private func delivered(_ message: UnifiedPushMessage, service: String) {
        // Not when it was dropped meanwhile (its app unregistered while the call was in flight): counted as that.
        if waiting[message.endpointToken]?.contains(where: { $0.messageID == message.messageID }) == true {
            record(.messageDelivered, message, service: service)
        }
        finish([message.messageID], endpointToken: message.endpointToken)
    }

    // MARK: Analytics

    /// Records `name` about `message`: type `AnalyticsEvent.unifiedPush`, its `Topic` as the collapse key, its
    /// urgency as the priority (`high` is high), the app's service name as a parameter.
    private func record(
        _ name: AnalyticsEvent.Name, _ message: UnifiedPushMessage, service: String?, reason: AnalyticsEvent.DropReason? = nil,
        detail: String? = nil
    ) {
        var parameters = ["urgency": message.urgency]
        parameters["service"] = service
        parameters["reason"] = reason?.rawValue
        parameters["detail"] = detail
        bus.record(
            AnalyticsEvent(
                name: name, messageID: message.messageID, collapseKey: message.topic,
                priority: message.urgency == "high" ? .high : .normal, messageType: AnalyticsEvent.unifiedPush,
                ttl: (message.expiresAt - message.receivedAt) / 1000, receivedAt: message.receivedAt, parameters: parameters))
    }

    /// Records a push refused before it was kept: `message_dropped` with `reason` (about no message ID).
    private func refused(_ reason: AnalyticsEvent.DropReason, detail: String, service: String? = nil) {
        var parameters = ["reason": reason.rawValue, "detail": detail]
        parameters["service"] = service
        bus.record(AnalyticsEvent(name: .messageDropped, messageType: AnalyticsEvent.unifiedPush, parameters: parameters))
    }

    /// Forgets `messageIDs`: in memory now, in the store on the blocking pool.
    private func finish(_ messageIDs: [String], endpointToken: String) {
        waiting[endpointToken]?.removeAll { messageIDs.contains($0.messageID) }
        if waiting[endpointToken]?.isEmpty == true { waiting[endpointToken] = nil }
        for id in messageIDs { attempted.remove(id) }
        finishing += messageIDs
        commit()
    }

    // MARK: Helpers

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    /// 16 random bytes as 32 lower-case hex digits: endpoint tokens and message IDs.
    static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for _ in 0..<16 {
            let byte = UInt8.random(in: 0...255, using: &generator)
            text += [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// A value carried across a `@Sendable` boundary that only ever runs on the loop thread.
private struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension [String: DBusValue] {
    fileprivate func string(_ key: String) -> String? {
        if case .string(let value)? = self[key] { return value }
        return nil
    }
}
