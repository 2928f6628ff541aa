public import Logging
public import ServiceLifecycle

/// One Herald instance: an event loop, a bus, and the plugins registered on it.
///
/// Register plugins and categories, then ``start()`` (or ``run()``); messages flow until ``shutdown()``.
/// There are no process-wide globals: two instances in one process are independent.
///
/// ```swift
/// let herald = Herald(configuration: .init(senderID: "1234567890"))
/// try herald.register(MyDelegate())
/// try await herald.start()
/// print(try await herald.token())
/// ```
public final class Herald: @unchecked Sendable {
    // @unchecked Sendable: registration state is behind `state` (a lock); the bus and everything it owns
    // live on the loop thread.

    /// How an instance behaves. Every field has a default that works.
    public struct Configuration: Sendable {
        /// The sender ID written to `from` of token messages (FCM's project number or ID).
        public var senderID: String = "herald"
        /// The project ID in FCM resource names (`projects/{project}/messages/{id}`) and request paths.
        public var projectID: String = "herald"
        /// The most messages accepted but not yet handled; past it senders get `QUOTA_EXCEEDED` and receivers pause.
        public var maxInFlight: Int = 1024
        /// How long a background-fetch worker may take before it is cancelled and counted `.failed`, counted from when
        /// it starts running (not while it waits for a free slot or a thread).
        public var backgroundFetchDeadline: Duration = .seconds(30)
        /// How long finished inbox entries wait for a commit of accepted messages to take them along before they are
        /// committed on their own (tests lengthen it to see the ride-along whatever the machine's pace).
        package var finishedEntriesCommitDelay: Duration = .milliseconds(100)
        /// How long, at most, a commit waits for the senders the last one answered to send again, so that they go in
        /// one group (nil: as long as the last commit took, at most a millisecond). Tests set it long, so that
        /// whether a group waits does not depend on the machine's pace.
        package var groupCommitWait: Duration? = nil
        /// Where background-fetch workers and content modifiers run (nil: the global concurrent executor). Tests give
        /// an executor that holds the work back, to show that a worker's deadline does not count the wait for a thread.
        package var workerExecutor: (any TaskExecutor)? = nil
        /// The string catalogs alerts' localization keys (`loc-key`, `title-loc-key`, `subtitle-loc-key`) are
        /// resolved from; with none, a key is shown as itself, as on an Apple device.
        public var alertLocalization = AlertLocalization(tables: [])
        /// How long the content modifiers may take with a `mutable-content` notification (Apple gives a
        /// notification service extension about 30 s); at the deadline the one running is told
        /// (``ContentModifier/serviceExtensionTimeWillExpire(_:)``) and the content as it is then is presented.
        public var contentModifierDeadline: Duration = .seconds(30)
        /// How many background-fetch workers run at once; more wait their turn.
        public var maxConcurrentFetches: Int = 16
        /// Which message IDs are remembered to drop duplicates: at most this many, none older than this
        /// (kept in the store, so the window survives restarts). Only IDs a sender or transport gave are kept: an ID
        /// made on receipt (an FCM v1 send's) cannot come again.
        public var deduplication = DeduplicationWindow()
        /// With a durable store: commit each message before acknowledging its sender, replay unfinished ones
        /// at the next start (at-least-once). Off: acknowledge on acceptance (at-most-once).
        public var durableInbox: Bool = true
        /// A message still pending after this many starts replayed it is quarantined instead of replayed again: a
        /// message whose handling crashes the process would otherwise crash it at every start. Quarantined messages
        /// stay in the store (`SQLiteStore`: the `quarantine` table), are logged and recorded as `message_dropped`
        /// (reason `quarantined`). At least 1.
        public var maxReplays: Int = 3
        /// How many presented notifications are remembered for ``Herald/respond(to:action:userText:)``.
        public var rememberedNotifications: Int = 1_000
        /// Automatic: the bus records analytics itself. Manual: the host calls ``Herald/appDidReceiveMessage(_:)``.
        public var analyticsWiring: AnalyticsWiring = .automatic
        /// Events queued for one sink before more are counted as lost for it.
        public var analyticsBufferLimit: Int = 10_000
        /// Events handed to the sinks in one batch.
        public var analyticsBatchSize: Int = 256
        /// How long an event may wait in the buffer before the batch is handed over.
        public var analyticsFlushInterval: Duration = .milliseconds(100)
        /// How often a sink gets a batch it threw on (the first attempt included) before its events count as lost.
        public var analyticsMaximumAttempts: Int = 6
        /// The wait before the first retry of a failed batch; it doubles with each attempt.
        public var analyticsRetryDelay: Duration = .milliseconds(100)
        /// The longest wait between retries.
        public var analyticsMaximumRetryDelay: Duration = .seconds(30)
        /// How long shutdown waits for sinks to take what is queued for them; the rest counts as lost.
        public var analyticsDrainTimeout: Duration = .seconds(5)
        /// How long ``Herald/shutdown()`` waits for messages in flight before stopping plugins anyway.
        public var shutdownGracePeriod: Duration = .seconds(10)
        /// Whether a registration token is minted at start (the reference SDK's `isAutoInitEnabled`).
        public var isAutoInitEnabled: Bool = true

