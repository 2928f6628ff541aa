// Dispatch: an accepted message goes to its handlers by class (display, silent, data), within the background
// fetch slots; a person's response goes to the notification handlers; manual analytics wiring follows along.

extension MessageBus {
    /// An accepted message goes on: receipt analytics, then its handlers in a task of its own, or straight away
    /// without one for a data-only message when every message handler is synchronous, and for a display notification
    /// when every notification handler and presenter is synchronous and no content modifier has to change it.
    /// `now`, when the caller read the clock for this message a moment ago, is the receipt's timestamp; `idHash`,
    /// when the caller hashed `id` already (`id.hashValue`, for the de-duplication window), keys it in `presented`.
    func admitted(
        _ message: consuming RemoteMessage, id: String, idHash: Int? = nil, at now: Int64? = nil,
        then handled: LoopBound<() -> Void>? = nil
    ) {
        // Automatic wiring records the receipt straight away: the de-duplication window already lets each message
        // ID through once, so the receipt set (which manual wiring needs) would only cost a hash-set insert and an
        // eviction per message.
        let (kind, presentation) = message.kindAndPresentation
        if configuration.analyticsWiring == .automatic, analytics.hasSinks {
            analytics.record(.notificationReceive, for: message, messageID: id, kind: kind, timestamp: now)
        }
        if kind.isDataOnly, pluginSet.messageHandlersAreSynchronous {
            // Nothing on this path suspends, so it needs no task (a task, its allocator slab and the closure's
            // context are three allocations per message).
            handleSynchronously(message)
            finished(id: id)
            handled?.value()
            return
        }
        if kind == .display, pluginSet.presentingIsSynchronous {
            if !presentation.mutableContent || pluginSet.contentModifiers.isEmpty {
                presentSynchronously(message, presentation, id: id, idHash: idHash)
                finished(id: id)
                handled?.value()
                return
            }
        }
        // Started immediately: the handlers run now, on this thread, while the message is still in the cache, until
        // one of them really suspends; from then on the task goes on as the loop's work.
        Task.immediate(executorPreference: loop.taskExecutor) { [self, message] in
            await route(message, id: id, idHash: idHash, kind: kind, presentation: presentation)
            finished(id: id)
            handled?.value()
        }
    }

    /// The message `id` (its `gcm.message_id`, as the bus keyed it when it admitted the message) is finished.
    private func finished(id: String) {
        // `replayedIDs` is empty but after a replay: no hashing of the ID then.
        if durable || (!replayedIDs.isEmpty && replayedIDs.remove(id) != nil) {
            batch.finished.append(id)
            scheduleFinishedCommit()
        }
        inFlight -= 1
        if paused, inFlight <= configuration.maxInFlight / 2 { resumeReceivers() }
        if inFlight == 0 { notifyIdle() }
    }

    // MARK: Routing

    private func route(_ message: RemoteMessage, id: String, idHash: Int?, kind: MessageKind, presentation: APSPresentation) async {
        if kind.contains(.display) { await present(message, presentation, id: id, idHash: idHash) }
        if kind.contains(.silent) { await backgroundFetch(message) }
        if kind.isDataOnly {
            for handler in pluginSet.messageHandlers {
                switch handler {
                case .synchronous(let handler):
                    handle(message, with: handler)
                case .asynchronous(let handler):
                    do {
                        try await handler.didReceive(message)
                    } catch {
                        handlerFailed(message, plugin: handler, error: error)
                    }
                }
            }
        }
    }

    /// A data-only message to message handlers that are all synchronous, on the loop thread, in registration order.
    private func handleSynchronously(_ message: RemoteMessage) {
        for case .synchronous(let handler) in pluginSet.messageHandlers {
            handle(message, with: handler)
        }
    }

    private func handle(_ message: RemoteMessage, with handler: any SynchronousMessageHandler) {
        do {
            try handler.handle(message)
        } catch {
            handlerFailed(message, plugin: handler, error: error)
        }
    }

    private func present(_ arrived: RemoteMessage, _ presentation: APSPresentation, id messageID: String, idHash: Int?) async {
        var message = localized(arrived, presentation)
        if presentation.mutableContent && !pluginSet.contentModifiers.isEmpty { message = await modifyContent(message) }
        let foreground = applicationState == .active
        var options = foreground ? [] : Self.backgroundOptions(message)
        if foreground {
            let stage = beginManualStage(.presenting, for: message)
            for handler in pluginSet.notificationHandlers {
                switch handler {
                case .synchronous(let handler): options.formUnion(handler.presentationOptions(for: message))
                case .asynchronous(let handler): options.formUnion(await handler.willPresent(message))
                }
            }
            endManualStage(stage, for: message)
        }
        let actions = willShow(message, presentation, options: options, id: messageID, idHash: idHash)
        for presenter in pluginSet.presenters {
            switch presenter {
            case .synchronous(let presenter): presenter.show(message, options: options, actions: actions)
            case .asynchronous(let presenter): await presenter.present(message, options: options, actions: actions)
            }
        }
        didShow(message, options: options, foreground: foreground)
    }

