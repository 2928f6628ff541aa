import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop

/// Records on the loop thread only; the loop's thread check makes it safe to share.
final class LoopRecorder<Element>: @unchecked Sendable {
    // @unchecked Sendable: `items` is only touched on the loop thread (asserted on every access).
    private let loop: EventLoop
    private var items: [Element] = []

    init(loop: EventLoop) { self.loop = loop }

    func append(_ item: Element) {
        loop.preconditionInEventLoop()
        items.append(item)
    }

    func snapshot() async throws -> [Element] where Element: Sendable {
        try await loop.submit { self.items }
    }

    var countOnLoop: Int {
        loop.preconditionInEventLoop()
        return items.count
    }
}

@Suite("EventLoop: running, execute, executor, blocking pool")
struct EventLoopTests {
    @Test("execute from many threads runs every closure once, in order per thread")
    func executeFromManyThreads() async throws {
        try await withRunningLoop { loop in
            let threads = 8
            let perThread = 5_000
            let recorder = LoopRecorder<(thread: Int, sequence: Int)>(loop: loop)
            let spawned = try (0..<threads).map { thread in
                try SpawnedThread.spawn(name: "submitter-\(thread)") {
                    for sequence in 0..<perThread {
                        loop.execute { recorder.append((thread, sequence)) }
                    }
                }
            }
            for thread in spawned { thread.join() }
            let records = try await recorder.snapshot()
            #expect(records.count == threads * perThread)
            var next = [Int](repeating: 0, count: threads)
            var inOrder = true
            for record in records {
                if record.sequence != next[record.thread] { inOrder = false }
                next[record.thread] = record.sequence + 1
            }
            #expect(inOrder)
            #expect(next == [Int](repeating: perThread, count: threads))
            let stats = loop.statistics
            #expect(stats.tasksRun >= threads * perThread)
            // Sends coalesce: far fewer wake-ups than closures.
            #expect(stats.wakeUps < stats.tasksRun)
        }
    }

    @Test("execute from the loop itself runs after the work already queued")
    func executeFromLoop() async throws {
        try await withRunningLoop { loop in
            let recorder = LoopRecorder<Int>(loop: loop)
            try await loop.submit {
                loop.execute { recorder.append(2) }
                recorder.append(1)
            }
            try await loop.submit {}
            #expect(try await recorder.snapshot() == [1, 2])
        }
    }