        public init() {}

        public init(senderID: String) {
            self.senderID = senderID
        }
    }

    /// Who records analytics: the bus (automatic, the default) or the host (manual).
    public enum AnalyticsWiring: Sendable, Hashable {
        case automatic
        case manual
    }

    private enum Lifecycle {
        case registering(PluginSet, [String: NotificationCategory])
        /// `start()` is opening the store; the plugin set is frozen.
        case starting(PluginSet)
        /// The bus runs. `starting`: `start()` is still starting the plugins, handing out the token, counting this
        /// start and submitting the replay; a `shutdown()` then waits for it to stop there (``stopping``).
        case started(MessageBus, starting: Bool)
        /// `shutdown()` came while `start()` was starting (the store opening, or the plugins starting): it waits through
        /// `handOver` for `start()` to stop where it is and give it the bus and the plugins it started (none when the
        /// bus was not made), and then stops the instance.
        case stopping(handOver: CheckedContinuation<ShutdownTake, Never>)
        case stopped

        /// The bus, from the moment it runs (plugins starting) until `shutdown()` takes it.
        var bus: MessageBus? {
            if case .started(let bus, _) = self { bus } else { nil }
        }
    }

    /// The instance's event loop.
    public let loop: EventLoop
    /// The configuration the instance was made with.
    public let configuration: Configuration
    /// The instance's logger; plugins get one derived from it with `plugin=<name>`.
    public let logger: Logger
    private let ownsLoop: Bool
    private let timeSource: any EventLoopScheduler
    /// Where identity, topics, the de-duplication window and the inbox are kept.
    public let store: any HeraldStore
    private let state: Locked<Lifecycle> = Locked(.registering(PluginSet(), [:]))
    private let messageIDs = MessageIDGenerator()
    private let applicationStateBox = ApplicationStateCell()

    /// Creates an instance. With no `loop`, the instance makes one and runs it on a thread of its own.
    /// `store` keeps identity, topics and the inbox: `SQLiteStore` from `HeraldSQLite` for a daemon (the
    /// durable default of `herald serve`), ``InMemoryStore`` (the default here) for tests and hosts with no disk.
    /// `timeSource` lets tests drive deadlines (background fetch) with a `ManualEventLoop`; it defaults to the loop.
    public init(
        configuration: Configuration = Configuration(),
        store: any HeraldStore = InMemoryStore(),
        loop: EventLoop? = nil,
        timeSource: (any EventLoopScheduler)? = nil,
        logger: Logger = Logger(label: "herald")
    ) {
        self.configuration = configuration
        self.store = store
        self.loop = loop ?? EventLoop(name: "herald")
        self.ownsLoop = loop == nil
        self.timeSource = timeSource ?? self.loop
        self.logger = logger
    }

    // MARK: Registration

