import Logging

/// The answer to a sender: the message was accepted (with its ID), or refused with a ``MessageError``.
public typealias DeliveryOutcome = Result<String, MessageError>

/// The path of a message through one Herald instance (DESIGN §2): target, de-duplicate, drop expired,
/// admit within bounds, acknowledge, then route by class to the handler plugins and record analytics.
///
/// The bus lives on the instance's loop: ``deliver(_:validateOnly:completion:)`` is called on the loop thread
/// (receivers run there); ``deliver(_:validateOnly:)`` may be awaited from anywhere. Handlers run in a task
/// per message on the loop's executor, started immediately (they run inside the delivery call until one
/// suspends), so a slow or throwing handler holds up only its own message.
public final class MessageBus: @unchecked Sendable {
    // @unchecked Sendable: all mutable state is touched on the loop thread only; the entry points check it.

    let loop: EventLoop
    let timeSource: any EventLoopScheduler
    let configuration: Herald.Configuration
    let logger: Logger
    let pluginSet: PluginSet
    private let categories: [String: NotificationCategory]
    let analytics: AnalyticsPipeline

    let store: any HeraldStore
    let messageIDs: MessageIDGenerator
    /// What ``submit(_:_:completion:)`` decodes bodies with: the sender ID and this instance's message IDs.
    let decoding: DecodingContext
    /// Whether accepted messages are committed to the store before the sender is acknowledged.
    let durable: Bool

    // Loop-thread state.
    var identity: StoredIdentity
    var topics: Set<String> = []
    private var batch = StoreBatch()
    private var batchAcks: [(message: RemoteMessage, id: String, completion: Answer)] = []
    private var commitScheduled = false
    private var commitRunning = false
    private var committingAcks: [(message: RemoteMessage, id: String, completion: Answer)] = []
    private var commitWaiters: [CommitWaiter] = []
    /// Senders waiting on another message's commit: retries of a message not yet committed, and messages
    /// replaced (collapse key) by a newer one; each is answered with that commit's outcome.
    private var followers: [String: [(id: String, completion: Answer)]] = [:]
    /// IDs of messages whose commit has not finished (in `batchAcks` or `committingAcks`).
    private var uncommitted: Set<String> = []
    /// Replayed IDs, removed from the inbox when finished even when the inbox is not durable now.
    private var replayedIDs: Set<String> = []
    private var commitRetryDelay: Duration = .zero
    private var inFlight = 0
    private var paused = false
    private var manualStages: [String: ManualStage] = [:]
    private var responseSerial = 0
    private var draining = false
    private var seenIDs = BoundedSet<String>(capacity: 1)
    private var presented = BoundedDictionary<String, RemoteMessage>(capacity: 1)
    private var fetchesRunning = 0
    private var fetchQueue: [() -> Void] = []
    private var idleWaiters: [@Sendable () -> Void] = []

    init(
        loop: EventLoop, timeSource: any EventLoopScheduler, configuration: Herald.Configuration, logger: Logger,
        plugins: PluginSet, categories: [String: NotificationCategory], identity: StoredIdentity,
        store: any HeraldStore, messageIDs: MessageIDGenerator, topics: Set<String> = [], seenMessageIDs: [String] = [],
        pendingMessageIDs: [String] = []
    ) {
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
        // Messages waiting for replay are known before any receiver starts, so a resend is a duplicate.
        for id in pendingMessageIDs { seenIDs.insert(id) }
        self.presented = BoundedDictionary(capacity: configuration.rememberedNotifications)
        self.analytics = AnalyticsPipeline(loop: loop, sinks: plugins.analyticsSinks, configuration: configuration, logger: logger)
    }

    // MARK: Delivery

