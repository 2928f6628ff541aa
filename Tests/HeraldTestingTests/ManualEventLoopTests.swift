import HeraldTesting
import Testing

@testable import Herald

/// Records in order from the single test thread that drives the manual loop.
final class Log: Sendable {
    private let entries = Locked<[String]>([])
    func add(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

@Suite("ManualEventLoop: timers and deadlines without sleeping")
struct ManualEventLoopTests {
    @Test("time moves only when the test moves it")
    func manualTime() {
        let loop = ManualEventLoop()
        let start = loop.now
        let log = Log()
        loop.scheduleTask(in: .seconds(30)) { log.add("deadline") }
        loop.run()
        #expect(log.all.isEmpty)
        loop.advanceTime(by: .seconds(29))
        #expect(log.all.isEmpty)
        #expect(loop.now == start + .seconds(29))
        loop.advanceTime(by: .seconds(1))
        #expect(log.all == ["deadline"])
    }

    @Test("timers fire in deadline order and see their own deadline as now")
    func orderAndNow() {
        let loop = ManualEventLoop()
        let start = loop.now
        let log = Log()
        for (name, seconds) in [("c", 3), ("a", 1), ("b", 2), ("a2", 1)] {
            loop.scheduleTask(in: .seconds(seconds)) { log.add("\(name)@\(loop.now - start)") }
        }
        loop.advanceTime(by: .seconds(10))
        #expect(log.all == ["a@1.0 seconds", "a2@1.0 seconds", "b@2.0 seconds", "c@3.0 seconds"])
        #expect(loop.now == start + .seconds(10))
    }

    @Test("cancelled timers never fire")
    func cancel() {
        let loop = ManualEventLoop()
        let log = Log()
        let task = loop.scheduleTask(in: .seconds(1)) { log.add("fired") }
        #expect(task.cancel())
        #expect(!task.cancel())
        loop.advanceTime(by: .seconds(5))
        #expect(log.all.isEmpty)
    }

    @Test("work queued and timers scheduled by a timer run within the same advance")
    func cascading() {
        let loop = ManualEventLoop()
        let log = Log()
        loop.scheduleTask(in: .seconds(1)) {
            log.add("first")
            loop.execute { log.add("queued") }
            loop.scheduleTask(in: .seconds(1)) { log.add("second") }
        }
        loop.advanceTime(by: .seconds(2))
        #expect(log.all == ["first", "queued", "second"])
    }

    @Test("repeated tasks run at each period until cancelled")
    func repeated() {
        let loop = ManualEventLoop()
        let log = Log()
        let repeated = loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(2)) { _ in log.add("tick") }
        loop.advanceTime(by: .seconds(1))
        #expect(log.all.count == 1)
        loop.advanceTime(by: .seconds(6))
        #expect(log.all.count == 4)
        repeated.cancel()
        loop.advanceTime(by: .seconds(60))
        #expect(log.all.count == 4)
    }

    @Test("a deadline computed from the loop's clock (as a background-fetch deadline would be) fires exactly on time")
    func deadlineAtExactTime() {
        let loop = ManualEventLoop()
        let log = Log()
        let deadline = loop.now + .seconds(30)
        loop.scheduleTask(deadline: deadline) { log.add("timed out") }
        loop.advanceTime(to: deadline - .nanoseconds(1))
        #expect(log.all.isEmpty)
        loop.advanceTime(to: deadline)
        #expect(log.all == ["timed out"])
    }

    @Test("Deadline arithmetic saturates instead of overflowing")
    func deadlineArithmetic() {
        #expect(Deadline.distantFuture + .seconds(1) == .distantFuture)
        #expect(Deadline.distantPast + .seconds(-1) == .distantPast)
        let a = Deadline(uptimeNanoseconds: 5_000)
        #expect((a + .nanoseconds(-2_000)).uptimeNanoseconds == 3_000)
        #expect(a - Deadline(uptimeNanoseconds: 8_000) == .nanoseconds(-3_000))
        // Durations to nanoseconds: the fraction truncated toward zero, clamped at Int64's ends.
        #expect(Duration.milliseconds(1_500).nanosecondsClamped == 1_500_000_000)
        #expect((Duration.zero - .milliseconds(1_500)).nanosecondsClamped == -1_500_000_000)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: 1_999_999_999).nanosecondsClamped == 1)
        #expect(Duration(secondsComponent: 0, attosecondsComponent: -1_999_999_999).nanosecondsClamped == -1)
        #expect(Duration.seconds(Int64.max).nanosecondsClamped == .max)
        #expect(Duration.seconds(Int64.min).nanosecondsClamped == .min)
    }
}