    /// Registers a plugin; its roles come from the protocols it conforms to. Throws ``HeraldError/alreadyStarted``
    /// once the instance has started.
    public func register(_ plugin: any HeraldPlugin) throws(HeraldError) {
        try state.withLock { (state: inout Lifecycle) throws(HeraldError) in
            guard case .registering(var plugins, let categories) = state else { throw .alreadyStarted }
            plugins.add(plugin)
            state = .registering(plugins, categories)
        }
    }

    /// The registered plugins in registration order, each with its descriptor and the roles it plays.
    public var registeredPlugins: [(descriptor: PluginDescriptor, roles: PluginRoles)] {
        let all: [any HeraldPlugin] = state.withLock { state in
            switch state {
            case .registering(let plugins, _), .starting(let plugins): plugins.all
            case .started(let bus, _): bus.pluginSet.all
            case .stopping, .stopped: []
            }
        }
        return all.map { ($0.descriptor, PluginRoles.of($0)) }
    }

    /// Registers a notification category, replacing one with the same identifier.
    public func register(category: NotificationCategory) throws(HeraldError) {
        try state.withLock { (state: inout Lifecycle) throws(HeraldError) in
            guard case .registering(let plugins, var categories) = state else { throw .alreadyStarted }
            categories[category.identifier] = category
            state = .registering(plugins, categories)
        }
    }

    // MARK: Running

    /// Starts the loop (when the instance owns it), the plugins in registration order, and the bus; mints the
    /// registration token and hands it to every ``TokenHandler``. Throws ``HeraldError/pluginFailedToStart(plugin:error:)``
    /// when a plugin's `start` throws, after stopping the instance as ``shutdown()`` does (the messages the plugins
    /// started had accepted given the grace period, the plugins started stopped, the store closed); and
    /// ``HeraldError/notRunning`` when ``shutdown()`` came before the start had finished, or before it began: the
    /// shutdown stops the instance there, and messages the durable inbox would have replayed stay for the next start
    /// (unless the shutdown came while this start was being counted for them: the count and the replay go on then, and
    /// the shutdown gives the replayed messages its grace period as any in flight). An instance that has stopped
    /// does not start again (``HeraldError/notRunning``); ``HeraldError/alreadyStarted`` when it has started.
    public func start() async throws {
        let (plugins, categories): (PluginSet, [String: NotificationCategory]) = try state.withLock {
            (state: inout Lifecycle) throws(HeraldError) in
            switch state {
            case .registering(let plugins, let categories):
                state = .starting(plugins)
                return (plugins, categories)
            case .stopping, .stopped: throw .notRunning
            case .starting, .started: throw .alreadyStarted
            }
        }
        if ownsLoop, loop.lifecycle == .idle {
            do {
                try loop.start()
            } catch {
                // The loop did not start: nothing to shut down.
                if endStart(nil, started: [], failed: true) == .failed { markStopped() }
                throw error
            }
        }
        let loaded: (StoredState, StoredIdentity, counted: Bool)
        do {
            loaded = try await loadStore()
        } catch {
            logger.critical("cannot start: the store could not be read", metadata: ["error": "\(error)"])
            store.close()
            if endStart(nil, started: [], failed: true) == .failed { await finishStopping() }
            throw error
        }
        let (stored, identity, counted) = loaded
        let bus = MessageBus(
            loop: loop, timeSource: timeSource, configuration: configuration, logger: logger,
            plugins: plugins, categories: categories, identity: identity, store: store, messageIDs: messageIDs,
            topics: stored.topics, seenMessageIDs: stored.seenMessageIDs, pendingMessageIDs: stored.pending.map(\.messageID),
            applicationState: applicationStateBox
        )
        // A shutdown that came while the store was opening is handed the bus now, to close the store.
        let stillStarting: Bool = state.withLock { state in
            guard case .starting = state else { return false }
            state = .started(bus, starting: true)
            return true
        }
        guard stillStarting else {
            _ = endStart(bus, started: [], failed: false)
            throw HeraldError.notRunning
        }
        var started: [any HeraldPlugin] = []
        for plugin in plugins.all {
            do {
                try await plugin.start(pluginContext(for: plugin, bus: bus))
                started.append(plugin)
            } catch {
                // The plugins already started are stopped in reverse order, as at a shutdown, and the store closed.
                if endStart(bus, started: started, failed: true) == .failed {
                    await stop(bus, plugins: started)
                    await finishStopping()
                }
                throw HeraldError.pluginFailedToStart(plugin: plugin.descriptor.name, error: "\(error)")
            }
            if isStopping() { break }
        }
        // From here each step is skipped once a shutdown waits; it takes over at the end.
        let token = identity.token
        for handler in plugins.tokenHandlers where !isStopping() { await handler.didReceiveRegistrationToken(token) }
        let pending = stored.pending
        var replays = stored.replays
        let store = self.store
        // Counted and replayed together, or neither: a start counted for messages it did not replay would bring them
        // nearer their quarantine unhandled.
        if !isStopping() {
            if !counted, !pending.isEmpty {
                // Counted now that the plugins have started, for the messages loaded (not those accepted since): a start
                // that failed before replayed nothing and brings no message nearer its quarantine.
                let ids = pending.map(\.messageID)
                do {
                    try await loop.offload { try store.countStart(of: ids) }
                } catch {
                    logger.error(
                        "could not count this start for the messages it replays; replaying them anyway", metadata: ["error": "\(error)"])
                }
                // This start replays them, counted or not.
                for id in ids { replays[id, default: 0] += 1 }
            }
            try? await loop.submit { [logger, replays] in
                if token != nil { bus.analytics.record(AnalyticsEvent(name: .tokenRefresh, parameters: ["reason": "start"])) }
                for receiver in plugins.receivers { receiver.topicsDidChange(bus.topics) }
                if !pending.isEmpty {
                    logger.info(
                        "replaying messages accepted before the last stop but not finished", metadata: ["count": "\(pending.count)"])
                    bus.replay(pending, replays: replays, path: "\(store)")
                }
            }
        }
        guard endStart(bus, started: started, failed: false) == .running else { throw HeraldError.notRunning }
        logger.info("herald started", metadata: ["plugins": "\(plugins.all.map(\.descriptor.name))", "token": "\(token ?? "none")"])
    }

