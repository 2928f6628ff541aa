import Herald
import HeraldTesting
import Testing

@Suite("ManualClock: sleeps that end when the test moves time")
struct ManualClockTests {
    @Test("sleeps end in deadline order when time reaches them, not before; the durations asked for are recorded")
    func advancing() async throws {
        let clock = ManualClock()
        let order = OrderRecorder()
        let long = Task {
            try await clock.sleep(for: .seconds(3))
            order.append("3 s")
        }
        let short = Task {
            try await clock.sleep(for: .seconds(1))
            order.append("1 s")
        }
        #expect(await eventually { clock.sleepers == 2 })
        clock.advance(by: .milliseconds(999))
        #expect(clock.sleepers == 2, "no deadline reached yet")
        clock.advance(by: .milliseconds(1))
        try await short.value
        #expect(clock.sleepers == 1)
        #expect(order.values == ["1 s"])
        clock.advance(by: .seconds(5))
        try await long.value
        #expect(order.values == ["1 s", "3 s"])
        #expect(clock.sleepers == 0)
        #expect(Set(clock.requestedSleeps) == [.seconds(1), .seconds(3)])
        #expect(clock.now.offset == .seconds(6))
    }

    @Test("a sleep whose deadline has passed returns at once")
    func pastDeadline() async throws {
        let clock = ManualClock()
        clock.advance(by: .seconds(10))
        try await clock.sleep(until: clock.now.advanced(by: .seconds(-1)))
        try await clock.sleep(for: .zero)
        #expect(clock.sleepers == 0)
    }

    @Test("cancelling a waiting sleep ends it with CancellationError and leaves nobody waiting")
    func cancelWaiting() async throws {
        let clock = ManualClock()
        let sleeping = Task { try await clock.sleep(for: .seconds(60)) }
        #expect(await eventually { clock.sleepers == 1 })
        sleeping.cancel()
        await #expect(throws: CancellationError.self) { try await sleeping.value }
        #expect(clock.sleepers == 0)
    }

    @Test("a task cancelled before it sleeps does not wait at all")
    func cancelledBeforeSleeping() async throws {
        let clock = ManualClock()
        let gate = Gate()
        let sleeping = Task {
            await gate.wait()
            try await clock.sleep(for: .seconds(60))
        }
        sleeping.cancel()
        gate.open()
        await #expect(throws: CancellationError.self) { try await sleeping.value }
        #expect(clock.sleepers == 0)
    }
}

/// Values appended from several tasks, in the order they came.
private final class OrderRecorder: Sendable {
    private let storage = Locked<[String]>([])
    func append(_ value: String) { storage.withLock { $0.append(value) } }
    var values: [String] { storage.withLock { $0 } }
}
