import HeraldTesting
import Testing

@testable import Herald

/// Fails its first `failures` calls, then records like RecordingSink.
final class FlakySink: AnalyticsSink, Sendable {
    private let state: Locked<(failuresLeft: Int, events: [AnalyticsEvent], calls: Int)>
    init(failures: Int) { state = Locked((failures, [], 0)) }
    var descriptor: PluginDescriptor { PluginDescriptor(name: "flaky") }
    struct Refused: Error {}

    func record(_ events: [AnalyticsEvent]) async throws {
        try state.withLock { state in
            state.calls += 1
            if state.failuresLeft > 0 {
                state.failuresLeft -= 1
                throw Refused()
            }
            state.events.append(contentsOf: events)
        }
    }

    var events: [AnalyticsEvent] { state.withLock { $0.events } }
    func fail(_ count: Int) { state.withLock { $0.failuresLeft = count } }
}

/// Never returns from `record` until released.
final class BlockedSink: AnalyticsSink, Sendable {
    private let gate = Gate()
    var descriptor: PluginDescriptor { PluginDescriptor(name: "blocked") }

    func record(_ events: [AnalyticsEvent]) async throws { await gate.wait() }

    func release() { gate.open() }
}

/// A sink that falls behind: it holds its first batch until ``catchUp()``, then takes every batch at once.
final class SlowSink: AnalyticsSink, Sendable {
    private let gate = Gate()
    private let events = Locked<[AnalyticsEvent]>([])
    var descriptor: PluginDescriptor { PluginDescriptor(name: "slow") }
    func record(_ batch: [AnalyticsEvent]) async throws {
        await gate.wait()
        events.withLock { $0.append(contentsOf: batch) }
    }
    /// Batches that have reached `record` (the one held included).
    var batchesArrived: Int { gate.arrived }
    var count: Int { events.withLock { $0.count } }
    func catchUp() { gate.open() }
}

@Suite("Analytics sinks: batched, ordered, retried with backoff, never slowing the bus, every loss counted")
struct AnalyticsSinkDeliveryTests {
    var configuration: Herald.Configuration {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.analyticsRetryDelay = .milliseconds(5)
        configuration.analyticsMaximumRetryDelay = .milliseconds(40)
        configuration.analyticsBatchSize = 32
        return configuration
    }