    /// Whether a `shutdown()` is waiting for `start()` to stop where it is (for tests: `package`).
    package func isStopping() -> Bool {
        state.withLock { state in
            if case .stopping = state { true } else { false }
        }
    }

    /// How `start()` ends its hold on the bus.
    private enum StartEnd {
        /// Started; the instance runs.
        case running
        /// The start failed and no shutdown came: the instance is stopped, and `start()` stops what it started.
        case failed
        /// A waiting `shutdown()` was handed the plugins started: it stops the instance.
        case handedOver
    }

    /// Ends `start()`'s hold on the instance (`failed`: the store or a plugin did not start; `bus`: `nil` when it was
    /// not made), handing the bus and `started` to a `shutdown()` that came meanwhile.
    private func endStart(_ bus: MessageBus?, started: [any HeraldPlugin], failed: Bool) -> StartEnd {
        let handOver: CheckedContinuation<ShutdownTake, Never>? = state.withLock { state in
            if case .stopping(let handOver) = state {
                state = .stopped
                return handOver
            }
            state = if !failed, let bus { .started(bus, starting: false) } else { .stopped }
            return nil
        }
        guard let handOver else { return failed ? .failed : .running }
        handOver.resume(returning: bus.map { .bus($0, plugins: started) } ?? .nothing)
        return .handedOver
    }

