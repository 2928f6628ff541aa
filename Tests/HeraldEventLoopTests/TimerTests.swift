import Dispatch
import HeraldTesting
import Testing

@testable import HeraldEventLoop

@Suite("EventLoop timers on a real loop")
struct TimerTests {
    @Test("timers fire in deadline order, equal deadlines in scheduling order")
    func deadlineOrder() async throws {
        try await withRunningLoop { loop in
            let recorder = LoopRecorder<Int>(loop: loop)
            let base = loop.now + .milliseconds(20)
            // Offsets deliberately out of order, with ties; ids sorted by (offset, scheduling order).
            let offsets = [9, 3, 3, 0, 7, 1, 9, 5, 0, 2]
            try await loop.submit {
                for (id, offset) in offsets.enumerated() {
                    loop.scheduleTask(deadline: base + .milliseconds(offset)) { recorder.append(id) }
                }
            }
            let done = await eventually { (try? await recorder.snapshot().count) == offsets.count }
            #expect(done)
            let expected = offsets.enumerated().sorted { ($0.element, $0.offset) < ($1.element, $1.offset) }.map(\.offset)
            #expect(try await recorder.snapshot() == expected)
        }
    }

    @Test("a timer never fires before its deadline")
    func notEarly() async throws {
        try await withRunningLoop { loop in
            let fired = await withCheckedContinuation { (continuation: CheckedContinuation<(Deadline, Deadline), Never>) in
                let deadline = loop.now + .milliseconds(15)
                loop.scheduleTask(deadline: deadline) { continuation.resume(returning: (deadline, Deadline.now())) }
            }
            #expect(fired.1 >= fired.0)
        }
    }

    @Test("cancelled timers never fire, from the loop or another thread")
    func cancellation() async throws {
        try await withRunningLoop { loop in
            let fired = Locked<Set<Int>>([])
            // The loop is held while the test schedules and cancels from this thread, so no timer is due before
            // the test has cancelled half of them, however slowly this thread runs.
            let hold = DispatchSemaphore(value: 0)
            loop.execute { hold.wait() }
            let tasks = (0..<200).map { id in
                loop.scheduleTask(in: .milliseconds(5 + id % 10)) { _ = fired.withLock { $0.insert(id) } }
            }
            var cancelled: Set<Int> = []
            for id in stride(from: 0, to: 200, by: 2) where tasks[id].cancel() { cancelled.insert(id) }
            hold.signal()
            let onLoopCancelled: Bool = try await loop.submit {
                let task = loop.scheduleTask(in: .milliseconds(1)) { _ = fired.withLock { $0.insert(-1) } }
                return task.cancel()
            }
            #expect(onLoopCancelled)
            #expect(cancelled.count == 100)
            // Timers fire in deadline order: once a later sentinel has fired, every cancelled one had its turn.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.scheduleTask(in: .milliseconds(20)) { continuation.resume() }
            }
            let result = fired.withLock { $0 }
            #expect(result.isDisjoint(with: cancelled))
            #expect(!result.contains(-1))
            #expect(result.count == 100)
            // A task that ran cannot be cancelled afterwards.
            #expect(!tasks[1].cancel())
        }
    }

    @Test("a task scheduled in the past runs at once")
    func pastDeadline() async throws {
        try await withRunningLoop { loop in
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.scheduleTask(deadline: .distantPast) { continuation.resume() }
            }
        }
    }

    @Test("repeated tasks run until cancelled, also from inside the task")
    func repeated() async throws {
        try await withRunningLoop { loop in
            let runs = Locked(0)
            let finished = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
                loop.scheduleRepeatedTask(initialDelay: .milliseconds(1), delay: .milliseconds(1)) { task in
                    let count = runs.withLock {
                        $0 += 1
                        return $0
                    }
                    if count == 5 {
                        task.cancel()
                        continuation.resume(returning: count)
                    }
                }
            }
            #expect(finished == 5)
            // A sentinel later than the next run would have been: once it fires, a sixth run would have happened.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                loop.scheduleTask(in: .milliseconds(10)) { continuation.resume() }
            }
            #expect(runs.withLock { $0 } == 5)
        }
    }

    @Test("schedule-then-cancel many times does not grow the timer heap without bound")
    func cancelChurn() async throws {
        try await withRunningLoop { loop in
            let recorder = LoopRecorder<Int>(loop: loop)
            try await loop.submit {
                var task = loop.scheduleTask(in: .milliseconds(1)) {}
                for _ in 0..<10_000 {
                    task.cancel()
                    task = loop.scheduleTask(in: .seconds(60)) {}
                }
                loop.scheduleTask(in: .milliseconds(2)) { recorder.append(1) }
            }
            // One live 60 s timer and a few cancelled ones awaiting the next compaction, not 10,000.
            #expect(try await loop.submit { loop.pendingTimerCount } < 200)
            let done = await eventually { (try? await recorder.snapshot()) == [1] }
            #expect(done)
        }
    }

    @Test("pending timers are dropped at shutdown and never fire")
    func droppedAtShutdown() async throws {
        let loop = EventLoop()
        try loop.start()
        let fired = Locked(false)
        let task = loop.scheduleTask(in: .seconds(3600)) { fired.withLock { $0 = true } }
        try await loop.submit {}
        await loop.shutdownGracefully()
        #expect(task.isCancelled)
        #expect(!fired.withLock { $0 })
    }
}