    /// Offers `message` to the bus and answers the sender through `completion` once the message is accepted
    /// (with the durable inbox: once it is committed to the store) or refused. With `validateOnly`, the message is
    /// checked and targeted but not delivered. Loop thread only; `completion` runs on the loop thread.
    ///
    /// `answerWhenHandled` is for receivers whose sender keeps the message until it is acknowledged (a JetStream
    /// consumer): without the durable inbox, the success answer then waits until the message's handlers have
    /// finished, so a crash before that leaves the message with the sender. With the durable inbox it changes
    /// nothing (the commit already keeps the message). A retry of a message already accepted is answered at once.
    public func deliver(
        _ message: RemoteMessage, validateOnly: Bool = false, answerWhenHandled: Bool = false,
        completion: @escaping (DeliveryOutcome) -> Void
    ) {
        deliver(message, validateOnly: validateOnly, answerWhenHandled: answerWhenHandled, answer: .delivery(completion))
    }

    /// ``deliver(_:validateOnly:answerWhenHandled:completion:)`` for either kind of caller.
    func deliver(_ message: RemoteMessage, validateOnly: Bool, answerWhenHandled: Bool, answer completion: Answer) {
        loop.preconditionInEventLoop()
        guard !draining else {
            completion(.failure(MessageError(.shuttingDown)))
            return
        }
        var message = message
        if message.messageID == nil {
            // Every accepted message has an ID: the inbox and the de-duplication window are keyed by it.
            message.userInfo[UserInfoKey.messageID] = .string(messageIDs.make())
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
        // One clock reading per message: the expiry check and, when it goes straight on, its receipt's timestamp.
        let now = WallClock.nowMilliseconds()
        if message.isExpired(atSeconds: now / 1000) {
            completion(.success(messageID))
            dropped(message, reason: .expired, detail: "expired before delivery")
            return
        }
        if seenIDs.contains(messageID) {
            // The sender retried a message already accepted: acknowledge again (once it is committed), deliver once.
            dropped(message, reason: .duplicate, detail: "already accepted")
            if uncommitted.contains(messageID) {
                followers[messageID, default: []].append((messageID, completion))
            } else {
                completion(.success(messageID))
            }
            return
        }
        guard inFlight < configuration.maxInFlight else {
            pauseReceivers()
            dropped(message, reason: .rejectedBackpressure, detail: "\(inFlight) in flight")
            completion(.failure(MessageError(.busy(limit: configuration.maxInFlight))))
            return
        }
        seenIDs.insert(messageID)
        inFlight += 1
        if inFlight >= configuration.maxInFlight { pauseReceivers() }
        guard durable else {
            if answerWhenHandled {
                admitted(message, id: messageID, at: now, then: LoopBound({ completion(.success(messageID)) }, loop: loop))
            } else {
                completion(.success(messageID))
                admitted(message, id: messageID, at: now)
            }
            return
        }
        if let collapseKey = message.collapseKey,
           let index = batchAcks.firstIndex(where: { $0.message.collapseKey == collapseKey && $0.message.target == message.target }) {
            // A newer message with the same collapse key replaces the one still waiting for its commit.
            // Its sender (and any retries of it) are answered with the newer message's commit outcome.
            let replaced = batchAcks.remove(at: index)
            batch.accepted.removeAll { $0.messageID == replaced.id }
            uncommitted.remove(replaced.id)
            followers[messageID, default: []].append((replaced.id, replaced.completion))
            followers[messageID, default: []].append(contentsOf: followers.removeValue(forKey: replaced.id) ?? [])
            inFlight -= 1
            if inFlight == 0 { notifyIdle() }
            dropped(replaced.message, reason: .collapsed, detail: "replaced by \(messageID)")
        }
        batch.accepted.append(InboxRecord(message, messageID: messageID))
        batchAcks.append((message, messageID, completion))
        uncommitted.insert(messageID)
        scheduleCommit()
    }

    /// An accepted message goes on: receipt analytics, then its handlers in a task of its own.
    /// `now`, when the caller read the clock for this message a moment ago, is the receipt's timestamp.
    private func admitted(_ message: RemoteMessage, id: String, at now: Int64? = nil, then handled: LoopBound<() -> Void>? = nil) {
        // Automatic wiring records the receipt straight away: the de-duplication window already lets each message
        // ID through once, so the receipt set (which manual wiring needs) would only cost a hash-set insert and an
        // eviction per message.
        let kind = message.kind
        if configuration.analyticsWiring == .automatic, analytics.hasSinks {
            analytics.record(.notificationReceive, for: message, messageID: id, kind: kind, timestamp: now)
        }
        // Started immediately: the handlers run now, on this thread, while the message is still in the cache, until
        // one of them really suspends; from then on the task goes on as the loop's work.
        Task.immediate(executorPreference: loop.taskExecutor) { [self] in
            await route(message, kind: kind)
            finished(message)
            handled?.value()
        }
    }

    // MARK: Durable inbox

    /// Commits the current batch at the end of this loop turn, so that every message accepted in the turn (and
    /// while a commit is running) shares one transaction: one fsync for many messages (group commit).
    private func scheduleCommit() {
        guard !commitScheduled, !commitRunning else { return }
        commitScheduled = true
        loop.execute { [self] in
            commitScheduled = false
            runCommit()
        }
    }

    private func runCommit() {
        guard !commitRunning else { return }
        guard !batch.isEmpty else {
            let waiters = commitWaiters
            commitWaiters.removeAll()
            for waiter in waiters { waiter.resume() }
            return
        }
        commitRunning = true
        let committing = batch
        committingAcks = batchAcks
        batch = StoreBatch()
        batchAcks = []
        let store = self.store
        let window = configuration.deduplication
        loop.offload({ () throws -> Void in
            try store.commit(committing, window: window, now: WallClock.nowMilliseconds())
        }, then: { [self] result in
            commitRunning = false
            let acks = committingAcks
            committingAcks = []
            for ack in acks { uncommitted.remove(ack.id) }
            switch result {
            case .success:
                commitRetryDelay = .zero
                for ack in acks {
                    ack.completion(.success(ack.id))
                    for follower in followers.removeValue(forKey: ack.id) ?? [] { follower.completion(.success(follower.id)) }
                    if draining {
                        // Committed after shutdown began: the inbox replays it at the next start.
                        inFlight -= 1
                    } else {
                        admitted(ack.message, id: ack.id)
                    }
                }
                if inFlight == 0 { notifyIdle() }
            case .failure(let error):
                logger.error("could not commit to the store; the senders of this batch are refused", metadata: [
                    "error": "\(error)", "messages": "\(acks.count)",
                ])
                let refusal = MessageError(.storeUnavailable("\(error)"))
                for ack in acks {
                    seenIDs.remove(ack.id)
                    inFlight -= 1
                    ack.completion(.failure(refusal))
                    for follower in followers.removeValue(forKey: ack.id) ?? [] {
                        seenIDs.remove(follower.id)
                        follower.completion(.failure(refusal))
                    }
                    dropped(ack.message, reason: .storeFailure, detail: "\(error)")
                }
                // Entries that finished stay in the inbox until a later commit removes them; retry with backoff.
                batch.finished.append(contentsOf: committing.finished)
                batch.quarantined.append(contentsOf: committing.quarantined)
                commitRetryDelay = min(max(commitRetryDelay * 2, .milliseconds(50)), .seconds(5))
                if inFlight == 0 { notifyIdle() }
                if paused, inFlight <= configuration.maxInFlight / 2 { resumeReceivers() }
            }
            // Whoever waits for a flush is answered after every attempt, so a failing store cannot hang shutdown.
            let waiters = commitWaiters
            commitWaiters.removeAll()
            for waiter in waiters { waiter.resume() }
            if !batch.isEmpty {
                if commitRetryDelay > .zero {
                    loop.scheduleTask(in: commitRetryDelay) { [self] in scheduleCommit() }
                } else {
                    scheduleCommit()
                }
            }
        })
    }

    /// Commits what is waiting (finished entries included): returns once the store has it, or after three
    /// attempts failed (what could not be written is replayed at the next start).
    func flushStore() async {
        guard store.isDurable else { return }
        for _ in 0..<3 {
            let pending: Bool = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let queued = loop.enqueue(.closure { [self] in
                    guard commitRunning || !batch.isEmpty else {
                        continuation.resume(returning: false)
                        return
                    }
                    commitWaiters.append(CommitWaiter(continuation: continuation))
                    if !commitRunning { runCommit() }
                })
                if !queued { continuation.resume(returning: false) }
            }
            if !pending { return }
        }
    }

