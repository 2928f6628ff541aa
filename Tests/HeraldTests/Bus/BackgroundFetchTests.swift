import HeraldTesting
import Testing

@testable import Herald

/// A worker that never finishes on its own; it notices cancellation.
final class HangingWorker: BackgroundFetchWorker, Sendable {
    let started = Locked(0)
    let cancelled = Locked(0)
    var descriptor: PluginDescriptor { PluginDescriptor(name: "hanging") }

    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        started.withLock { $0 += 1 }
        // Waits for the cancellation itself, not for time.
        let waiter = Locked<(cancelled: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let already = waiter.withLock { state in
                    if !state.cancelled { state.continuation = continuation }
                    return state.cancelled
                }
                if already { continuation.resume() }
            }
        } onCancel: {
            let continuation = waiter.withLock { state in
                state.cancelled = true
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }
        cancelled.withLock { $0 += 1 }
        return .newData
    }
}

@Suite("Background fetch: deadline, combined results, off the loop")
struct BackgroundFetchTests {
    static let silentAPNs = #"{"aps": {"content-available": 1}}"#
    static let backgroundHeaders = ["apns-push-type": "background", "apns-priority": "5"]

    @Test("combining results: newData wins, then noData, failed only when every worker failed")
    func combineRule() {
        #expect(BackgroundFetchResult.combined([.failed, .newData, .noData]) == .newData)
        #expect(BackgroundFetchResult.combined([.failed, .noData]) == .noData)
        #expect(BackgroundFetchResult.combined([.failed, .failed]) == .failed)
        #expect(BackgroundFetchResult.combined([]) == .noData)
    }

    @Test("a worker past the deadline is cancelled and counted failed, with manual time")
    func deadline() async throws {
        let clock = ManualEventLoop()
        var configuration = Herald.Configuration(senderID: "1")
        configuration.backgroundFetchDeadline = .seconds(30)
        let worker = HangingWorker()
        try await withHerald(configuration: configuration, timeSource: clock, plugins: [worker]) {
            herald, receiver, sink in
            let token = try await herald.token()
            _ = try await receiver.sendAPNs(Self.silentAPNs, headers: Self.backgroundHeaders, deviceToken: token, to: herald).get()
            #expect(await eventually { worker.started.withLock { $0 } == 1 })
            clock.advanceTime(by: .seconds(29))
            // The deadline has not passed: its timer is still pending and nothing was cancelled.
            #expect(clock.pendingTimerCount == 1)
            #expect(worker.cancelled.withLock { $0 } == 0)
            clock.advanceTime(by: .seconds(1))
            try await herald.waitUntilIdle()
            #expect(await eventually { worker.cancelled.withLock { $0 } == 1 })
            await herald.shutdown()
            let fetch = try #require(sink.events(named: .backgroundFetch).first)
            #expect(fetch.parameters["result"] == "failed")
            #expect(fetch.parameters["duration_ms"] == "30000")
            #expect(sink.events(named: .diagnostic).contains { $0.parameters["detail"] == "fetch_deadline" })
        }
    }

    @Test("the deadline counts from when the worker starts: a worker that waited longer than it for a thread is not failed")
    func deadlineFromStart() async throws {
        let worker = OffLoopWorker()
        try await withWorkHeldBackAMinute(plugins: [worker]) { herald, receiver, token in
            worker.loop.withLock { $0 = herald.loop }
            _ = try await receiver.sendAPNs(Self.silentAPNs, headers: Self.backgroundHeaders, deviceToken: token, to: herald).get()
        } then: { herald, sink in
            #expect(worker.ranOnLoop.withLock { $0 } == false)
            await herald.shutdown()
            let fetch = try #require(sink.events(named: .backgroundFetch).first)
            #expect(fetch.parameters["result"] == "noData")
            #expect(!sink.events(named: .diagnostic).contains { $0.parameters["detail"] == "fetch_deadline" })
        }
    }

    @Test("several workers: their results combine; workers run off the loop thread")
    func combinedWorkers() async throws {
        let failing = RecordingDelegate(name: "failing", fetchResult: .failed)
        let fresh = RecordingDelegate(name: "fresh", fetchResult: .newData)
        let offLoop = OffLoopWorker()
        try await withHerald(plugins: [failing, fresh, offLoop]) { herald, receiver, sink in
            offLoop.loop.withLock { $0 = herald.loop }
            let token = try await herald.token()
            _ = try await receiver.sendAPNs(Self.silentAPNs, headers: Self.backgroundHeaders, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(failing.recorded.fetches.count == 1 && fresh.recorded.fetches.count == 1)
            #expect(offLoop.ranOnLoop.withLock { $0 } == false)
            await herald.shutdown()
            #expect(sink.events(named: .backgroundFetch).first?.parameters["result"] == "newData")
            #expect(sink.events(named: .backgroundFetch).first?.parameters["workers"] == "3")
        }
    }
}

final class OffLoopWorker: BackgroundFetchWorker, Sendable {
    let loop = Locked<EventLoop?>(nil)
    let ranOnLoop = Locked<Bool?>(nil)
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        let onLoop = loop.withLock { $0 }?.inEventLoop ?? true
        ranOnLoop.withLock { $0 = onLoop }
        return .noData
    }
}