    @Test("a sink that throws gets the same batch again with backoff; it ends with every event, in order, and its failures counted")
    func throwingSinkIsRetried() async throws {
        let flaky = FlakySink(failures: 4)
        try await withHerald(configuration: configuration, plugins: [flaky]) { herald, receiver, recording in
            let token = try await herald.token()
            for n in 0..<200 {
                guard case .success = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(n)"]), to: herald) else {
                    Issue.record("refused")
                    return
                }
            }
            try await herald.waitUntilIdle()
            #expect(try await eventually { try await herald.analyticsStatistics().sinks.values.allSatisfy { $0.queued == 0 } })
            let statistics = try await herald.analyticsStatistics()
            #expect(statistics.sinks["flaky"]?.failures == 4)
            #expect(statistics.sinks["flaky"]?.lost == 0)
            #expect(statistics.sinks["flaky"]?.delivered == statistics.recorded)
            #expect(statistics.sinks["recording-sink"]?.failures == 0)
            #expect(flaky.events == recording.recorded, "the flaky sink ends with the same events in the same order")
            #expect(flaky.events.filter { $0.name == .notificationReceive }.count == 200)
        }
    }

    @Test("a batch that fails every attempt is counted lost for that sink only; later batches go through")
    func exhaustedRetriesAreCounted() async throws {
        var configuration = self.configuration
        configuration.analyticsMaximumAttempts = 3
        let flaky = FlakySink(failures: 3)
        try await withHerald(configuration: configuration, plugins: [flaky]) { herald, receiver, recording in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "first"]), to: herald)
            #expect(try await eventually { try await herald.analyticsStatistics().sinks["flaky"]?.lost ?? 0 > 0 })
            let afterFirst = try await herald.analyticsStatistics()
            #expect(afterFirst.sinks["flaky"]?.failures == 3)
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "second"]), to: herald)
            try await herald.waitUntilIdle()
            #expect(try await eventually { try await herald.analyticsStatistics().sinks["flaky"]?.queued == 0 })
            let statistics = try await herald.analyticsStatistics()
            #expect(statistics.sinks["flaky"]!.lost + statistics.sinks["flaky"]!.delivered == statistics.recorded)
            #expect(statistics.sinks["recording-sink"]?.lost == 0)
            #expect(recording.events(named: .notificationReceive).count == 2)
        }
    }

    @Test(
        "a blocked sink and a slow sink hold up neither the bus nor the other sinks; the slow one gets everything; shutdown does not wait for ever"
    )
    func blockedAndSlowSinks() async throws {
        var configuration = self.configuration
        configuration.analyticsDrainTimeout = .milliseconds(200)
        let blocked = BlockedSink()
        let slow = SlowSink()
        let handled = Locked(0)
        try await withHerald(configuration: configuration, plugins: [blocked, slow, CountingHandler(handled)]) {
            herald, receiver, recording in
            let token = try await herald.token()
            let total = 1_000
            for n in 0..<total {
                guard case .success = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(n)"]), to: herald) else {
                    Issue.record("refused \(n)")
                    return
                }
            }
            try await herald.waitUntilIdle()
            #expect(handled.withLock { $0 } == total, "every message handled while a sink is blocked and another lags")
            #expect(await eventually { recording.events(named: .notificationReceive).count == total })
            #expect(await eventually { slow.batchesArrived == 1 }, "the slow sink is on its first batch")
            #expect(slow.batchesArrived == 1 && slow.count == 0, "one batch at a time: the rest wait for it")
            slow.catchUp()
            #expect(try await eventually { try await herald.analyticsStatistics().sinks["slow"]?.queued == 0 })
            let statistics = try await herald.analyticsStatistics()
            #expect(slow.count == statistics.recorded, "the slow sink gets every event")
            #expect(statistics.sinks["slow"]?.lost == 0)
            let stuck = try #require(statistics.sinks["blocked"])
            #expect(stuck.delivered == 0)
            #expect(stuck.lost == 0)
            #expect(stuck.queued == statistics.recorded, "what the blocked sink has not taken waits for it")
        }
        blocked.release()
    }

    @Test("a blocked sink's queue is bounded: what does not fit is counted lost, never silently dropped")
    func blockedSinkOverflowIsCounted() async throws {
        var configuration = self.configuration
        configuration.analyticsBufferLimit = 300
        configuration.analyticsDrainTimeout = .milliseconds(100)
        let blocked = BlockedSink()
        try await withHerald(configuration: configuration, plugins: [blocked]) { herald, receiver, recording in
            let token = try await herald.token()
            for n in 0..<500 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(n)"]), to: herald)
            }
            try await herald.waitUntilIdle()
            #expect(await eventually { recording.events(named: .notificationReceive).count == 500 })
            let statistics = try await herald.analyticsStatistics()
            let stuck = try #require(statistics.sinks["blocked"])
            #expect(stuck.queued <= 300 + configuration.analyticsBatchSize)
            #expect(stuck.lost > 0)
            #expect(stuck.lost + stuck.queued == statistics.recorded, "every event the blocked sink did not take is counted")
            #expect(statistics.sinks["recording-sink"]?.lost == 0)
        }
        blocked.release()
    }
}

final class CountingHandler: MessageHandler, Sendable {
    let handled: Locked<Int>
    init(_ handled: Locked<Int>) { self.handled = handled }
    func didReceive(_ message: RemoteMessage) async throws { handled.withLock { $0 += 1 } }
}
