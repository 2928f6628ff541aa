import Logging

/// The answer to a sender: the message was accepted (with its ID), or refused with a ``MessageError``.
public typealias DeliveryOutcome = Result<String, MessageError>

/// The path of a message through one Herald instance (DESIGN §2): target, de-duplicate, drop expired,
/// admit within bounds, acknowledge, then route by class to the handler plugins and record analytics.
///
/// The bus lives on the instance's loop: ``deliver(_:validateOnly:completion:)`` is called on the loop thread
/// (receivers run there); ``deliver(_:validateOnly:)`` may be awaited from anywhere. Handlers run in a task
/// per message on the loop's executor, so a slow or throwing handler holds up only its own message.
public final class MessageBus: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is touched on the loop thread only; the entry points check it.

    let loop: EventLoop
    let timeSource: any EventLoopScheduler
    let configuration: Herald.Configuration
    let logger: Logger
    let pluginSet: PluginSet
    private let categories: [String: NotificationCategory]
    let analytics: AnalyticsPipeline

    // Loop-thread state.
    var identity: RegistrationIdentity
    var topics: Set<String> = []
    private var inFlight = 0
    private var paused = false
    private var draining = false
    private var seenIDs = BoundedSet<String>(capacity: 1)
    private var presented = BoundedDictionary<String, RemoteMessage>(capacity: 1)
    private var fetchesRunning = 0
    private var fetchQueue: [() -> Void] = []
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []

    init(
        loop: EventLoop, timeSource: any EventLoopScheduler, configuration: Herald.Configuration, logger: Logger,
        plugins: PluginSet, categories: [String: NotificationCategory], identity: RegistrationIdentity
    ) {
        self.loop = loop
        self.timeSource = timeSource
        self.configuration = configuration
        self.logger = logger
        self.pluginSet = plugins
        self.categories = categories
        self.identity = identity
        self.seenIDs = BoundedSet(capacity: configuration.deduplicationWindow)
        self.presented = BoundedDictionary(capacity: configuration.rememberedNotifications)
        self.analytics = AnalyticsPipeline(loop: loop, sinks: plugins.analyticsSinks, configuration: configuration, logger: logger)
    }

    // MARK: Delivery

    /// Offers `message` to the bus and answers the sender through `completion` once the message is accepted
    /// (or refused). With `validateOnly`, the message is checked and targeted but not delivered. Loop thread only.
    public func deliver(_ message: RemoteMessage, validateOnly: Bool = false, completion: (DeliveryOutcome) -> Void) {
        loop.preconditionInEventLoop()
        guard !draining else {
            completion(.failure(MessageError(.shuttingDown)))
            return
        }
        let messageID = message.messageID ?? ""

        // Target: this instance's token or installation ID, a subscribed topic, or a condition that holds.
        let targeted: Bool
        switch message.target {
        case .token(let token):
            guard token == identity.token else {
                dropped(message, reason: .notTargeted, detail: "unregistered token")
                completion(.failure(MessageError(.unregistered(message.target))))
                return
            }
            targeted = true
        case .installation(let fid):
            guard fid == identity.installationID, identity.token != nil else {
                dropped(message, reason: .notTargeted, detail: "unregistered installation")
                completion(.failure(MessageError(.unregistered(message.target))))
                return
            }
            targeted = true
        case .topic(let name):
            targeted = topics.contains(name)
        case .condition(let text):
            targeted = (try? TopicCondition.parse(text).evaluate(subscribedTo: topics)) ?? false
        }
        if validateOnly {
            completion(.success(messageID))
            return
        }
        if !targeted {
            // FCM accepts topic sends that reach no subscriber; so does Herald, and records the drop.
            completion(.success(messageID))
            dropped(message, reason: .notTargeted, detail: "not subscribed")
            return
        }
        if message.isExpired(atSeconds: WallClock.nowSeconds()) {
            completion(.success(messageID))
            dropped(message, reason: .expired, detail: "expired before delivery")
            return
        }
        if !messageID.isEmpty, seenIDs.contains(messageID) {
            // The sender retried a message already accepted: acknowledge again, deliver once.
            completion(.success(messageID))
            dropped(message, reason: .duplicate, detail: "already delivered")
            return
        }
        guard inFlight < configuration.maxInFlight else {
            pauseReceivers()
            dropped(message, reason: .rejectedBackpressure, detail: "\(inFlight) in flight")
            completion(.failure(MessageError(.busy(limit: configuration.maxInFlight))))
            return
        }
        if !messageID.isEmpty { seenIDs.insert(messageID) }
        inFlight += 1
        if inFlight >= configuration.maxInFlight { pauseReceivers() }
        completion(.success(messageID))
        if configuration.analyticsWiring == .automatic { recordReceipt(message) }
        Task(executorPreference: loop) { [self] in
            await route(message)
            finished()
        }
    }

    /// Offers `message` to the bus from any context and returns the sender's answer.
    public func deliver(_ message: RemoteMessage, validateOnly: Bool = false) async -> DeliveryOutcome {
        let outcome: DeliveryOutcome? = try? await loop.submit { [self] in
            var outcome: DeliveryOutcome = .failure(MessageError(.shuttingDown))
            deliver(message, validateOnly: validateOnly) { outcome = $0 }
            return outcome
        }
        return outcome ?? .failure(MessageError(.shuttingDown))
    }

    /// Messages accepted whose handlers have not finished.
    public var messagesInFlight: Int {
        loop.preconditionInEventLoop()
        return inFlight
    }

    private func finished() {
        inFlight -= 1
        if paused, inFlight <= configuration.maxInFlight / 2 { resumeReceivers() }
        if inFlight == 0 {
            let waiters = idleWaiters
            idleWaiters.removeAll()
            for waiter in waiters { waiter.resume() }
        }
    }

    /// Waits until every accepted message has been handled. Callable from any context.
    public func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute { [self] in
                if inFlight == 0 { continuation.resume() } else { idleWaiters.append(continuation) }
            }
        }
    }

    private func pauseReceivers() {
        guard !paused else { return }
        paused = true
        logger.warning("bus full: pausing receivers", metadata: ["in_flight": "\(inFlight)", "limit": "\(configuration.maxInFlight)"])
        for receiver in pluginSet.receivers { receiver.pause() }
    }

    private func resumeReceivers() {
        paused = false
        logger.info("bus has room again: resuming receivers", metadata: ["in_flight": "\(inFlight)"])
        for receiver in pluginSet.receivers { receiver.resume() }
    }

    /// Refuse new messages from now on (shutdown); messages in flight finish.
    func beginDraining() {
        loop.preconditionInEventLoop()
        draining = true
    }

    // MARK: Routing

    private func route(_ message: RemoteMessage) async {
        let kind = message.kind
        if kind.contains(.display) { await present(message) }
        if kind.contains(.silent) { await backgroundFetch(message) }
        if kind.isDataOnly {
            for handler in pluginSet.messageHandlers {
                do {
                    try await handler.didReceive(message)
                } catch {
                    handlerFailed(message, plugin: handler, error: error)
                }
            }
        }
    }

    private func present(_ message: RemoteMessage) async {
        var options: PresentationOptions = []
        for handler in pluginSet.notificationHandlers {
            options.formUnion(await handler.willPresent(message))
        }
        var actions: [NotificationAction] = []
        if let categoryID = message.aps.category {
            if let category = categories[categoryID] {
                actions = category.actions
            } else {
                logger.warning("message names an unregistered category; presenting it without actions",
                               metadata: ["category": "\(categoryID)", "message_id": "\(message.messageID ?? "")"])
                analytics.record(AnalyticsEvent(.diagnostic, for: message, parameters: ["detail": "unknown_category", "category": categoryID]))
            }
        }
        if let messageID = message.messageID { presented[messageID] = message }
        if pluginSet.presenters.isEmpty {
            logger.info("notification", metadata: [
                "message_id": "\(message.messageID ?? "")", "title": "\(message.aps.alert?.title ?? "")",
                "body": "\(message.aps.alert?.body ?? "")", "options": "\(options)",
            ])
        }
        for presenter in pluginSet.presenters {
            await presenter.present(message, options: options, actions: actions)
        }
        if configuration.analyticsWiring == .automatic, !options.isEmpty {
            analytics.record(AnalyticsEvent(.notificationForeground, for: message, parameters: ["options": "\(options)"]))
        }
    }

    private func backgroundFetch(_ message: RemoteMessage) async {
        let workers = pluginSet.fetchWorkers
        let start = timeSource.now
        var results: [BackgroundFetchResult] = []
        for worker in workers {
            results.append(await runFetch(worker, message))
        }
        let result = BackgroundFetchResult.combined(results)
        let duration = timeSource.now - start
        analytics.record(AnalyticsEvent(.backgroundFetch, for: message, parameters: [
            "result": result.rawValue, "duration_ms": "\(duration.nanosecondsClamped / 1_000_000)", "workers": "\(workers.count)",
        ]))
    }

    /// Runs one worker off the loop, within the fetch concurrency limit, with the deadline enforced.
    private func runFetch(_ worker: any BackgroundFetchWorker, _ message: RemoteMessage) async -> BackgroundFetchResult {
        await acquireFetchSlot()
        defer { releaseFetchSlot() }
        let resolved = Locked(false)
        return await withCheckedContinuation { (continuation: CheckedContinuation<BackgroundFetchResult, Never>) in
            let task = Locked<Task<Void, Never>?>(nil)
            let timer = timeSource.scheduleTask(in: configuration.backgroundFetchDeadline) { [logger, analytics, loop] in
                task.withLock { $0 }?.cancel()
                guard resolved.withLock({ let first = !$0; $0 = true; return first }) else { return }
                logger.warning("background fetch ran past its deadline; cancelled and counted as failed",
                               metadata: ["plugin": "\(worker.descriptor.name)", "message_id": "\(message.messageID ?? "")"])
                loop.execute {
                    analytics.record(AnalyticsEvent(.diagnostic, for: message, parameters: ["detail": "fetch_deadline", "plugin": worker.descriptor.name]))
                }
                continuation.resume(returning: .failed)
            }
            let started = Task(executorPreference: globalConcurrentExecutor) {
                let result = await worker.fetch(message)
                timer.cancel()
                guard resolved.withLock({ let first = !$0; $0 = true; return first }) else { return }
                continuation.resume(returning: Task.isCancelled ? .failed : result)
            }
            task.withLock { $0 = started }
            if resolved.withLock({ $0 }) { started.cancel() }
        }
    }

    private func acquireFetchSlot() async {
        if fetchesRunning < configuration.maxConcurrentFetches {
            fetchesRunning += 1
            return
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            fetchQueue.append { continuation.resume() }
        }
    }

    private func releaseFetchSlot() {
        if fetchQueue.isEmpty {
            fetchesRunning -= 1
        } else {
            fetchQueue.removeFirst()()
        }
    }

    // MARK: Responses

    /// A person acted on presented notification `messageID`; see ``Herald/respond(to:action:userText:)``.
    func respond(to messageID: String, action: String, userText: String?) async throws(HeraldError) {
        loop.preconditionInEventLoop()
        guard let message = presented[messageID] else { throw .unknownMessage(messageID) }
        if action != NotificationResponse.defaultActionIdentifier, action != NotificationResponse.dismissActionIdentifier {
            let category = message.aps.category
            guard let category, categories[category]?.actions.contains(where: { $0.identifier == action }) == true else {
                throw .unknownAction(action, category: category)
            }
        }
        let response = NotificationResponse(message: message, actionIdentifier: action, userText: userText)
        if configuration.analyticsWiring == .automatic {
            analytics.record(AnalyticsEvent(response.isDismissal ? .notificationDismiss : .notificationOpen, for: message, parameters: ["action": action]))
        }
        for handler in pluginSet.notificationHandlers {
            await handler.didReceive(response)
        }
    }

    // MARK: Analytics

    /// Records `notification_receive` for `message` once per message ID (manual wiring calls this too).
    @discardableResult
    func recordReceipt(_ message: RemoteMessage) -> Bool {
        analytics.recordReceiptOnce(message)
    }

    private func dropped(_ message: RemoteMessage, reason: AnalyticsEvent.DropReason, detail: String) {
        analytics.record(AnalyticsEvent(.messageDropped, for: message, parameters: ["reason": reason.rawValue, "detail": detail]))
    }

    /// Records a message a receiver refused before it reached the bus (it failed validation).
    public func recordInvalid(_ error: MessageError) {
        loop.preconditionInEventLoop()
        analytics.record(AnalyticsEvent(name: .messageDropped, parameters: ["reason": AnalyticsEvent.DropReason.invalid.rawValue, "detail": error.message]))
    }

    private func handlerFailed(_ message: RemoteMessage, plugin: any HeraldPlugin, error: any Error) {
        logger.error("handler threw; other handlers and messages go on", metadata: [
            "plugin": "\(plugin.descriptor.name)", "message_id": "\(message.messageID ?? "")", "error": "\(error)",
        ])
        analytics.record(AnalyticsEvent(.diagnostic, for: message, parameters: [
            "detail": "handler_failed", "plugin": plugin.descriptor.name, "error": "\(error)",
        ]))
    }
}

/// The registered plugins, sorted by role once, when the instance starts.
struct PluginSet: Sendable {
    var all: [any HeraldPlugin] = []
    var receivers: [any Receiver] = []
    var notificationHandlers: [any NotificationHandler] = []
    var messageHandlers: [any MessageHandler] = []
    var fetchWorkers: [any BackgroundFetchWorker] = []
    var tokenHandlers: [any TokenHandler] = []
    var analyticsSinks: [any AnalyticsSink] = []
    var presenters: [any Presenter] = []

    mutating func add(_ plugin: any HeraldPlugin) {
        all.append(plugin)
        if let receiver = plugin as? any Receiver { receivers.append(receiver) }
        if let handler = plugin as? any NotificationHandler { notificationHandlers.append(handler) }
        if let handler = plugin as? any MessageHandler { messageHandlers.append(handler) }
        if let worker = plugin as? any BackgroundFetchWorker { fetchWorkers.append(worker) }
        if let handler = plugin as? any TokenHandler { tokenHandlers.append(handler) }
        if let sink = plugin as? any AnalyticsSink { analyticsSinks.append(sink) }
        if let presenter = plugin as? any Presenter { presenters.append(presenter) }
    }
}
