import Logging

/// Collects analytics events on the loop and hands them to the sinks in batches, off the hot path.
///
/// Recording an event costs the loop little and shares nothing with the sinks' threads: its values are written
/// into one byte buffer per batch (``AnalyticsRecordBuffer``), which first-party sinks read as it is
/// (``AnalyticsRecordSink``) and which is decoded into ``AnalyticsEvent`` values off the loop, once per batch, for
/// the sinks that take events. Events are flushed every `analyticsFlushInterval` or when a batch is full into
/// one shared, immutable batch that every sink's queue refers to (no copy per sink). Each sink takes its queue
/// one batch at a time, in order, in a task of its own off the loop, so a slow, blocking or failing sink never
/// slows the bus or the other sinks. A batch a sink throws on is retried with exponential backoff
/// (`analyticsRetryDelay` doubling up to `analyticsMaximumRetryDelay`) up to `analyticsMaximumAttempts` times;
/// then its events are counted as lost for that sink and logged. A sink's queue holds at most
/// `analyticsBufferLimit` events; beyond that new events are counted as lost for it (a blocked sink loses the
/// newest events, never stalls the rest). Nothing is dropped without being counted: see ``AnalyticsStatistics``.
final class AnalyticsPipeline: @unchecked Sendable {
    // @unchecked Sendable: buffer, queues and counters are touched on the loop thread only.
    private let loop: EventLoop
    private let configuration: Herald.Configuration
    private let logger: Logger
    /// The batch being filled (`nil` until the first event after a flush). Moved out of the property for each append
    /// and back, so that no access to the property spans a call: the compiler can then leave out its run-time
    /// exclusivity checks, two per event otherwise (about 150 instructions on the loop).
    private var buffer: AnalyticsRecordBuffer?
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
        var event = event
        event.id = nextID()
        var records = takeBuffer()
        records.append(event)
        let count = records.count
        buffer = consume records
        buffered(count)
    }

    /// Buffers an event about `message`, as ``AnalyticsEvent/init(_:for:parameters:)`` would build it (the time is
    /// now). Loop thread only.
    /// `messageID`, `kind` and `timestamp` (the time now, in milliseconds since 1970), when the caller has them,
    /// spare looking them up again.
    func record(
        _ name: AnalyticsEvent.Name, for message: RemoteMessage, parameters: [String: String]? = nil, messageID: String? = nil,
        kind: MessageKind? = nil,
        timestamp: Int64? = nil
    ) {
        loop.assertInEventLoop()
        guard !queues.isEmpty else { return }
        var records = takeBuffer()
        records.append(
            name, for: message, id: nextID(), timestamp: timestamp ?? WallClock.nowMilliseconds(), parameters: parameters,
            messageID: messageID ?? message.messageID, kind: kind ?? message.kind)
        let count = records.count
        buffer = consume records
        buffered(count)
    }

    private func nextID() -> UInt64 {
        recorded += 1
        return idBase &+ UInt64(recorded)
    }

    /// The buffer, moved out of its property (a new one after a flush).
    private func takeBuffer() -> AnalyticsRecordBuffer {
        if let records = buffer.take() { return records }
        return AnalyticsRecordBuffer(reservingEvents: configuration.analyticsBatchSize)
    }

    /// Flushes a full buffer (of `count` events), else schedules a flush.
    private func buffered(_ count: Int) {
        if count >= configuration.analyticsBatchSize {
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
            record(.notificationReceive, for: message)
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

    /// Moves the buffered events, as one shared batch, into every sink's queue and starts the idle sinks. Loop
    /// thread only.
    func flush() {
        loop.assertInEventLoop()
        guard let records = buffer, !records.isEmpty else { return }
        buffer = nil
        let batch = AnalyticsBatch(records)
        for queue in queues {
            let room = max(0, configuration.analyticsBufferLimit - queue.queuedCount)
            if room < batch.count {
                queue.lost += batch.count - room
                if !queue.warnedFull {
                    // Once until the sink has caught up (its queue empties), not once per batch it falls behind by.
                    queue.warnedFull = true
                    logger.error(
                        "analytics sink is behind; its newest events are being dropped (counted as lost)",
                        metadata: [
                            "plugin": "\(queue.sink.descriptor.name)", "queued": "\(queue.queuedCount)",
                            "limit": "\(configuration.analyticsBufferLimit)",
                        ])
                }
            }
            if room > 0 { queue.enqueue(BatchSlice(batch: batch, count: min(room, batch.count))) }
            startNextBatch(queue)
        }
    }

    private func startNextBatch(_ queue: SinkQueue) {
        guard queue.runningCount == 0, !queue.waitingToRetry else { return }
        let slices = queue.dequeue(upTo: configuration.analyticsBatchSize)
        guard !slices.isEmpty else {
            queue.warnedFull = false
            return
        }
        queue.attempts = 0
        send(slices, to: queue)
    }

    /// Hands `slices` to the sink in a task off the loop. The task keeps the only reference the queue had, so
    /// the batch (and the events built from it) is freed off the loop once every sink took it; the slices come
    /// back to the loop only when the sink threw and they are to be retried.
    private func send(_ slices: [BatchSlice], to queue: SinkQueue) {
        queue.attempts += 1
        queue.runningCount = slices.reduce(0) { $0 + $1.count }
        let sink = queue.sink
        let recordSink = queue.recordSink
        Task(executorPreference: globalConcurrentExecutor) { [self] in
            do {
                if let recordSink {
                    try await recordSink.record(BatchSlice.records(of: slices))
                } else {
                    try await sink.record(BatchSlice.events(of: slices))
                }
                loop.execute { [self] in finished(queue, failure: nil, retry: []) }
            } catch {
                loop.execute { [self] in finished(queue, failure: error, retry: slices) }
            }
        }
    }

    private func finished(_ queue: SinkQueue, failure: (any Error)?, retry slices: [BatchSlice]) {
        let count = queue.runningCount
        guard count > 0 else { return }
        if let failure {
            queue.failures += 1
            if queue.attempts < configuration.analyticsMaximumAttempts, !queue.abandoned {
                let delay = retryDelay(afterAttempt: queue.attempts)
                logger.warning(
                    "analytics sink failed; retrying the batch",
                    metadata: [
                        "plugin": "\(queue.sink.descriptor.name)", "error": "\(failure)", "events": "\(count)",
                        "attempt": "\(queue.attempts)", "retry_in": "\(delay)",
                    ])
                queue.waitingToRetry = true
                loop.scheduleTask(in: delay) { [self] in
                    queue.waitingToRetry = false
                    send(slices, to: queue)
                }
                return
            }
            if !queue.abandoned { queue.lost += count }
            logger.error(
                "analytics sink failed; giving up on the batch (counted as lost)",
                metadata: [
                    "plugin": "\(queue.sink.descriptor.name)", "error": "\(failure)", "events": "\(count)", "attempts": "\(queue.attempts)",
                ])
        } else if !queue.abandoned {
            queue.delivered += count
        }
        queue.runningCount = 0
        startNextBatch(queue)
        resumeDrainWaitersIfIdle()
    }

    private func retryDelay(afterAttempt attempt: Int) -> Duration {
        var delay = configuration.analyticsRetryDelay
        for _ in 1..<max(1, attempt) where delay < configuration.analyticsMaximumRetryDelay { delay *= 2 }
        return min(delay, configuration.analyticsMaximumRetryDelay)
    }

    private var isIdle: Bool { queues.allSatisfy { $0.runningCount == 0 && $0.queuedCount == 0 } }

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
                if once.setFirst() {
                    continuation.resume(returning: idle)
                }
            }
            let queued = loop.enqueue(
                .closure { [self] in
                    flush()
                    if isIdle {
                        resume(true)
                        return
                    }
                    let timer = loop.scheduleTask(in: timeout) { resume(false) }
                    drainWaiters.append {
                        timer.cancel()
                        resume(true)
                    }
                })
            if !queued { resume(true) }
        }
        if !finished {
            try? await loop.submit { [self] in
                for queue in queues {
                    let pending = queue.queuedCount + queue.runningCount
                    guard pending > 0 else { continue }
                    queue.lost += pending
                    queue.abandoned = true
                    queue.removeAllQueued()
                    logger.error(
                        "analytics sink did not take its events before shutdown (counted as lost)",
                        metadata: [
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
            sinks: Dictionary(
                queues.map { queue in
                    var statistics = queue.statistics
                    statistics.queued += buffer?.count ?? 0
                    return (queue.sink.descriptor.name, statistics)
                }, uniquingKeysWith: { first, _ in first })
        )
    }
}

/// One flush's events, shared by every sink's queue. The loop creates it; sinks that read records
/// (``AnalyticsRecordSink``) read its bytes; the first sink task that needs events decodes them (off the loop),
/// once, and every other such sink reuses them.
private final class AnalyticsBatch: Sendable {
    let records: AnalyticsRecordBuffer
    private let built = Locked<[AnalyticsEvent]?>(nil)

    init(_ records: AnalyticsRecordBuffer) { self.records = records }

    var count: Int { records.count }

    var events: [AnalyticsEvent] {
        built.withLock { built in
            if let built { return built }
            let events = records.events()
            built = events
            return events
        }
    }
}

/// The first `count` events of a batch (all of them unless the sink's queue had room for fewer).
private struct BatchSlice: Sendable {
    let batch: AnalyticsBatch
    let count: Int

    /// The events of consecutive slices, in order, as a sink takes them.
    static func events(of slices: [BatchSlice]) -> [AnalyticsEvent] {
        if slices.count == 1, slices[0].count == slices[0].batch.count { return slices[0].batch.events }
        var events: [AnalyticsEvent] = []
        events.reserveCapacity(slices.reduce(0) { $0 + $1.count })
        for slice in slices { events.append(contentsOf: slice.batch.events.prefix(slice.count)) }
        return events
    }

    /// The records of consecutive slices, for a sink that reads them without events being built.
    static func records(of slices: [BatchSlice]) -> AnalyticsRecords {
        AnalyticsRecords(parts: slices.map { AnalyticsRecords.Part(buffer: $0.batch.records, count: $0.count) })
    }
}

/// One sink's queue of batch slices and its counters.
private final class SinkQueue: @unchecked Sendable {
    // @unchecked Sendable: it crosses into the sink's task only to come back to the loop; every field is
    // read and written on the loop thread.
    let sink: any AnalyticsSink
    /// The sink, when it reads recorded bytes (then no events are built for it).
    let recordSink: (any AnalyticsRecordSink)?
    /// Slots before `head` are taken (nil): a slice leaves the queue's storage as it is handed to the sink, so the
    /// last reference to a batch is dropped by a sink task, off the loop, never by this array.
    private var queued: [BatchSlice?] = []
    private var head = 0
    private(set) var queuedCount = 0
    /// Events handed to the sink and not yet taken (or given up on); 0 when it is idle.
    var runningCount = 0
    var attempts = 0
    var waitingToRetry = false
    var warnedFull = false
    /// Set once shutdown gave up on this sink: a batch that fails later is not retried.
    var abandoned = false
    var delivered = 0
    var failures = 0
    var lost = 0

    init(sink: any AnalyticsSink) {
        self.sink = sink
        recordSink = sink as? any AnalyticsRecordSink
    }

    func enqueue(_ slice: BatchSlice) {
        queued.append(slice)
        queuedCount += slice.count
    }

    /// The oldest slices, as many as fit in `limit` events (at least one).
    func dequeue(upTo limit: Int) -> [BatchSlice] {
        var taken: [BatchSlice] = []
        var events = 0
        while head < queued.count, let next = queued[head], taken.isEmpty || events + next.count <= limit {
            taken.append(next)
            queued[head] = nil
            events += next.count
            head += 1
        }
        queuedCount -= events
        if head == queued.count {
            queued.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64, head * 2 >= queued.count {
            queued.removeFirst(head)
            head = 0
        }
        return taken
    }

    func removeAllQueued() {
        queued.removeAll()
        head = 0
        queuedCount = 0
    }

    var statistics: AnalyticsStatistics.Sink {
        AnalyticsStatistics.Sink(delivered: delivered, failures: failures, lost: lost, queued: queuedCount + runningCount)
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