    /// The stored state and the registration identity to start with (minted and saved when there is none and auto-init
    /// is on). Throws what the store throws.
    /// `counted`: whether the store counted this start (``HeraldStore/load(window:now:)``); when not, the caller counts it.
    private func loadStore() async throws -> (StoredState, StoredIdentity, counted: Bool) {
        let store = self.store
        let (stored, counted) = try await loop.offload { [configuration] () throws -> (StoredState, Bool) in
            let window = configuration.deduplication
            if let state = try store.loadLeavingTheStartUncounted(window: window, now: WallClock.nowMilliseconds()) {
                return (state, false)
            }
            return (try store.load(window: window, now: WallClock.nowMilliseconds()), true)
        }
        let resolved = RegistrationIdentity.resolve(stored.identity, autoInit: configuration.isAutoInitEnabled)
        if resolved.changed {
            try await loop.offload { try store.save(identity: resolved.identity) }
        }
        return (stored, resolved.identity, counted)
    }

    /// What `plugin` is started with: the loop, the bus, a logger tagged with its name, and topic control.
    private func pluginContext(for plugin: any HeraldPlugin, bus: MessageBus) -> PluginContext {
        var pluginLogger = logger
        pluginLogger[metadataKey: "plugin"] = "\(plugin.descriptor.name)"
        return PluginContext(
            loop: loop, bus: bus, logger: pluginLogger, descriptor: plugin.descriptor,
            decoding: decodingContext, projectID: configuration.projectID,
            topics: TopicControl(
                subscribe: { [weak self] topic in try await self?.subscribe(toTopic: topic) },
                unsubscribe: { [weak self] topic in
                    guard let self else { return false }
                    let name = try TopicName.validate(topic)
                    let was = try await self.subscribedTopics().contains(name)
                    try await self.unsubscribe(fromTopic: name)
                    return was
                },
                token: { [weak self] in
                    guard let self else { return nil }
                    let bus = try self.runningBus()
                    return try await self.loop.submit { bus.identity.token }
                },
                subscribed: { [weak self] in try await self?.subscribedTopics() ?? [] }
            ),
            categories: bus.categories
        )
    }

