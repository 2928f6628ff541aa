import Logging

/// Collects analytics events on the loop and hands them to the sinks in batches, off the hot path.
///
/// Events are buffered (at most `analyticsBufferLimit`; beyond that they are counted as lost, never
/// silently), flushed every `analyticsFlushInterval` or when a batch is full, and each sink gets the batch
/// in a task of its own, so a slow or failing sink never slows the bus. A sink that throws is counted.
final class AnalyticsPipeline: @unchecked Sendable {
    // @unchecked Sendable: buffer and counters are touched on the loop thread only.
    private let loop: EventLoop
    private let sinks: [any AnalyticsSink]
    private let configuration: Herald.Configuration
    private let logger: Logger
    private var buffer: [AnalyticsEvent] = []
    private var flushScheduled = false
    private var receipts = BoundedSet<String>(capacity: 1)
    private(set) var counters = Counters()
    private var pendingSinkTasks = 0
    private var drainWaiters: [CheckedContinuation<Void, Never>] = []

    struct Counters: Sendable, Equatable {
        var recorded = 0
        var lost = 0
        var sinkFailures = 0
    }

    init(loop: EventLoop, sinks: [any AnalyticsSink], configuration: Herald.Configuration, logger: Logger) {
        self.loop = loop
        self.sinks = sinks
        self.configuration = configuration
        self.logger = logger
        self.receipts = BoundedSet(capacity: configuration.deduplication.maximumCount)
    }

    /// Buffers an event. Loop thread only.
    func record(_ event: AnalyticsEvent) {
        loop.assertInEventLoop()
        guard !sinks.isEmpty else { return }
        guard buffer.count < configuration.analyticsBufferLimit else {
            counters.lost += 1
            return
        }
        counters.recorded += 1
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
        loop.assertInEventLoop()
        if let id = message.messageID {
            guard !receipts.contains(id) else { return false }
            receipts.insert(id)
        }
        record(AnalyticsEvent(.notificationReceive, for: message))
        return true
    }

    /// Hands the buffered events to every sink now. Loop thread only.
    func flush() {
        loop.assertInEventLoop()
        guard !buffer.isEmpty else { return }
        let batch = buffer
        buffer.removeAll(keepingCapacity: true)
        for sink in sinks {
            pendingSinkTasks += 1
            Task(executorPreference: globalConcurrentExecutor) { [self, logger] in
                let failed: Bool
                do {
                    try await sink.record(batch)
                    failed = false
                } catch {
                    failed = true
                    logger.error("analytics sink failed", metadata: ["plugin": "\(sink.descriptor.name)", "error": "\(error)", "events": "\(batch.count)"])
                }
                loop.execute { [self] in
                    if failed { counters.sinkFailures += 1 }
                    pendingSinkTasks -= 1
                    if pendingSinkTasks == 0 {
                        let waiters = drainWaiters
                        drainWaiters.removeAll()
                        for waiter in waiters { waiter.resume() }
                    }
                }
            }
        }
    }

    /// Flushes and waits until every sink has taken (or failed) what was handed to it.
    func drain() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let queued = loop.enqueue(.closure { [self] in
                flush()
                if pendingSinkTasks == 0 { continuation.resume() } else { drainWaiters.append(continuation) }
            })
            if !queued { continuation.resume() }
        }
    }
}
