public import Logging

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
        /// The most messages accepted but not yet handled; past it senders get `QUOTA_EXCEEDED` and receivers pause.
        public var maxInFlight: Int = 1024
        /// How long a background-fetch worker may take before it is cancelled and counted `.failed`.
        public var backgroundFetchDeadline: Duration = .seconds(30)
        /// How many background-fetch workers run at once; more wait their turn.
        public var maxConcurrentFetches: Int = 16
        /// How many message IDs are remembered to drop duplicates.
        public var deduplicationWindow: Int = 10_000
        /// How many presented notifications are remembered for ``Herald/respond(to:action:userText:)``.
        public var rememberedNotifications: Int = 1_000
        /// Automatic: the bus records analytics itself. Manual: the host calls ``Herald/appDidReceiveMessage(_:)``.
        public var analyticsWiring: AnalyticsWiring = .automatic
        /// Events buffered for the sinks before more are counted as lost.
        public var analyticsBufferLimit: Int = 10_000
        /// Events handed to the sinks in one batch.
        public var analyticsBatchSize: Int = 256
        /// How long an event may wait in the buffer before the batch is handed over.
        public var analyticsFlushInterval: Duration = .milliseconds(100)
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
        case started(MessageBus)
        case stopped
    }

    /// The instance's event loop.
    public let loop: EventLoop
    /// The configuration the instance was made with.
    public let configuration: Configuration
    /// The instance's logger; plugins get one derived from it with `plugin=<name>`.
    public let logger: Logger
    private let ownsLoop: Bool
    private let timeSource: any EventLoopScheduler
    private let state: Locked<Lifecycle> = Locked(.registering(PluginSet(), [:]))
    private let messageIDs = MessageIDGenerator()

    /// Creates an instance. With no `loop`, the instance makes one and runs it on a thread of its own.
    /// `timeSource` lets tests drive deadlines (background fetch) with a `ManualEventLoop`; it defaults to the loop.
    public init(
        configuration: Configuration = Configuration(),
        loop: EventLoop? = nil,
        timeSource: (any EventLoopScheduler)? = nil,
        logger: Logger = Logger(label: "herald")
    ) {
        self.configuration = configuration
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
            case .registering(let plugins, _): plugins.all
            case .started(let bus): bus.pluginSet.all
            case .stopped: []
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
    /// (after stopping the plugins already started) when a plugin's `start` throws.
    public func start() async throws {
        let (plugins, categories): (PluginSet, [String: NotificationCategory]) = try state.withLock { (state: inout Lifecycle) throws(HeraldError) in
            guard case .registering(let plugins, let categories) = state else { throw .alreadyStarted }
            return (plugins, categories)
        }
        if ownsLoop, loop.lifecycle == .idle { try loop.start() }
        var identity = RegistrationIdentity.mint()
        if !configuration.isAutoInitEnabled { identity.token = nil }
        let bus = MessageBus(
            loop: loop, timeSource: timeSource, configuration: configuration, logger: logger,
            plugins: plugins, categories: categories, identity: identity
        )
        state.withLock { $0 = .started(bus) }
        var started: [any HeraldPlugin] = []
        for plugin in plugins.all {
            var pluginLogger = logger
            pluginLogger[metadataKey: "plugin"] = "\(plugin.descriptor.name)"
            let context = PluginContext(loop: loop, bus: bus, logger: pluginLogger, descriptor: plugin.descriptor)
            do {
                try await plugin.start(context)
                started.append(plugin)
            } catch {
                for plugin in started.reversed() { await plugin.stop() }
                state.withLock { $0 = .stopped }
                throw HeraldError.pluginFailedToStart(plugin: plugin.descriptor.name, error: "\(error)")
            }
        }
        let token = identity.token
        for handler in plugins.tokenHandlers { await handler.didReceiveRegistrationToken(token) }
        if token != nil {
            try? await loop.submit { bus.analytics.record(AnalyticsEvent(name: .tokenRefresh, parameters: ["reason": "start"])) }
        }
        logger.info("herald started", metadata: ["plugins": "\(plugins.all.map(\.descriptor.name))", "token": "\(token ?? "none")"])
    }

    /// Starts the instance and suspends until it has shut down (``shutdown()`` from elsewhere, or the loop closing).
    public func run() async throws {
        try await start()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            shutdownWaiters.withLock { $0.append(continuation) }
        }
    }

    private let shutdownWaiters = Locked<[CheckedContinuation<Void, Never>]>([])

    /// Stops taking messages (senders get `UNAVAILABLE`), waits up to ``Configuration/shutdownGracePeriod`` for
    /// messages in flight, stops plugins in reverse order, flushes analytics, and shuts the loop down when the
    /// instance owns it. Idempotent.
    public func shutdown() async {
        let bus: MessageBus? = state.withLock { state in
            switch state {
            case .started(let bus):
                state = .stopped
                return bus
            case .registering:
                state = .stopped
                return nil
            case .stopped:
                return nil
            }
        }
        if let bus {
            try? await loop.submit { bus.beginDraining() }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await bus.waitUntilIdle() }
                group.addTask { [configuration] in try? await Task.sleep(for: configuration.shutdownGracePeriod) }
                await group.next()
                group.cancelAll()
            }
            for plugin in bus.pluginsForShutdown.reversed() { await plugin.stop() }
            await bus.analytics.drain()
        }
        if ownsLoop { await loop.shutdownGracefully() }
        let waiters = shutdownWaiters.withLock { waiters in
            defer { waiters.removeAll() }
            return waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func runningBus() throws(HeraldError) -> MessageBus {
        try state.withLock { (state: inout Lifecycle) throws(HeraldError) in
            guard case .started(let bus) = state else { throw .notRunning }
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

    /// Manual wiring: tells analytics that `message` was received, as the reference SDK's
    /// `appDidReceiveMessage(_:)`. Calling it twice for one message records once; returns whether it recorded.
    @discardableResult
    public func appDidReceiveMessage(_ message: RemoteMessage) async throws -> Bool {
        let bus = try runningBus()
        return try await loop.submit { bus.recordReceipt(message) }
    }

    // MARK: Identity and topics

    /// The registration token, minting one if auto-init is off and none exists yet.
    public func token() async throws -> String {
        let bus = try runningBus()
        let (token, minted): (String, Bool) = try await loop.submit {
            if let token = bus.identity.token { return (token, false) }
            let token = RegistrationIdentity.mintToken(for: bus.identity.installationID)
            bus.identity.token = token
            return (token, true)
        }
        if minted { await bus.announceToken() }
        return token
    }

    /// The installation ID (FCM's `fid`).
    public func installationID() async throws -> String {
        let bus = try runningBus()
        return try await loop.submit { bus.identity.installationID }
    }

    /// Deletes the registration token: messages to it are now `UNREGISTERED`. A new token is minted at once when
    /// auto-init is on, and every ``TokenHandler`` is told.
    public func deleteToken() async throws {
        let bus = try runningBus()
        try await loop.submit { [configuration] in
            bus.identity.token = configuration.isAutoInitEnabled ? RegistrationIdentity.mintToken(for: bus.identity.installationID) : nil
        }
        await bus.announceToken()
    }

    /// Subscribes to `topic` (FCM's name rule; a `/topics/` prefix is accepted). Throws ``MessageError`` for a bad name.
    public func subscribe(toTopic topic: String) async throws {
        let name = try TopicName.validate(topic)
        let bus = try runningBus()
        try await loop.submit {
            if bus.topics.insert(name).inserted {
                bus.analytics.record(AnalyticsEvent(name: .topicSubscribe, topic: name))
            }
        }
    }

    /// Unsubscribes from `topic`.
    public func unsubscribe(fromTopic topic: String) async throws {
        let name = try TopicName.validate(topic)
        let bus = try runningBus()
        try await loop.submit {
            if bus.topics.remove(name) != nil {
                bus.analytics.record(AnalyticsEvent(name: .topicUnsubscribe, topic: name))
            }
        }
    }

    /// The topics subscribed to.
    public func subscribedTopics() async throws -> Set<String> {
        let bus = try runningBus()
        return try await loop.submit { bus.topics }
    }
}

extension MessageBus {
    var pluginsForShutdown: [any HeraldPlugin] { pluginSet.all }

    /// Tells every token handler the current token and records `token_refresh`.
    func announceToken() async {
        let token: String? = (try? await loop.submit { [self] in
            analytics.record(AnalyticsEvent(name: .tokenRefresh, parameters: ["reason": "rotated"]))
            return identity.token
        }) ?? nil
        for handler in pluginSet.tokenHandlers { await handler.didReceiveRegistrationToken(token) }
    }
}