    /// Delivers messages the inbox held at start (accepted, never finished): flagged as replays; expired ones
    /// are dropped; of several with one collapse key only the newest is delivered. Loop thread only.
    func replay(_ records: [InboxRecord], replays: [String: Int] = [:], path: String) {
        loop.preconditionInEventLoop()
        var messages: [RemoteMessage] = []
        for record in records {
            do {
                messages.append(try record.message(path: path))
            } catch {
                logger.error("an inbox entry could not be read; it is dropped", metadata: ["error": "\(error)"])
                batch.finished.append(record.messageID)
            }
        }
        var newestByCollapseKey: [String: Int] = [:]
        for (index, message) in messages.enumerated() {
            if let key = message.collapseKey { newestByCollapseKey[key + "\u{0}" + message.target.description] = index }
        }
        let now = WallClock.nowSeconds()
        var toDeliver: [(message: RemoteMessage, id: String)] = []
        for (index, message) in messages.enumerated() {
            let id = message.messageID ?? ""
            seenIDs.insert(id)
            if let replays = replays[id], replays > configuration.maxReplays {
                logger.error("a message was still pending after several starts (its handling may crash the process): quarantined, not replayed again", metadata: [
                    "message_id": "\(id)", "starts": "\(replays)", "max_replays": "\(configuration.maxReplays)",
                ])
                dropped(message, reason: .quarantined, detail: "pending at \(replays) starts")
                batch.quarantined.append(id)
            } else if let key = message.collapseKey, newestByCollapseKey[key + "\u{0}" + message.target.description] != index {
                dropped(message, reason: .collapsed, detail: "replaced by a newer message at replay")
                batch.finished.append(id)
            } else if message.isExpired(atSeconds: now) {
                dropped(message, reason: .expired, detail: "expired in the inbox before replay")
                batch.finished.append(id)
            } else {
                replayedIDs.insert(id)
                toDeliver.append((message, id))
            }
        }
        // All of them are in flight before the first one's handlers start (they start at once and may finish at
        // once): the bus is idle only when the whole replay is handled, never between two of its messages.
        inFlight += toDeliver.count
        for entry in toDeliver { admitted(entry.message, id: entry.id) }
        if inFlight >= configuration.maxInFlight { pauseReceivers() }
        if !batch.isEmpty { scheduleCommit() }
        logger.info("replayed the inbox", metadata: ["entries": "\(records.count)", "delivered": "\(toDeliver.count)"])
    }

