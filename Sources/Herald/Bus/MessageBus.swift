import Logging

/// The answer to a sender: the message was accepted (with its ID), or refused with a ``MessageError``.
public typealias DeliveryOutcome = Result<String, MessageError>

/// The path of a message through one Herald instance, as FCM delivers to an app: target, de-duplicate, drop expired,
/// admit within bounds, acknowledge, then route by class to the handler plugins and record analytics.
///
/// The bus lives on the instance's loop: ``deliver(_:validateOnly:answerWhenHandled:completion:)`` is called on the loop thread
/// (receivers run there); ``deliver(_:validateOnly:)`` may be awaited from anywhere. Handlers run in a task
/// per message on the loop's executor, started immediately (they run inside the delivery call until one
/// suspends), so a slow or throwing handler holds up only its own message; a data-only message whose handlers
/// are all ``SynchronousMessageHandler``s, and a display notification whose handlers and presenters are all
/// synchronous (``SynchronousNotificationHandler``, ``SynchronousPresenter``) and which no content modifier has to
/// change, are handled inside the delivery call without a task.
///
/// This file holds the bus's state and what reads it; the path itself is in extensions: receivers' way in
/// (`MessageBus+Submit`), admission (`MessageBus+Admission`), the durable inbox's group commit and replay
/// (`MessageBus+GroupCommit`), and dispatch to the handlers (`MessageBus+Dispatch`).
public final class MessageBus: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is touched on the loop thread only; the entry points check it.

    let loop: EventLoop
    let timeSource: any EventLoopScheduler
    let configuration: Herald.Configuration
    let logger: Logger
    let pluginSet: PluginSet
    let categories: [String: NotificationCategory]
    let analytics: AnalyticsPipeline

    let store: any HeraldStore
    let messageIDs: MessageIDGenerator
    /// What ``submit(_:_:completion:)`` decodes bodies with: the sender ID and this instance's message IDs.
    let decoding: DecodingContext
    /// Whether accepted messages are committed to the store before the sender is acknowledged.
    let durable: Bool

    /// A message in the batch of the next commit, with whoever waits for its answer. A struct, not a tuple: a
    /// tuple of these is copied and destroyed through the runtime's generic tuple witnesses. The message is taken
    /// out (`nil` after) when it goes on to its handlers, so that it is moved there, not copied.
    struct PendingAck {
        var message: RemoteMessage?
        let id: String
        let completion: Answer
    }

    /// Where a message held in ``inboxIDs`` is.
    enum InboxPlace {
        /// Admitted; the commit that holds it has not ended: a retry is answered with that commit's outcome.
        case committing
        /// Replaced (collapse key) by the message `by` before it was committed: a retry is answered with the
        /// outcome of the commit that holds the newer message.
        case replaced(by: String)
        /// In the inbox: a retry is answered at once.
        case held
    }

    // Loop-thread state.
    var identity: StoredIdentity
    var topics: Set<String> = []
    // The next commit's batch and acks, the running commit's acks and the IDs not committed yet are unchecked for
    // exclusivity too (as `seenIDs` below): each access appends, removes or compares and calls nothing that could come
    // back to the bus (the acks' completions run on a copy taken out first); their checks were five a message.
    @exclusivity(unchecked) var batch = StoreBatch()
    @exclusivity(unchecked) var batchAcks: [PendingAck] = []
    var commitScheduled = false
    var finishedCommitScheduled = false
    var commitRunning = false
    @exclusivity(unchecked) var committingAcks: [PendingAck] = []
    var commitWaiters: [CommitWaiter] = []
    /// Senders waiting on another message's commit: retries of a message not yet committed, and messages
    /// replaced (collapse key) by a newer one; each is answered with that commit's outcome.
    var followers: [String: [(id: String, completion: Answer)]] = [:]
    /// With the durable inbox, the messages in it or on their way into it, by ID: from admission until the commit that
    /// removes them (after their handlers) has ended. Only messages whose ID a sender gave (those that keep it in the
    /// de-duplication window) are kept here: an ID made on receipt (an FCM v1 send's) is never repeated (its
    /// insertion and removal hashed it twice per message). A message under an ID held here is a duplicate, whatever the
    /// window remembers (with the window off, or once the window let the ID go): the inbox is keyed by ID, so a second
    /// message under it would replace the first's record, and the first's removal would then remove the second's.
    @exclusivity(unchecked) var inboxIDs: [String: InboxPlace] = [:]
    /// Replayed IDs, removed from the inbox when finished even when the inbox is not durable now.
    var replayedIDs: Set<String> = []
    var commitRetryDelay: Duration = .zero
    /// When the running commit was handed to the blocking pool, and how long the last one took (to its end on the loop).
    var commitStartedAt = Deadline.distantPast
    var lastCommitDuration: Duration = .zero
    /// The group the next commit waits for after a commit answered its senders: `size` messages (those senders, back
    /// with their next ones, and the ones that waited) or `until`, whichever comes first; `groupWait` commits at `until`.
    var expectedGroup: (size: Int, until: Deadline)?
    var groupWait: ScheduledTask?
    var inFlight = 0
    var paused = false
    var manualStages: [String: ManualStage] = [:]
    var responseSerial = 0
    var draining = false
    // Unchecked for exclusivity, with `idleWaiters`: loop thread only, and each is changed by its own methods,
    // which call nothing that could come back to the bus; their run-time checks were a few hundred instructions per
    // message.
    @exclusivity(unchecked) var seenIDs = BoundedSet<String>(capacity: 1)
    @exclusivity(unchecked) var presented = BoundedDictionary<String, RemoteMessage>(capacity: 1)
    private let applicationStateBox: ApplicationStateCell
    var fetchesRunning = 0
    var fetchQueue: [() -> Void] = []
    @exclusivity(unchecked) private var idleWaiters: [@Sendable () -> Void] = []

    init(
        loop: EventLoop, timeSource: any EventLoopScheduler, configuration: Herald.Configuration, logger: Logger,
        plugins: PluginSet, categories: [String: NotificationCategory], identity: StoredIdentity,
        store: any HeraldStore, messageIDs: MessageIDGenerator, topics: Set<String> = [], seenMessageIDs: [String] = [],
        pendingMessageIDs: [String] = [], applicationState: ApplicationStateCell = ApplicationStateCell()
    ) {
        self.applicationStateBox = applicationState
        self.messageIDs = messageIDs
        self.decoding = DecodingContext(senderID: configuration.senderID, makeMessageID: { [messageIDs] in messageIDs.make() })
        self.loop = loop
        self.timeSource = timeSource
        self.configuration = configuration
        self.logger = logger
        self.pluginSet = plugins
        self.categories = categories
        self.identity = identity
        self.store = store
        self.durable = store.isDurable && configuration.durableInbox
        self.topics = topics
        self.seenIDs = BoundedSet(capacity: configuration.deduplication.maximumCount)
        for id in seenMessageIDs { seenIDs.insert(id) }
        // Messages waiting for replay are known before any receiver starts, so a resend is a duplicate; held by ID
        // until their removal is committed, as a message accepted now would be.
        for id in pendingMessageIDs { seenIDs.insert(id) }
        if durable { for id in pendingMessageIDs { inboxIDs[id] = .held } }
        self.presented = BoundedDictionary(capacity: configuration.rememberedNotifications)
        self.analytics = AnalyticsPipeline(loop: loop, sinks: plugins.analyticsSinks, configuration: configuration, logger: logger)
    }

    // MARK: State, backpressure, idleness, shutdown

    /// Whether the bus is full and has paused the receivers: a receiver holding requests it has already read
    /// (pipelined lines in one read) keeps them until ``Receiver/resume()`` instead of offering them now.
    /// Loop thread only.
    public var isFull: Bool {
        loop.preconditionInEventLoop()
        return paused
    }

    /// Open connections per receiver plugin (by its name), for metrics. Loop thread only.
    public var receiverConnections: [String: Int] {
        loop.preconditionInEventLoop()
        return Dictionary(pluginSet.receivers.map { ($0.descriptor.name, $0.openConnections) }, uniquingKeysWith: +)
    }

    /// The health each receiver that reports one reports (``Receiver/health``), by receiver name. Loop thread only.
    public var receiverHealth: [String: ReceiverHealth] {
        loop.preconditionInEventLoop()
        var reports: [String: ReceiverHealth] = [:]
        for receiver in pluginSet.receivers {
            guard let health = receiver.health else { continue }
            let name = receiver.descriptor.name
            // Two receivers of one name: the unhealthy one is the one to report.
            if reports[name]?.healthy == false { continue }
            reports[name] = health
        }
        return reports
    }

    /// What the analytics pipeline did so far (see ``Herald/analyticsStatistics()``). Loop thread only.
    public var analyticsStatistics: AnalyticsStatistics {
        loop.preconditionInEventLoop()
        return analytics.statistics
    }

    /// Messages accepted whose handlers have not finished.
    public var messagesInFlight: Int {
        loop.preconditionInEventLoop()
        return inFlight
    }

    func notifyIdle() {
        // Every message of a synchronous path ends with nothing in flight: most often nobody waits.
        guard !idleWaiters.isEmpty else { return }
        let waiters = idleWaiters
        idleWaiters.removeAll()
        for waiter in waiters { waiter() }
    }

    /// Waits until every accepted message has been handled. Callable from any context.
    public func waitUntilIdle() async {
        _ = await waitUntilIdle(atMost: nil)
    }

    /// Waits until every accepted message has been handled or `limit` has passed; `true` when idle.
    func waitUntilIdle(atMost limit: Duration?) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let resumed = Locked(false)
            let resume: @Sendable (Bool) -> Void = { idle in
                if resumed.setFirst() {
                    continuation.resume(returning: idle)
                }
            }
            let queued = loop.enqueue(
                .closure { [self] in
                    if inFlight == 0 {
                        resume(true)
                        return
                    }
                    idleWaiters.append { resume(true) }
                    guard loop.lifecycle == .running else {
                        resume(false)
                        return
                    }
                    if let limit { loop.scheduleTask(in: limit) { resume(false) } }
                })
            if !queued { resume(true) }
        }
    }

    func pauseReceivers() {
        guard !paused else { return }
        paused = true
        // Under sustained overload the bus fills and drains many times a second: one warning per interval, with how
        // many times it filled since the last one, instead of a line per cycle.
        pausesSinceWarning += 1
        let now = WallClock.nowMilliseconds()
        if lastPauseWarning.map({ now - $0 >= Self.pauseWarningInterval }) ?? true {
            logger.warning(
                "bus full: pausing receivers",
                metadata: [
                    "in_flight": "\(inFlight)", "limit": "\(configuration.maxInFlight)", "times_full": "\(pausesSinceWarning)",
                ])
            lastPauseWarning = now
            pausesSinceWarning = 0
        }
        for receiver in pluginSet.receivers { receiver.pause() }
    }

    func resumeReceivers() {
        paused = false
        logger.debug("bus has room again: resuming receivers", metadata: ["in_flight": "\(inFlight)"])
        for receiver in pluginSet.receivers { receiver.resume() }
    }

    /// Milliseconds between two "bus full" warnings.
    static let pauseWarningInterval: Int64 = 10_000
    private var lastPauseWarning: Int64?
    private var pausesSinceWarning = 0

    /// After ``Herald/deleteData()``: no topics, an empty de-duplication window. Loop thread only.
    func resetAfterDeletion() {
        topics.removeAll()
        seenIDs = BoundedSet(capacity: configuration.deduplication.maximumCount)
        for receiver in pluginSet.receivers { receiver.topicsDidChange(topics) }
    }

    /// Whether the instance is shutting down and refuses new messages (for health checks). Loop thread only.
    public var isDraining: Bool {
        loop.preconditionInEventLoop()
        return draining
    }

    /// Refuse new messages from now on (shutdown); messages in flight finish.
    func beginDraining() {
        loop.preconditionInEventLoop()
        draining = true
    }

    /// Whether the host's app is active (`willPresent` decides how notifications are presented) or in the background
    /// (they are presented as their payload asks, and handlers see them when a person opens them), as
    /// ``Herald/applicationState``; receivers that take the state from outside (the socket receiver) set it here.
    /// Callable from any thread; the change applies to notifications presented from then on.
    public var applicationState: ApplicationState {
        get { applicationStateBox.value }
        set {
            let old = applicationStateBox.exchange(newValue)
            if old != newValue { logger.info("application state changed", metadata: ["state": "\(newValue.rawValue)"]) }
        }
    }

    // MARK: Analytics

    func dropped(_ message: RemoteMessage, reason: AnalyticsEvent.DropReason, detail: String) {
        analytics.record(.messageDropped, for: message, parameters: ["reason": reason.rawValue, "detail": detail])
    }

    /// Records a message a receiver refused before it reached the bus (it failed validation).
    public func recordInvalid(_ error: MessageError) {
        loop.preconditionInEventLoop()
        analytics.record(
            AnalyticsEvent(
                name: .messageDropped, parameters: ["reason": AnalyticsEvent.DropReason.invalid.rawValue, "detail": error.message]))
    }

    /// Records a message a receiver dropped before it reached the bus (a stored message that a newer one with its
    /// collapse key replaced while both waited, say): a `message_dropped` event with `reason` and `detail`. Loop thread only.
    public func recordDropped(_ reason: AnalyticsEvent.DropReason, detail: String) {
        loop.preconditionInEventLoop()
        analytics.record(AnalyticsEvent(name: .messageDropped, parameters: ["reason": reason.rawValue, "detail": detail]))
    }

    /// Records `event` as it is (its ``AnalyticsEvent/id`` is assigned here): for a plugin that keeps messages of
    /// its own outside the bus (a UnifiedPush distributor's pushes, say). Loop thread only.
    public func record(_ event: AnalyticsEvent) {
        loop.preconditionInEventLoop()
        analytics.record(event)
    }

    /// Records a `diagnostic` event for a plugin's own news (a receiver's connection state, say): `detail` names
    /// what happened, `parameters` add to it. Loop thread only.
    public func recordDiagnostic(_ detail: String, parameters: [String: String] = [:]) {
        loop.preconditionInEventLoop()
        analytics.record(AnalyticsEvent(name: .diagnostic, parameters: parameters.merging(["detail": detail]) { _, new in new }))
    }

    func handlerFailed(_ message: RemoteMessage, plugin: any HeraldPlugin, error: any Error) {
        logger.error(
            "handler threw; other handlers and messages go on",
            metadata: [
                "plugin": "\(plugin.descriptor.name)", "message_id": "\(message.messageID ?? "")", "error": "\(error)",
            ])
        analytics.record(
            .diagnostic, for: message,
            parameters: [
                "detail": "handler_failed", "plugin": plugin.descriptor.name, "error": "\(error)",
            ])
    }
}

