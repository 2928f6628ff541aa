import Dispatch
import Herald
import HeraldEventLoop
import HeraldTesting
import Testing

/// A task executor that holds the jobs given to it until `release()`, then runs them on a queue of its own: the
/// worker tasks of a Herald given it wait for a thread as long as the test wants, as on a busy machine.
final class HeldBackExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: the queue is thread-safe; the count is behind a lock.
    private let queue = DispatchQueue(label: "held-back")
    private let enqueuedJobs = Locked(0)

    init() { queue.suspend() }

    /// How many jobs were given to the executor so far.
    var enqueued: Int { enqueuedJobs.withLock { $0 } }

    func enqueue(_ job: consuming ExecutorJob) {
        enqueuedJobs.withLock { $0 += 1 }
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Runs the jobs held so far and every later one.
    func release() { queue.resume() }
}

/// Starts an instance on manual time whose worker tasks (background fetches, content modifiers) wait for a thread:
/// `send` gives it a message (with the instance's token); once the work waits, the clock moves a minute, past both
/// deadlines (30 s), and only then does the work get its thread; `body` sees the instance idle after.
func withWorkHeldBackAMinute(
    plugins: [any HeraldPlugin],
    send: (Herald, InMemoryReceiver, String) async throws -> Void,
    then body: (Herald, RecordingSink) async throws -> Void
) async throws {
    let clock = ManualEventLoop()
    let executor = HeldBackExecutor()
    var configuration = Herald.Configuration(senderID: "1234567890")
    configuration.backgroundFetchDeadline = .seconds(30)
    configuration.contentModifierDeadline = .seconds(30)
    configuration.workerExecutor = executor
    try await withHerald(configuration: configuration, timeSource: clock, plugins: plugins) { herald, receiver, sink in
        try await send(herald, receiver, try await herald.token())
        #expect(await eventually { executor.enqueued == 1 })
        clock.advanceTime(by: .seconds(60))
        // No deadline is counting yet: its timer starts with the work.
        #expect(clock.pendingTimerCount == 0)
        executor.release()
        try await herald.waitUntilIdle()
        try await body(herald, sink)
    }
}
