import Logging

/// Collects analytics events on the loop and hands them to the sinks in batches, off the hot path.
///
/// Recording an event is an append on the loop thread. Events are flushed every `analyticsFlushInterval` or
/// when a batch is full into one queue per sink. Each sink takes its queue one batch at a time, in order, in a
/// task of its own off the loop, so a slow, blocking or failing sink never slows the bus or the other sinks.
/// A batch a sink throws on is retried with exponential backoff (`analyticsRetryDelay` doubling up to
/// `analyticsMaximumRetryDelay`) up to `analyticsMaximumAttempts` times; then its events are counted as lost
/// for that sink and logged. A sink's queue holds at most `analyticsBufferLimit` events; beyond that new
/// events are counted as lost for it (a blocked sink loses the newest events, never stalls the rest).
/// Nothing is dropped without being counted: see ``AnalyticsStatistics``.
final class AnalyticsPipeline: @unchecked Sendable {
    // @unchecked Sendable: buffer, queues and counters are touched on the loop thread only.
    private let loop: EventLoop
    private let configuration: Herald.Configuration
    private let logger: Logger
    private var buffer: [AnalyticsEvent] = []
    private var flushScheduled = false
    private var receipts = BoundedSet<String>(capacity: 1)
    private var recorded = 0
    /// Event IDs are this plus the count recorded: random per run, so IDs of two runs do not meet.
    private let idBase = UInt64.random(in: 1...(UInt64.max / 2))
    private let queues: [SinkQueue]
    private var drainWaiters: [() -> Void] = []

    init(loop: EventLoop, sinks: [any AnalyticsSink], configuration: Herald.Configuration, logger: Logger) {
        self.loop = loop
        self.configuration = configuration
        self.logger = logger
        self.receipts = BoundedSet(capacity: configuration.deduplication.maximumCount)
        self.queues = sinks.map { SinkQueue(sink: $0) }
    }

    /// Whether any sink is registered (without one, recording is skipped before an event is even built).
    var hasSinks: Bool { !queues.isEmpty }

    /// Buffers an event. Loop thread only.
    func record(_ event: AnalyticsEvent) {
        loop.assertInEventLoop()
        guard !queues.isEmpty else { return }
        recorded += 1
        var event = event
        event.id = idBase &+ UInt64(recorded)
        buffer.append(event)
        if buffer.count >= configuration.analyticsBatchSize {
            flush()
        } else if !flushScheduled {
            flushScheduled = true
            loop.scheduleTask(in: configuration.analyticsFlushInterval) { [self] in
                flushScheduled = false
                flush()
            }
        }
    }

    /// Records `notification_receive` once per message ID; `false` when it was recorded before.
    func recordReceiptOnce(_ message: RemoteMessage) -> Bool {
        guard let id = message.messageID else {
            record(AnalyticsEvent(.notificationReceive, for: message))
            return true
        }
        return recordOnce(key: id, AnalyticsEvent(.notificationReceive, for: message))
    }

    /// Records `event` unless an event with `key` was recorded before (among the last ones remembered, as many
    /// as the de-duplication window holds); returns whether it recorded. Loop thread only.
    func recordOnce(key: String, _ event: AnalyticsEvent) -> Bool {
        loop.assertInEventLoop()
        guard !receipts.contains(key) else { return false }
        receipts.insert(key)
        record(event)
        return true
    }

    /// Moves the buffered events into every sink's queue and starts the idle sinks. Loop thread only.
    func flush() {
        loop.assertInEventLoop()
        guard !buffer.isEmpty else { return }
        let batch = buffer
        buffer.removeAll(keepingCapacity: true)
        for queue in queues {
            let room = max(0, configuration.analyticsBufferLimit - queue.queued.count)
            if room < batch.count {
                queue.lost += batch.count - room
                if !queue.warnedFull {
                    queue.warnedFull = true
                    logger.error("analytics sink is behind; its newest events are being dropped (counted as lost)", metadata: [
                        "plugin": "\(queue.sink.descriptor.name)", "queued": "\(queue.queued.count)", "limit": "\(configuration.analyticsBufferLimit)",
                    ])
                }
            }
            queue.queued.append(contentsOf: batch.prefix(room))
            startNextBatch(queue)
        }
    }

    private func startNextBatch(_ queue: SinkQueue) {
        guard queue.running == nil, !queue.waitingToRetry, !queue.queued.isEmpty else { return }
        let count = min(queue.queued.count, configuration.analyticsBatchSize)
        let batch = Array(queue.queued.prefix(count))
        queue.queued.removeFirst(count)
        queue.running = batch
        queue.attempts = 0
        send(queue)
    }

    private func send(_ queue: SinkQueue) {
        guard let batch = queue.running else { return }
        queue.attempts += 1
        let sink = queue.sink
        Task(executorPreference: globalConcurrentExecutor) { [self] in
            let failure: (any Error)?
            do {
                try await sink.record(batch)
                failure = nil
            } catch {
                failure = error
            }
            loop.execute { [self] in finished(queue, failure: failure) }
        }
    }