    /// ``present(_:_:id:idHash:)`` without suspending, for when every notification handler and presenter is
    /// synchronous and no content modifier is to run: the same steps in the same order.
    private func presentSynchronously(
        _ arrived: consuming RemoteMessage, _ presentation: APSPresentation, id messageID: String, idHash: Int?
    ) {
        let message = localized(arrived, presentation)
        let foreground = applicationState == .active
        var options = foreground ? [] : Self.backgroundOptions(message)
        if foreground {
            let stage = beginManualStage(.presenting, for: message)
            for case .synchronous(let handler) in pluginSet.notificationHandlers {
                options.formUnion(handler.presentationOptions(for: message))
            }
            endManualStage(stage, for: message)
        }
        let actions = willShow(message, presentation, options: options, id: messageID, idHash: idHash, keeping: false)
        for case .synchronous(let presenter) in pluginSet.presenters {
            presenter.show(message, options: options, actions: actions)
        }
        didShow(message, options: options, foreground: foreground)
        // Kept for its responses last, so that the message is moved there, not copied: nothing between `willShow`
        // and here suspends, so a response (which `respond` awaits) can come only after it.
        presented.setValue(consume message, forKey: messageID, hash: idHash ?? messageID.hashValue)
    }

    /// The message with its alert resolved through ``Herald/Configuration/alertLocalization`` when it names a
    /// localization key. `aps` is decoded whole only where it is needed: most notifications have no localization
    /// key and no content modifier to run. Neither changes `aps.category` (they write `aps.alert` only).
    private func localized(_ arrived: consuming RemoteMessage, _ presentation: APSPresentation) -> RemoteMessage {
        guard presentation.alertHasLocalizationKey, let alert = arrived.aps.alert,
            let resolved = configuration.alertLocalization.resolved(alert)
        else { return arrived }
        var message = arrived
        var content = message.content
        (content.title, content.subtitle, content.body) = (resolved.title, resolved.subtitle, resolved.body)
        message.apply(content)
        return message
    }

    /// In the background the system shows what the payload asks for, and the app is not asked.
    private static func backgroundOptions(_ message: RemoteMessage) -> PresentationOptions {
        let aps = message.aps
        var options: PresentationOptions = []
        if aps.alert != nil { options.formUnion([.banner, .list]) }
        if aps.sound != nil { options.insert(.sound) }
        if aps.badge != nil { options.insert(.badge) }
        return options
    }

    /// Before the presenters: the category's actions (a diagnostic for an unknown category), the message kept for
    /// its responses (unless the caller keeps it itself once the presenters are done: `keeping` false), and the log
    /// line when there is no presenter. Returns the actions.
    private func willShow(
        _ message: RemoteMessage, _ presentation: APSPresentation, options: PresentationOptions, id messageID: String, idHash: Int?,
        keeping: Bool = true
    ) -> [NotificationAction] {
        var actions: [NotificationAction] = []
        if let categoryID = presentation.category {
            if let category = categories[categoryID] {
                actions = category.actions
            } else {
                logger.warning(
                    "message names an unregistered category; presenting it without actions",
                    metadata: ["category": "\(categoryID)", "message_id": "\(message.messageID ?? "")"])
                analytics.record(.diagnostic, for: message, parameters: ["detail": "unknown_category", "category": categoryID])
            }
        }
        if keeping { presented.setValue(message, forKey: messageID, hash: idHash ?? messageID.hashValue) }
        if pluginSet.presenters.isEmpty, logger.logLevel <= .info {
            let (title, body) = message.alertTitleAndBody
            logger.info(
                "notification",
                metadata: [
                    "message_id": .string(message.messageID ?? ""), "title": .string(title ?? ""),
                    "body": .string(body ?? ""), "options": .string(options.description),
                ])
        }
        return actions
    }

    /// After the presenters: the foreground or background analytics event.
    private func didShow(_ message: RemoteMessage, options: PresentationOptions, foreground: Bool) {
        // The parameters (a dictionary and the options' description) are built only for a pipeline with sinks.
        if configuration.analyticsWiring == .automatic, analytics.hasSinks {
            if !foreground {
                analytics.record(.notificationBackground, for: message, parameters: ["options": "\(options)"])
            } else if !options.isEmpty {
                analytics.record(.notificationForeground, for: message, parameters: ["options": "\(options)"])
            }
        }
    }

