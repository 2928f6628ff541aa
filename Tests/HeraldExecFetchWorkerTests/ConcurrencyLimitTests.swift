import HeraldEventLoop
import HeraldTesting
import Testing

@testable import HeraldExecFetchWorker

@Suite("ExecFetchWorker's concurrency limit, changed while held (a reload's exec-fetch-concurrency)")
struct ConcurrencyLimitTests {
    /// Starts a caller that waits for a place; returns once it waits.
    static func waiter(_ limit: ConcurrencyLimit) async -> Task<Bool, Never> {
        let waiting = Flag()
        let task = Task { await limit.acquire(waiting: { waiting.set() }) }
        #expect(await eventually { waiting.isSet })
        return task
    }

    final class Flag: Sendable {
        private let value = Locked(false)
        func set() { value.withLock { $0 = true } }
        var isSet: Bool { value.withLock { $0 } }
    }

    @Test("lowered under its holders: they keep their places, and a waiter gets one only once fewer than the new limit hold one")
    func lowered() async {
        let limit = ConcurrencyLimit(limit: 2)
        #expect(await limit.acquire())
        #expect(await limit.acquire())
        let third = await Self.waiter(limit)
        limit.setLimit(1)
        limit.release()
        #expect(limit.holders.now == 1, "one holds a place, the limit: the waiter still waits")
        limit.release()
        #expect(await third.value)
        #expect(limit.holders.now == 1)
        limit.release()
        #expect(limit.holders.now == 0)
    }

    @Test("raised: the longest waiters get the new places at once")
    func raised() async {
        let limit = ConcurrencyLimit(limit: 1)
        #expect(await limit.acquire())
        let second = await Self.waiter(limit)
        let third = await Self.waiter(limit)
        limit.setLimit(3)
        #expect(await second.value)
        #expect(await third.value)
        #expect(limit.holders == (now: 3, most: 3))
    }
}