    /// Starts the instance and suspends until it has shut down: ``shutdown()`` called from elsewhere, the
    /// calling task cancelled, or — when run as a `Service` in a swift-service-lifecycle `ServiceGroup` — the
    /// group's graceful shutdown (SIGTERM, say), each of which runs ``shutdown()``.
    public func run() async throws {
        do {
            try await start()
        } catch HeraldError.notRunning {
            // A shutdown came during the start; it stops the instance.
            return await waitUntilStopped()
        }
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await waitUntilStopped()
            } onCancel: {
                Task { await self.shutdown() }
            }
        } onGracefulShutdown: {
            Task { await self.shutdown() }
        }
    }

    /// Suspends until ``shutdown()`` has finished.
    public func waitUntilStopped() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = shutdownWaiters.withLock { state in
                if !state.done { state.waiters.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }

    private let shutdownWaiters = Locked<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// How many calls wait in ``waitUntilStopped()`` (for tests).
    package var waitingUntilStopped: Int { shutdownWaiters.withLock { $0.waiters.count } }

    /// Stops taking messages (senders get `UNAVAILABLE`), waits up to ``Configuration/shutdownGracePeriod`` for
    /// messages in flight, stops plugins in reverse order, flushes analytics, closes the store, and shuts the loop down
    /// when the instance owns it. Returns once the instance has stopped: a second call waits for the first's stop.
    /// Called while ``start()`` is still starting, it waits for the store being opened, the plugin being started or the
    /// token handler being told, and stops the instance there: a plugin's `start` and a token handler must not await it.
    public func shutdown() async {
        // The bus and the plugins to stop: all of them once started; those `start()` had started when it was still
        // starting (it stops there and hands them over).
        let taken: ShutdownTake = await withCheckedContinuation { continuation in
            let now: ShutdownTake? = state.withLock { state in
                switch state {
                case .started(let bus, starting: false):
                    state = .stopped
                    return .bus(bus, plugins: bus.pluginsForShutdown)
                case .started(_, starting: true), .starting:
                    state = .stopping(handOver: continuation)
                    return nil
                case .registering:
                    state = .stopped
                    return .neverStarted
                case .stopping, .stopped:
                    return .stopping
                }
            }
            if let now { continuation.resume(returning: now) }
        }
        switch taken {
        case .bus(let bus, let plugins): await stop(bus, plugins: plugins)
        case .nothing: break
        case .neverStarted: store.close()
        case .stopping: return await waitUntilStopped()
        }
        await finishStopping()
    }

    /// What a `shutdown()` has to stop.
    private enum ShutdownTake {
        case bus(MessageBus, plugins: [any HeraldPlugin])
        /// A start that stopped before it made the bus (it closed the store it had opened).
        case nothing
        /// No start came: the store is closed, as at every stop.
        case neverStarted
        /// Another stop is under way: wait for it.
        case stopping
    }

    /// The end of every stop: the loop shut down when the instance owns it, and ``waitUntilStopped()`` let go.
    private func finishStopping() async {
        if ownsLoop { await loop.shutdownGracefully() }
        markStopped()
    }

    /// Lets ``waitUntilStopped()`` go, now and for good.
    private func markStopped() {
        let waiters = shutdownWaiters.withLock { state in
            state.done = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Stops the bus: no more messages taken, those in flight given the grace period, `plugins` stopped in reverse
    /// order, the inbox's last removals committed, analytics flushed, the store closed.
    private func stop(_ bus: MessageBus, plugins: [any HeraldPlugin]) async {
        try? await loop.submit { bus.beginDraining() }
        if await !bus.waitUntilIdle(atMost: configuration.shutdownGracePeriod) {
            logger.warning(
                "messages still in flight after the grace period; stopping anyway (the durable inbox replays them at the next start)",
                metadata: ["grace": "\(configuration.shutdownGracePeriod)"])
        }
        for plugin in plugins.reversed() { await plugin.stop() }
        await bus.flushStore()
        await bus.analytics.drain(timeout: configuration.analyticsDrainTimeout)
        let store = self.store
        _ = try? await storeUse.run { store.close() }
    }

    private func runningBus() throws(HeraldError) -> MessageBus {
        try state.withLock { (state: inout Lifecycle) throws(HeraldError) in
            guard let bus = state.bus else { throw .notRunning }
            return bus
        }
    }

    // MARK: Messages

    /// The bus, once the instance has started.
    public var bus: MessageBus {
        get throws { try runningBus() }
    }

    /// A decoding context for this instance: its sender ID and message IDs.
    public var decodingContext: DecodingContext {
        DecodingContext(senderID: configuration.senderID, makeMessageID: { [messageIDs] in messageIDs.make() })
    }

    /// Offers a message to the bus from any context (an in-process receiver) and returns the sender's answer.
    public func deliver(_ message: RemoteMessage, validateOnly: Bool = false) async -> DeliveryOutcome {
        guard let bus = try? runningBus() else { return .failure(MessageError(.shuttingDown)) }
        return await bus.deliver(message, validateOnly: validateOnly)
    }

    /// Waits until every accepted message has been handled.
    public func waitUntilIdle() async throws {
        try await runningBus().waitUntilIdle()
    }

    /// Whether the host's app is active — a window focused, a UI attached: the host decides — or in the background,
    /// as `UIApplication.applicationState`. ``ApplicationState/active`` (the default): each notification's
    /// ``NotificationHandler/willPresent(_:)`` decides how it is presented. ``ApplicationState/background``: a
    /// notification is presented as its payload asks (an alert as a banner in the list, `sound`, `badge`) without
    /// asking the handlers, who see it only when a person opens or answers it (``NotificationHandler/didReceive(_:)``);
    /// silent messages still wake the background-fetch workers, and data messages still reach the message handlers.
    /// Settable before and after ``start()``, from any thread.
    public var applicationState: ApplicationState {
        get { applicationStateBox.value }
        set {
            if let bus = state.withLock({ $0.bus }) {
                bus.applicationState = newValue
            } else {
                applicationStateBox.exchange(newValue)
            }
        }
    }

    /// A person acted on the presented notification `messageID`: `action` is
    /// ``NotificationResponse/defaultActionIdentifier``, ``NotificationResponse/dismissActionIdentifier`` or one of
    /// its category's actions. Every ``NotificationHandler`` gets `didReceive(_:)`; analytics records the open or dismissal.
    public func respond(
        to messageID: String,
        action: String = NotificationResponse.defaultActionIdentifier,
        userText: String? = nil
    ) async throws {
        let bus = try runningBus()
        try await withTaskExecutorPreference(loop) {
            try await bus.respond(to: messageID, action: action, userText: userText)
        }
    }

    /// Manual wiring: tells analytics about `message`, as the reference SDK's `appDidReceiveMessage(_:)`, which
    /// an app calls from each of its handlers. The first call for a message records `notification_receive`; a
    /// call from inside `willPresent` also records `notification_foreground` (once per message), and one from
    /// inside `didReceive(response)` records `notification_open` or `notification_dismiss` (once per response).
    /// Calling it again records nothing more; returns whether it recorded anything. With automatic wiring the bus
    /// has recorded all of this already, and the call records nothing.
    @discardableResult
    public func appDidReceiveMessage(_ message: RemoteMessage) async throws -> Bool {
        let bus = try runningBus()
        guard configuration.analyticsWiring == .manual else { return false }
        return try await loop.submit { bus.recordManually(message) }
    }

    // MARK: Identity and topics

    /// The registration token, minting (and saving) one if auto-init is off and none exists yet.
    public func token() async throws -> String {
        let bus = try runningBus()
        let (identity, minted): (StoredIdentity, Bool) = try await loop.submit {
            if bus.identity.token != nil { return (bus.identity, false) }
            bus.identity.token = RegistrationIdentity.mintToken(for: bus.identity.installationID)
            return (bus.identity, true)
        }
        if minted {
            try await persist(identity)
            await bus.announceToken(reason: "minted")
        }
        return identity.token ?? ""
    }

    /// The installation ID (FCM's `fid`).
    public func installationID() async throws -> String {
        let bus = try runningBus()
        return try await loop.submit { bus.identity.installationID }
    }

    /// Deletes the registration token: messages to it are now `UNREGISTERED` (APNs' 410 `Unregistered`, with the time
    /// of this call as its `timestamp`). A new token is minted at once when
    /// auto-init is on, and every ``TokenHandler`` is told.
    public func deleteToken() async throws {
        let bus = try runningBus()
        let autoInit = configuration.isAutoInitEnabled
        let identity = try await loop.submit {
            if bus.identity.token != nil { bus.identity.tokenRetiredAt = WallClock.nowMilliseconds() }
            bus.identity.token = autoInit ? RegistrationIdentity.mintToken(for: bus.identity.installationID) : nil
            return bus.identity
        }
        try await persist(identity)
        await bus.announceToken(reason: "rotated")
    }

    /// The transport address a receiver reported (socket path, NATS inbox, URL), kept with the token.
    public func deviceToken() async throws -> String? {
        let bus = try runningBus()
        return try await loop.submit { bus.identity.deviceToken }
    }

    /// Records the transport address receivers reach this instance at; persisted with the token. Setting the
    /// same value again does nothing, as in the reference SDK.
    public func setDeviceToken(_ address: String?) async throws {
        let bus = try runningBus()
        let changed: StoredIdentity? = try await loop.submit {
            guard bus.identity.deviceToken != address else { return nil }
            bus.identity.deviceToken = address
            return bus.identity
        }
        if let changed { try await persist(changed) }
    }

    /// Writes the identity as it was when changed on the loop. Changes are made on the loop (so none is lost to
    /// a concurrent one), and written one at a time, in order, so the store ends with the latest.
    private func persist(_ identity: StoredIdentity) async throws {
        let store = self.store
        try await identityWrites.run { [loop] in
            try await loop.offload { try store.save(identity: identity) }
        }
    }

    private let identityWrites = SerialGate()

    /// Deletes everything the instance keeps: token, installation ID, device token, topics, the inbox and the
    /// de-duplication window (the GDPR call). A new identity is minted (a token only with auto-init on) and every
    /// ``TokenHandler`` told. Throws ``HeraldError/notRunning`` when the instance is not running, or when a
    /// ``shutdown()`` began before the deletion did (nothing is deleted then); a shutdown that comes during the deletion
    /// closes the store after it.
    public func deleteData() async throws {
        let bus = try runningBus()
        let (store, loop, autoInit) = (self.store, self.loop, configuration.isAutoInitEnabled)
        // Removals of handled messages waiting for a commit are committed first: their IDs are then free, as the
        // emptied window makes every ID (a message still being handled keeps its own until its removal is committed).
        await bus.flushStore()
        // Beside the shutdown's closing of the store, never across it: a deletion after the close would open the
        // store's files again, and keep them open, once the instance has stopped.
        try await storeUse.run { [self] in
            _ = try runningBus()
            try await loop.offload { try store.deleteAll() }
            let identity = RegistrationIdentity.resolve(nil, autoInit: autoInit).identity
            try await loop.offload { try store.save(identity: identity) }
            try await loop.submit {
                bus.identity = identity
                bus.resetAfterDeletion()
            }
        }
        await bus.announceToken(reason: "deleted")
    }

    /// Taken by ``deleteData()`` for its writes and by a stop to close the store, one after the other.
    private let storeUse = SerialGate()

    /// Whether a stop waits for ``deleteData()`` to finish before it closes the store (for tests: `package`).
    package var isClosingAfterDeletion: Bool { storeUse.waitingCount > 0 }

    /// Subscribes to `topic` (FCM's name rule; a `/topics/` prefix is accepted). Throws ``MessageError`` for a bad name.
    public func subscribe(toTopic topic: String) async throws {
        try await setTopic(topic, subscribed: true)
    }

    /// Unsubscribes from `topic`.
    public func unsubscribe(fromTopic topic: String) async throws {
        try await setTopic(topic, subscribed: false)
    }

    private func setTopic(_ topic: String, subscribed: Bool) async throws {
        let name = try TopicName.validate(topic)
        let bus = try runningBus()
        let store = self.store
        try await loop.offload { try store.setTopic(name, subscribed: subscribed) }
        try await loop.submit { bus.setTopic(name, subscribed: subscribed) }
    }

    /// The topics subscribed to.
    public func subscribedTopics() async throws -> Set<String> {
        let bus = try runningBus()
        return try await loop.submit { bus.topics }
    }

    /// What the analytics pipeline did so far: events recorded, and per sink what it took, failed, lost and
    /// has waiting. Throws ``HeraldError/notRunning`` before start and after shutdown.
    public func analyticsStatistics() async throws -> AnalyticsStatistics {
        let bus = try runningBus()
        return try await loop.submit { bus.analytics.statistics }
    }
}

extension MessageBus {
    var pluginsForShutdown: [any HeraldPlugin] { pluginSet.all }

    /// Tells every token handler the current token and records `token_refresh`.
    func announceToken(reason: String) async {
        let token: String? =
            (try? await loop.submit { [self] in
                analytics.record(AnalyticsEvent(name: .tokenRefresh, parameters: ["reason": reason]))
                return identity.token
            }) ?? nil
        for handler in pluginSet.tokenHandlers { await handler.didReceiveRegistrationToken(token) }
    }

    /// Applies a topic change and tells the receivers. Loop thread only.
    func setTopic(_ name: String, subscribed: Bool) {
        let changed = subscribed ? topics.insert(name).inserted : topics.remove(name) != nil
        guard changed else { return }
        analytics.record(AnalyticsEvent(name: subscribed ? .topicSubscribe : .topicUnsubscribe, topic: name))
        for receiver in pluginSet.receivers { receiver.topicsDidChange(topics) }
    }
}

/// A Herald instance is a swift-service-lifecycle `Service`: a host adds it to its own `ServiceGroup`, and the
/// group's graceful shutdown stops it (``run()``).
extension Herald: Service {}