    /// Runs the content modifiers on a `mutable-content` notification, off the loop, within the deadline for all of
    /// them; returns the message with the content they left (at the deadline: what it held when the running
    /// modifier's `serviceExtensionTimeWillExpire` returned).
    private func modifyContent(_ message: RemoteMessage) async -> RemoteMessage {
        let modifiers = pluginSet.contentModifiers
        let request = ContentModificationRequest(message: message)
        let running = Locked<(any ContentModifier)?>(nil)
        let resolved = Locked(false)
        let (timeSource, deadline) = (timeSource, configuration.contentModifierDeadline)
        let final: (content: NotificationContent, expired: String?) = await withCheckedContinuation { continuation in
            let task = Locked<Task<Void, Never>?>(nil)
            let started = Task(executorPreference: configuration.workerExecutor ?? globalConcurrentExecutor) {
                // The deadline counts from when the modifiers start, as an extension's time counts from its launch:
                // a task that waited for a thread (a busy machine) has not used any of it.
                running.withLock { $0 = modifiers.first }
                let timer = timeSource.scheduleTask(in: deadline) {
                    guard resolved.setFirst() else { return }
                    let modifier = running.withLock { $0 }
                    modifier?.serviceExtensionTimeWillExpire(request)
                    let content = request.content
                    task.withLock { $0 }?.cancel()
                    continuation.resume(returning: (content, modifier?.descriptor.name ?? ""))
                }
                for modifier in modifiers where !Task.isCancelled {
                    running.withLock { $0 = modifier }
                    await modifier.modify(request)
                }
                timer.cancel()
                guard resolved.setFirst() else { return }
                continuation.resume(returning: (request.content, nil))
            }
            task.withLock { $0 = started }
            if resolved.withLock({ $0 }) { started.cancel() }
        }
        for (detail, parameters) in request.diagnostics {
            analytics.record(.diagnostic, for: message, parameters: parameters.merging(["detail": detail]) { _, new in new })
        }
        if let plugin = final.expired {
            logger.warning(
                "content modifier ran past its deadline; presenting its best attempt",
                metadata: ["plugin": "\(plugin)", "message_id": "\(message.messageID ?? "")"])
            analytics.record(.diagnostic, for: message, parameters: ["detail": "content_modifier_deadline", "plugin": plugin])
        }
        var modified = message
        modified.apply(final.content)
        return modified
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
        analytics.record(
            .backgroundFetch, for: message,
            parameters: [
                "result": result.rawValue, "duration_ms": "\(duration.nanosecondsClamped / 1_000_000)", "workers": "\(workers.count)",
            ])
    }

    /// Runs one worker off the loop, within the fetch concurrency limit, with the deadline enforced.
    private func runFetch(_ worker: any BackgroundFetchWorker, _ message: RemoteMessage) async -> BackgroundFetchResult {
        await acquireFetchSlot()
        let resolved = Locked(false)
        let (timeSource, deadline) = (timeSource, configuration.backgroundFetchDeadline)
        return await withCheckedContinuation { (continuation: CheckedContinuation<BackgroundFetchResult, Never>) in
            let task = Locked<Task<Void, Never>?>(nil)
            let started = Task(executorPreference: configuration.workerExecutor ?? globalConcurrentExecutor) {
                [self, logger, analytics, loop] in
                // The deadline counts from when the worker starts, as the content modifiers' does: a task that waited
                // for a thread (a busy machine) has not used any of the worker's time.
                let timer = timeSource.scheduleTask(in: deadline) {
                    // Claim the outcome before cancelling: a worker that stops at once on cancellation must not
                    // answer first and hide that the deadline passed.
                    guard
                        resolved.setFirst()
                    else { return }
                    task.withLock { $0 }?.cancel()
                    logger.warning(
                        "background fetch ran past its deadline; cancelled and counted as failed",
                        metadata: ["plugin": "\(worker.descriptor.name)", "message_id": "\(message.messageID ?? "")"])
                    loop.execute {
                        analytics.record(
                            .diagnostic, for: message, parameters: ["detail": "fetch_deadline", "plugin": worker.descriptor.name])
                    }
                    continuation.resume(returning: .failed)
                }
                let result = await worker.fetch(message)
                timer.cancel()
                // The slot is free only when the worker has really stopped, not when its deadline passed.
                loop.execute { [self] in releaseFetchSlot() }
                guard
                    resolved.setFirst()
                else { return }
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

    /// A person acted on presented notification `messageID`, as ``Herald/respond(to:action:userText:)`` says: for
    /// presenters, which learn of responses from where they show notifications. Call on the loop thread.
    public func respond(to messageID: String, action: String, userText: String?) async throws(HeraldError) {
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
        for handler in pluginSet.responseHandlers {
            await handler.didReceive(response)
        }
        endManualStage(stage, for: message)
    }

    // MARK: Manual analytics wiring

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
}