    @Test(
        "work the loop queues for itself runs at its next turn with no wake-up from another thread: from a timer's callback with nothing else to do, and job after job without holding back a timer that is due",
        .timeLimit(.minutes(1)))
    func executeFromLoopAtNextTurn() async throws {
        try await withRunningLoop { loop in
            // From a timer's callback, with no I/O and no other timer: the poll after it must not wait.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.scheduleTask(in: .milliseconds(1)) { loop.execute { continuation.resume() } }
            }
            // Each job queues the next: a timer due meanwhile runs between them, not after the chain.
            let recorder = LoopRecorder<String>(loop: loop)
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.execute {
                    loop.scheduleTask(in: .zero) { recorder.append("timer") }
                    Self.chain(loop, 200, recorder) { continuation.resume() }
                }
            }
            // With nothing queued the idle handle is stopped, so a loop with nothing to do runs no turns (asked
            // from another thread, through the async handle: the chain's own turns are over).
            #expect(try await loop.submit { loop.drainsAtNextTurn } == false)
            let records = try await recorder.snapshot()
            #expect(records.count == 202)
            let timer = try #require(records.firstIndex(of: "timer"))
            #expect(timer < records.count - 1, "the timer ran only after the chain")
        }
    }

    static func chain(_ loop: EventLoop, _ left: Int, _ recorder: LoopRecorder<String>, _ done: @escaping @Sendable () -> Void) {
        recorder.append("job")
        if left == 0 { done() } else { loop.execute { chain(loop, left - 1, recorder, done) } }
    }

    @Test("inEventLoop is true only on the loop thread")
    func inEventLoop() async throws {
        try await withRunningLoop { loop in
            #expect(!loop.inEventLoop)
            #expect(try await loop.submit { loop.inEventLoop })
            let other = EventLoop(name: "other")
            try other.start()
            #expect(try await other.submit { !loop.inEventLoop && other.inEventLoop })
            await other.shutdownGracefully()
        }
    }

    @Test("run() runs the loop on the calling thread until shutdown")
    func runOnCallersThread() throws {
        let loop = EventLoop()
        let callerThread = pthread_self()
        let ranOnCaller = Locked(false)
        loop.execute {
            ranOnCaller.withLock { $0 = pthread_equal(pthread_self(), callerThread) != 0 && loop.inEventLoop }
            loop.shutdown()
        }
        try loop.run()
        #expect(ranOnCaller.withLock { $0 })
        #expect(loop.lifecycle == .closed)
        #expect(loop.statistics.liveHandles == 0)
    }

    @Test("start() twice is refused with alreadyRunning")
    func startTwice() async throws {
        try await withRunningLoop { loop in
            #expect(throws: EventLoopError.alreadyRunning) { try loop.start() }
            #expect(throws: EventLoopError.alreadyRunning) { try loop.run() }
        }
    }

    @Test("work submitted after close is dropped and counted; submit throws shutDown")
    func afterClose() async throws {
        let loop = EventLoop()
        try loop.start()
        await loop.shutdownGracefully()
        loop.execute { Issue.record("ran after close") }
        #expect(loop.statistics.droppedAfterClose == 1)
        await #expect(throws: EventLoopError.shutDown) { try await loop.submit { 1 } }
    }

    @Test("a loop that never ran shuts down and runs what was queued")
    func shutdownNeverRun() async throws {
        let loop = EventLoop()
        let ran = Locked(0)
        loop.execute { ran.withLock { $0 += 1 } }
        await loop.shutdownGracefully()
        #expect(ran.withLock { $0 } == 1)
        #expect(loop.lifecycle == .closed)
        #expect(throws: EventLoopError.alreadyRunning) { try loop.start() }
    }

    @Test("work queued before start runs once the loop starts")
    func queuedBeforeStart() async throws {
        let loop = EventLoop()
        let ran = Locked(false)
        loop.execute { ran.withLock { $0 = loop.inEventLoop } }
        try loop.start()
        try await loop.submit {}
        #expect(ran.withLock { $0 })
        await loop.shutdownGracefully()
    }

    @Test("waitUntilClosed blocks until the loop thread has finished")
    func waitUntilClosed() throws {
        let loop = EventLoop()
        try loop.start()
        loop.scheduleTask(in: .milliseconds(5)) { loop.shutdown() }
        loop.waitUntilClosed()
        #expect(loop.lifecycle == .closed)
    }

    // MARK: Executor

    actor LoopActor {
        let loop: EventLoop
        var counter = 0
        init(loop: EventLoop) { self.loop = loop }
        nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

        func increment() -> Bool {
            counter += 1
            return loop.inEventLoop
        }
    }

    @Test("an actor on the loop's executor runs on the loop thread")
    func actorOnLoop() async throws {
        try await withRunningLoop { loop in
            let actor = LoopActor(loop: loop)
            var allOnLoop = true
            for _ in 0..<100 { allOnLoop = await actor.increment() && allOnLoop }
            #expect(allOnLoop)
            #expect(await actor.counter == 100)
        }
    }

    @Test("a task with the loop as executor preference runs on the loop thread, also after await")
    func taskExecutorPreference() async throws {
        try await withRunningLoop { loop in
            let observed = await Task(executorPreference: loop) {
                let before = loop.inEventLoop
                // A real suspension: the result comes back from a blocking-pool thread.
                _ = try? await loop.offload { 1 }
                let after = loop.inEventLoop
                return (before, after)
            }.value
            #expect(observed.0)
            #expect(observed.1)
        }
    }

    @Test("async code started on the loop executor observes inEventLoop and no hop back")
    func withTaskExecutorPreference() async throws {
        try await withRunningLoop { loop in
            let onLoop = await _Concurrency.withTaskExecutorPreference(loop) {
                await Task.yield()
                return loop.inEventLoop
            }
            #expect(onLoop)
        }
    }

    // MARK: Blocking pool

    @Test("offload runs work off the loop and returns its result")
    func offloadAsync() async throws {
        try await withRunningLoop { loop in
            let result = try await loop.offload { () -> (Bool, Int) in
                (loop.inEventLoop, 6 * 7)
            }
            #expect(result.0 == false)
            #expect(result.1 == 42)
            struct Boom: Error {}
            await #expect(throws: Boom.self) { try await loop.offload { throw Boom() } }
        }
    }

    @Test("offload with a completion delivers the result on the loop thread")
    func offloadCallback() async throws {
        try await withRunningLoop { loop in
            let answer = await withCheckedContinuation { (continuation: CheckedContinuation<(Bool, Int), Never>) in
                loop.offload({ 21 * 2 }) { result in
                    continuation.resume(returning: (loop.inEventLoop, (try? result.get()) ?? -1))
                }
            }
            #expect(answer.0)
            #expect(answer.1 == 42)
        }
    }

    @Test("a full blocking pool refuses work with poolExhausted; shutdown cancels what has not started")
    func poolBounds() async throws {
        let pool = try BlockingPool(threads: 1, queueLimit: 2)
        let gate = ConditionLock(false)
        let started = ConditionLock(false)
        try pool.submit {
            started.withLockBroadcasting { $0 = true }
            gate.wait(until: { $0 }, then: { _ in })
        }
        started.wait(until: { $0 }, then: { _ in })
        let cancelled = Locked(0)
        let ran = Locked(0)
        // Cancelling the queued jobs (which shutdown does before it joins the threads) opens the gate, so the
        // running job can finish and shutdown returns.
        let cancel: @Sendable () -> Void = {
            cancelled.withLock { $0 += 1 }
            gate.withLockBroadcasting { $0 = true }
        }
        try pool.submit({ ran.withLock { $0 += 1 } }, onCancel: cancel)
        try pool.submit({ ran.withLock { $0 += 1 } }, onCancel: cancel)
        #expect(throws: EventLoopError.poolExhausted(limit: 2)) { try pool.submit {} }
        pool.shutdown()
        #expect(ran.withLock { $0 } == 0)
        #expect(cancelled.withLock { $0 } == 2)
        #expect(throws: EventLoopError.shutDown) { try pool.submit {} }
    }

    @Test("offload after the loop closed throws shutDown instead of hanging")
    func offloadAfterClose() async throws {
        let loop = EventLoop(blockingThreads: 1)
        try loop.start()
        _ = try await loop.offload { 1 }
        await loop.shutdownGracefully()
        await #expect(throws: EventLoopError.shutDown) { try await loop.offload { 1 } }
    }
}