    private func finished(_ queue: SinkQueue, failure: (any Error)?) {
        guard let batch = queue.running else { return }
        if let failure {
            queue.failures += 1
            if queue.attempts < configuration.analyticsMaximumAttempts, !queue.abandoned {
                let delay = retryDelay(afterAttempt: queue.attempts)
                logger.warning("analytics sink failed; retrying the batch", metadata: [
                    "plugin": "\(queue.sink.descriptor.name)", "error": "\(failure)", "events": "\(batch.count)",
                    "attempt": "\(queue.attempts)", "retry_in": "\(delay)",
                ])
                queue.waitingToRetry = true
                loop.scheduleTask(in: delay) { [self] in
                    queue.waitingToRetry = false
                    send(queue)
                }
                return
            }
            queue.lost += batch.count
            logger.error("analytics sink failed; giving up on the batch (counted as lost)", metadata: [
                "plugin": "\(queue.sink.descriptor.name)", "error": "\(failure)", "events": "\(batch.count)", "attempts": "\(queue.attempts)",
            ])
        } else {
            queue.delivered += batch.count
            queue.warnedFull = false
        }
        queue.running = nil
        startNextBatch(queue)
        resumeDrainWaitersIfIdle()
    }

    private func retryDelay(afterAttempt attempt: Int) -> Duration {
        var delay = configuration.analyticsRetryDelay
        for _ in 1..<max(1, attempt) where delay < configuration.analyticsMaximumRetryDelay { delay *= 2 }
        return min(delay, configuration.analyticsMaximumRetryDelay)
    }

    private var isIdle: Bool { queues.allSatisfy { $0.running == nil && $0.queued.isEmpty } }

    private func resumeDrainWaitersIfIdle() {
        guard isIdle, !drainWaiters.isEmpty else { return }
        let waiters = drainWaiters
        drainWaiters.removeAll()
        for waiter in waiters { waiter() }
    }

    /// Flushes and waits until every sink has taken (or given up on) everything, at most `timeout`. What a
    /// sink has not taken by then is counted as lost for it and logged; a blocked sink's task is left behind.
    func drain(timeout: Duration) async {
        let finished: Bool = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let once = Locked(false)
            let resume: @Sendable (Bool) -> Void = { idle in
                if once.withLock({ let first = !$0; $0 = true; return first }) { continuation.resume(returning: idle) }
            }
            let queued = loop.enqueue(.closure { [self] in
                flush()
                if isIdle { resume(true); return }
                let timer = loop.scheduleTask(in: timeout) { resume(false) }
                drainWaiters.append { timer.cancel(); resume(true) }
            })
            if !queued { resume(true) }
        }
        if !finished {
            try? await loop.submit { [self] in
                for queue in queues {
                    let pending = queue.queued.count + (queue.running?.count ?? 0)
                    guard pending > 0 else { continue }
                    queue.lost += pending
                    queue.abandoned = true
                    queue.queued.removeAll()
                    logger.error("analytics sink did not take its events before shutdown (counted as lost)", metadata: [
                        "plugin": "\(queue.sink.descriptor.name)", "events": "\(pending)", "timeout": "\(timeout)",
                    ])
                }
                drainWaiters.removeAll()
            }
        }
    }

    /// The counters, per sink. Loop thread only.
    var statistics: AnalyticsStatistics {
        loop.assertInEventLoop()
        return AnalyticsStatistics(
            recorded: recorded,
            sinks: Dictionary(queues.map { queue in
                var statistics = queue.statistics
                statistics.queued += buffer.count
                return (queue.sink.descriptor.name, statistics)
            }, uniquingKeysWith: { first, _ in first })
        )
    }
}

/// One sink's queue and counters.
private final class SinkQueue: @unchecked Sendable {
    // @unchecked Sendable: it crosses into the sink's task only to come back to the loop; every field is
    // read and written on the loop thread.
    let sink: any AnalyticsSink
    var queued: [AnalyticsEvent] = []
    /// The batch handed to the sink and not yet taken (or given up on).
    var running: [AnalyticsEvent]?
    var attempts = 0
    var waitingToRetry = false
    var warnedFull = false
    /// Set once shutdown gave up on this sink: a batch that fails later is not retried.
    var abandoned = false
    var delivered = 0
    var failures = 0
    var lost = 0

    init(sink: any AnalyticsSink) { self.sink = sink }

    var statistics: AnalyticsStatistics.Sink {
        AnalyticsStatistics.Sink(delivered: delivered, failures: failures, lost: lost, queued: queued.count + (running?.count ?? 0))
    }
}

/// What the analytics pipeline did: events recorded, and per sink (by plugin name) what it took, how often it
/// failed, what it lost and what waits for it.
public struct AnalyticsStatistics: Sendable, Equatable {
    public struct Sink: Sendable, Equatable {
        /// Events the sink took (its `record` returned).
        public var delivered: Int
        /// Calls of its `record` that threw (each retried batch counts once per attempt).
        public var failures: Int
        /// Events it will never get: its queue was full, its batch failed every attempt, or shutdown came first.
        public var lost: Int
        /// Events waiting for it (buffered for the next batch, queued, or being taken).
        public var queued: Int
    }

    /// Events recorded on the bus (each goes to every sink).
    public var recorded: Int
    public var sinks: [String: Sink]
}