/// The registered plugins, sorted by role once, when the instance starts.
struct PluginSet: Sendable {
    var all: [any HeraldPlugin] = []
    var receivers: [any Receiver] = []
    /// The notification handlers of both kinds, in registration order: who is asked "will present".
    var notificationHandlers: [PresentationHandler] = []
    /// The ``NotificationHandler``s, in registration order: who gets a person's responses.
    var responseHandlers: [any NotificationHandler] = []
    /// The message handlers of both kinds, in registration order: what a data-only message goes to.
    var messageHandlers: [DataHandler] = []
    /// Whether every message handler is a ``SynchronousMessageHandler``: then data-only messages go to them without
    /// a task.
    var messageHandlersAreSynchronous = true
    var fetchWorkers: [any BackgroundFetchWorker] = []
    var tokenHandlers: [any TokenHandler] = []
    var analyticsSinks: [any AnalyticsSink] = []
    /// The presenters of both kinds, in registration order.
    var presenters: [AnyPresenter] = []
    /// Whether every notification handler is a ``SynchronousNotificationHandler`` and every presenter a
    /// ``SynchronousPresenter``: then a display notification no content modifier changes is presented without a task.
    var presentingIsSynchronous = true
    var contentModifiers: [any ContentModifier] = []

    mutating func add(_ plugin: any HeraldPlugin) {
        all.append(plugin)
        if let receiver = plugin as? any Receiver { receivers.append(receiver) }
        if let handler = plugin as? any SynchronousNotificationHandler {
            notificationHandlers.append(.synchronous(handler))
        } else if let handler = plugin as? any NotificationHandler {
            notificationHandlers.append(.asynchronous(handler))
            presentingIsSynchronous = false
        }
        if let handler = plugin as? any NotificationHandler { responseHandlers.append(handler) }
        if let handler = plugin as? any SynchronousMessageHandler {
            messageHandlers.append(.synchronous(handler))
        } else if let handler = plugin as? any MessageHandler {
            messageHandlers.append(.asynchronous(handler))
            messageHandlersAreSynchronous = false
        }
        if let worker = plugin as? any BackgroundFetchWorker { fetchWorkers.append(worker) }
        if let handler = plugin as? any TokenHandler { tokenHandlers.append(handler) }
        if let sink = plugin as? any AnalyticsSink { analyticsSinks.append(sink) }
        if let presenter = plugin as? any SynchronousPresenter {
            presenters.append(.synchronous(presenter))
        } else if let presenter = plugin as? any Presenter {
            presenters.append(.asynchronous(presenter))
            presentingIsSynchronous = false
        }
        if let modifier = plugin as? any ContentModifier { contentModifiers.append(modifier) }
    }
}

/// A message handler of either kind.
enum DataHandler: Sendable {
    case synchronous(any SynchronousMessageHandler)
    case asynchronous(any MessageHandler)
}

/// A notification handler of either kind, as "will present" asks it.
enum PresentationHandler: Sendable {
    case synchronous(any SynchronousNotificationHandler)
    case asynchronous(any NotificationHandler)
}

/// A presenter of either kind.
enum AnyPresenter: Sendable {
    case synchronous(any SynchronousPresenter)
    case asynchronous(any Presenter)
}