    /// Offers `message` to the bus from any context and returns the sender's answer (with the durable inbox,
    /// once the message is committed).
    public func deliver(_ message: RemoteMessage, validateOnly: Bool = false) async -> DeliveryOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<DeliveryOutcome, Never>) in
            let queued = loop.enqueue(.closure { [self] in
                deliver(message, validateOnly: validateOnly) { continuation.resume(returning: $0) }
            })
            if !queued { continuation.resume(returning: .failure(MessageError(.shuttingDown))) }
        }
    }

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

    private func finished(_ message: RemoteMessage) {
        if let id = message.messageID, durable || replayedIDs.remove(id) != nil {
            batch.finished.append(id)
            scheduleCommit()
        }
        inFlight -= 1
        if paused, inFlight <= configuration.maxInFlight / 2 { resumeReceivers() }
        if inFlight == 0 { notifyIdle() }
    }

    private func notifyIdle() {
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
                if resumed.withLock({ let first = !$0; $0 = true; return first }) { continuation.resume(returning: idle) }
            }
            let queued = loop.enqueue(.closure { [self] in
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

    private func pauseReceivers() {
        guard !paused else { return }
        paused = true
        // Under sustained overload the bus fills and drains many times a second: one warning per interval, with how
        // many times it filled since the last one, instead of a line per cycle.
        pausesSinceWarning += 1
        let now = WallClock.nowMilliseconds()
        if lastPauseWarning.map({ now - $0 >= Self.pauseWarningInterval }) ?? true {
            logger.warning("bus full: pausing receivers", metadata: [
                "in_flight": "\(inFlight)", "limit": "\(configuration.maxInFlight)", "times_full": "\(pausesSinceWarning)",
            ])
            lastPauseWarning = now
            pausesSinceWarning = 0
        }
        for receiver in pluginSet.receivers { receiver.pause() }
    }

    private func resumeReceivers() {
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



    // MARK: Routing

    private func route(_ message: RemoteMessage, kind: MessageKind) async {
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
        let stage = beginManualStage(.presenting, for: message)
        for handler in pluginSet.notificationHandlers {
            options.formUnion(await handler.willPresent(message))
        }
        endManualStage(stage, for: message)
        var actions: [NotificationAction] = []
        if let categoryID = message.apsCategory {
            if let category = categories[categoryID] {
                actions = category.actions
            } else {
                logger.warning("message names an unregistered category; presenting it without actions",
                               metadata: ["category": "\(categoryID)", "message_id": "\(message.messageID ?? "")"])
                analytics.record(.diagnostic, for: message, parameters: ["detail": "unknown_category", "category": categoryID])
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
            analytics.record(.notificationForeground, for: message, parameters: ["options": "\(options)"])
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
        analytics.record(.backgroundFetch, for: message, parameters: [
            "result": result.rawValue, "duration_ms": "\(duration.nanosecondsClamped / 1_000_000)", "workers": "\(workers.count)",
        ])
    }

    /// Runs one worker off the loop, within the fetch concurrency limit, with the deadline enforced.
    private func runFetch(_ worker: any BackgroundFetchWorker, _ message: RemoteMessage) async -> BackgroundFetchResult {
        await acquireFetchSlot()
        let resolved = Locked(false)
        return await withCheckedContinuation { (continuation: CheckedContinuation<BackgroundFetchResult, Never>) in
            let task = Locked<Task<Void, Never>?>(nil)
            let timer = timeSource.scheduleTask(in: configuration.backgroundFetchDeadline) { [logger, analytics, loop] in
                // Claim the outcome before cancelling: a worker that stops at once on cancellation must not
                // answer first and hide that the deadline passed.
                guard resolved.withLock({ let first = !$0; $0 = true; return first }) else { return }
                task.withLock { $0 }?.cancel()
                logger.warning("background fetch ran past its deadline; cancelled and counted as failed",
                               metadata: ["plugin": "\(worker.descriptor.name)", "message_id": "\(message.messageID ?? "")"])
                loop.execute {
                    analytics.record(.diagnostic, for: message, parameters: ["detail": "fetch_deadline", "plugin": worker.descriptor.name])
                }
                continuation.resume(returning: .failed)
            }
            let started = Task(executorPreference: globalConcurrentExecutor) { [self] in
                let result = await worker.fetch(message)
                timer.cancel()
                // The slot is free only when the worker has really stopped, not when its deadline passed.
                loop.execute { [self] in releaseFetchSlot() }
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
            analytics.record(response.isDismissal ? .notificationDismiss : .notificationOpen, for: message, parameters: ["action": action])
        }
        responseSerial += 1
        let stage = beginManualStage(.responding(response, serial: responseSerial), for: message)
        for handler in pluginSet.notificationHandlers {
            await handler.didReceive(response)
        }
        endManualStage(stage, for: message)
    }

    // MARK: Analytics

    /// Where a message is while its handlers run, so that manual wiring's ``Herald/appDidReceiveMessage(_:)``,
    /// called from inside a handler as the reference SDK asks, records what the bus would have recorded itself.
    enum ManualStage {
        case presenting
        case responding(NotificationResponse, serial: Int)
    }

    private func beginManualStage(_ stage: ManualStage, for message: RemoteMessage) -> ManualStage? {
        guard configuration.analyticsWiring == .manual, let id = message.messageID else { return nil }
        let previous = manualStages[id]
        manualStages[id] = stage
        return previous
    }

    private func endManualStage(_ previous: ManualStage?, for message: RemoteMessage) {
        guard configuration.analyticsWiring == .manual, let id = message.messageID else { return }
        manualStages[id] = previous
    }

    /// Manual wiring: `notification_receive` the first time a message is named; called from `willPresent`, also
    /// `notification_foreground` (once per message); called from `didReceive(response)`, also `notification_open`
    /// or `notification_dismiss` (once per response). Returns whether anything was recorded. Loop thread only.
    func recordManually(_ message: RemoteMessage) -> Bool {
        var recorded = analytics.recordReceiptOnce(message)
        guard let id = message.messageID else { return recorded }
        switch manualStages[id] {
        case .presenting:
            recorded = analytics.recordOnce(key: "foreground|\(id)", AnalyticsEvent(.notificationForeground, for: message)) || recorded
        case .responding(let response, let serial):
            let name: AnalyticsEvent.Name = response.isDismissal ? .notificationDismiss : .notificationOpen
            let event = AnalyticsEvent(name, for: message, parameters: ["action": response.actionIdentifier])
            recorded = analytics.recordOnce(key: "response|\(id)|\(serial)", event) || recorded
        case nil:
            break
        }
        return recorded
    }

    private func dropped(_ message: RemoteMessage, reason: AnalyticsEvent.DropReason, detail: String) {
        analytics.record(.messageDropped, for: message, parameters: ["reason": reason.rawValue, "detail": detail])
    }

    /// Records a message a receiver refused before it reached the bus (it failed validation).
    public func recordInvalid(_ error: MessageError) {
        loop.preconditionInEventLoop()
        analytics.record(AnalyticsEvent(name: .messageDropped, parameters: ["reason": AnalyticsEvent.DropReason.invalid.rawValue, "detail": error.message]))
    }

    /// Records a `diagnostic` event for a plugin's own news (a receiver's connection state, say): `detail` names
    /// what happened, `parameters` add to it. Loop thread only.
    public func recordDiagnostic(_ detail: String, parameters: [String: String] = [:]) {
        loop.preconditionInEventLoop()
        analytics.record(AnalyticsEvent(name: .diagnostic, parameters: parameters.merging(["detail": detail]) { _, new in new }))
    }

    private func handlerFailed(_ message: RemoteMessage, plugin: any HeraldPlugin, error: any Error) {
        logger.error("handler threw; other handlers and messages go on", metadata: [
            "plugin": "\(plugin.descriptor.name)", "message_id": "\(message.messageID ?? "")", "error": "\(error)",
        ])
        analytics.record(.diagnostic, for: message, parameters: [
            "detail": "handler_failed", "plugin": plugin.descriptor.name, "error": "\(error)",
        ])
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

/// Whoever waits for a message's answer: a caller of ``MessageBus/deliver(_:validateOnly:answerWhenHandled:completion:)``
/// (a ``DeliveryOutcome``) or a receiver that submitted a body (a ``SendOutcome``). An enum rather than a closure
/// wrapping the other: the answer to a receiver costs no allocation of its own.
enum Answer {
    case delivery((DeliveryOutcome) -> Void)
    case submission((SendOutcome) -> Void)

    func callAsFunction(_ outcome: DeliveryOutcome) {
        switch self {
        case .delivery(let completion):
            completion(outcome)
        case .submission(let completion):
            switch outcome {
            case .success(let id): completion(.accepted(messageID: id))
            case .failure(let error): completion(.refused(error))
            }
        }
    }
}

/// A flush waiting for a commit attempt; resumed with whether anything was left to commit.
struct CommitWaiter {
    let continuation: CheckedContinuation<Bool, Never>
    func resume() { continuation.resume(returning: true) }
}
