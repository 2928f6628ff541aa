import HeraldTesting
import Testing

@testable import Herald

/// A handler that suspends once (its message stays in flight until the loop runs it again).
final class YieldingHandler: MessageHandler {
    func didReceive(_ message: RemoteMessage) async throws { await Task.yield() }
}

/// A message handler that holds each message until the test opens the gate.
final class GatedHandler: MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: state behind a lock.
    private let state = Locked<(open: Bool, waiting: [CheckedContinuation<Void, Never>], handled: Int)>((false, [], 0))

    func didReceive(_ message: RemoteMessage) async throws {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let open = state.withLock { state in
                if !state.open { state.waiting.append(continuation) }
                return state.open
            }
            if open { continuation.resume() }
        }
        state.withLock { $0.handled += 1 }
    }

    var handled: Int { state.withLock { $0.handled } }
    var waiting: Int { state.withLock { $0.waiting.count } }

    func open() {
        let waiting = state.withLock { state in
            state.open = true
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}

@Suite("The bus: targeting, de-duplication, expiry, backpressure, wiring, identity")
struct BusDeliveryTests {
    @Test("a wrong token is UNREGISTERED; the installation ID (fid) reaches the instance")
    func targeting() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, _ in
            let wrong = try await receiver.sendFCM(fcmBody(token: "someone-else", data: ["a": "b"]), to: herald)
            #expect(wrong.failure?.status == .unregistered)
            #expect(wrong.failure?.status.httpStatus == 404)
            let fid = try await herald.installationID()
            let byFID = try await receiver.sendFCM(#"{"message": {"fid": "\#(fid)", "data": {"a": "b"}}}"#, to: herald)
            #expect((try? byFID.get()) != nil)
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.count == 1)
        }
    }

    @Test("topics: unsubscribed is accepted and dropped; subscribed and matching conditions are delivered")
    func topicsAndConditions() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, sink in
            let before = try await receiver.sendFCM(#"{"message": {"topic": "weather", "data": {"n": "1"}}}"#, to: herald)
            #expect((try? before.get()) != nil)
            try await herald.subscribe(toTopic: "/topics/weather")
            #expect(try await herald.subscribedTopics() == ["weather"])
            _ = try await receiver.sendFCM(#"{"message": {"topic": "weather", "data": {"n": "2"}}}"#, to: herald).get()
            let condition = #"'weather' in topics && ('news' in topics || !('sports' in topics))"#
            _ = try await receiver.sendFCM(#"{"message": {"condition": "\#(condition)", "data": {"n": "3"}}}"#, to: herald).get()
            try await herald.subscribe(toTopic: "sports")
            _ = try await receiver.sendFCM(#"{"message": {"condition": "\#(condition)", "data": {"n": "4"}}}"#, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.map { $0.data["n"] } == ["2", "3"])
            #expect(delegate.recorded.messages.first?.from == "/topics/weather")
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).filter { $0.parameters["reason"] == "not_targeted" }.count == 2)
            #expect(sink.events(named: .topicSubscribe).count == 2)
        }
    }

    @Test("receivers are told the topics at start and after every change")
    func receiversToldTopics() async throws {
        let receiver = TopicWatchingReceiver()
        try await withHerald(plugins: [receiver]) { herald, _, _ in
            try await herald.subscribe(toTopic: "weather")
            try await herald.subscribe(toTopic: "weather")
            try await herald.subscribe(toTopic: "news")
            try await herald.unsubscribe(fromTopic: "weather")
            #expect(receiver.seen.withLock { $0 } == [[], ["weather"], ["weather", "news"], ["news"]])
        }
    }

    @Test("a message ID seen before is acknowledged again and delivered once")
    func duplicates() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            let headers = ["apns-id": "123E4567-E89B-12D3-A456-426614174000"]
            let first = try await receiver.sendAPNs(#"{"kind": "x"}"#, headers: headers, deviceToken: token, to: herald)
            let second = try await receiver.sendAPNs(#"{"kind": "x"}"#, headers: headers, deviceToken: token, to: herald)
            #expect(try first.get() == "123e4567-e89b-12d3-a456-426614174000")
            #expect(try second.get() == "123e4567-e89b-12d3-a456-426614174000")
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.count == 1)
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).map { $0.parameters["reason"] } == ["duplicate"])
        }
    }

    @Test("with the de-duplication window off (a count of 0) a message ID seen before is a new message")
    func windowOff() async throws {
        let delegate = RecordingDelegate()
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.deduplication = DeduplicationWindow(maximumCount: 0)
        try await withHerald(configuration: configuration, plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            let headers = ["apns-id": "123E4567-E89B-12D3-A456-426614174000"]
            for _ in 0..<2 {
                _ = try await receiver.sendAPNs(#"{"kind": "x"}"#, headers: headers, deviceToken: token, to: herald).get()
                try await herald.waitUntilIdle()
            }
            #expect(delegate.recorded.messages.count == 2)
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).isEmpty)
        }
    }

    @Test("an expired message is accepted and dropped, never handled")
    func expired() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            let outcome = try await receiver.sendAPNs(
                #"{"kind": "x"}"#, headers: ["apns-expiration": "1000"], deviceToken: token, to: herald)
            #expect((try? outcome.get()) != nil)
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.isEmpty)
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).map { $0.parameters["reason"] } == ["expired"])
        }
    }

    @Test("validate_only checks and targets without delivering")
    func validateOnly() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, _ in
            let token = try await herald.token()
            let body = #"{"message": {"token": "\#(token)", "data": {"a": "b"}}, "validate_only": true}"#
            #expect((try? await receiver.sendFCM(body, to: herald).get()) != nil)
            let wrong = #"{"message": {"token": "nope", "data": {"a": "b"}}, "validate_only": true}"#
            #expect(try await receiver.sendFCM(wrong, to: herald).failure?.status == .unregistered)
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.isEmpty)
        }
    }

    @Test("when the bound is reached, senders get QUOTA_EXCEEDED and receivers pause, then resume")
    func backpressure() async throws {
        var configuration = Herald.Configuration(senderID: "1")
        configuration.maxInFlight = 4
        let gated = GatedHandler()
        try await withHerald(configuration: configuration, plugins: [gated]) { herald, receiver, sink in
            let token = try await herald.token()
            for index in 0..<4 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
            }
            #expect(receiver.backpressure.paused)
            let refused = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "late"]), to: herald)
            #expect(refused.failure?.status == .quotaExceeded)
            #expect(refused.failure?.status.httpStatus == 429)
            #expect(await eventually { gated.waiting == 4 })
            gated.open()
            try await herald.waitUntilIdle()
            #expect(gated.handled == 4)
            #expect(!receiver.backpressure.paused)
            #expect(receiver.backpressure.resumes == 1)
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "after"]), to: herald).get()
            try await herald.waitUntilIdle()
            #expect(gated.handled == 5)
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).map { $0.parameters["reason"] } == ["rejected_backpressure"])
        }
    }

    @Test("a bus that fills and drains many times warns once per interval, with the count, not once per cycle")
    func pauseWarningsAreRateLimited() async throws {
        var configuration = Herald.Configuration(senderID: "1")
        configuration.maxInFlight = 2
        let logs = LogCollector()
        let herald = Herald(configuration: patientShutdown(configuration), logger: logs.logger())
        let receiver = InMemoryReceiver()
        try herald.register(receiver)
        // Handlers start at once when a message is admitted; one that suspends keeps its message in flight.
        try herald.register(YieldingHandler())
        try await herald.start()
        let token = try await herald.token()
        let bus = try herald.bus
        let message = try FCMSendRequest.decode(Array(fcmBody(token: token, data: ["n": "1"]).utf8), context: herald.decodingContext)
            .message
        let clock = ContinuousClock()
        let started = clock.now
        for _ in 0..<20 {
            // Two messages in one loop turn fill the bus (maxInFlight 2); they finish and it drains.
            try await herald.loop.submit {
                var copy = message
                for _ in 0..<2 {
                    copy.userInfo[UserInfoKey.messageID] = nil
                    bus.deliver(copy) { _ in }
                }
            }
            try await herald.waitUntilIdle()
        }
        let elapsed = clock.now - started
        #expect(receiver.backpressure.pauses == 20 && receiver.backpressure.resumes == 20)
        let warnings = logs.all.filter { $0.message.hasPrefix("bus full") }
        // One warning per 10 s at the most: one, or a few more when the cycles took longer than that (a busy machine).
        #expect(warnings.count >= 1 && warnings.count <= 1 + Int(elapsed / .seconds(10)), "\(warnings.count) warnings in \(elapsed)")
        #expect(warnings.allSatisfy { $0.level == .warning })
        #expect(warnings.first?.metadata["times_full"] == "1")
        #expect(logs.all.filter { $0.message.hasPrefix("bus has room") }.allSatisfy { $0.level == .debug })
        await herald.shutdown()
    }

    @Test("a slow handler holds up only its own message")
    func slowHandlerDoesNotStall() async throws {
        let gated = GatedHandler()
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [gated, delegate]) { herald, receiver, _ in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "slow"]), to: herald).get()
            _ = try await receiver.sendFCM(fcmBody(token: token, notification: ("t", "b")), to: herald).get()
            #expect(await eventually { delegate.recorded.presented.count == 1 })
            #expect(try await herald.loop.submit { true })
            gated.open()
            try await herald.waitUntilIdle()
        }
    }

    @Test("manual wiring: appDidReceiveMessage outside a handler records the receipt once; the bus records no receipt or impression itself")
    func manualWiring() async throws {
        var configuration = Herald.Configuration(senderID: "1")
        configuration.analyticsWiring = .manual
        let delegate = RecordingDelegate()
        try await withHerald(configuration: configuration, plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, notification: ("t", "b")), to: herald).get()
            try await herald.waitUntilIdle()
            let message = try #require(delegate.recorded.willPresent.first)
            #expect(try await herald.appDidReceiveMessage(message))
            #expect(try await !herald.appDidReceiveMessage(message))
            await herald.shutdown()
            #expect(sink.events(named: .notificationReceive).count == 1)
            #expect(sink.events(named: .notificationForeground).isEmpty)
        }
    }

    @Test("token handlers get the token at start and on rotation; the old token is then UNREGISTERED")
    func tokens() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, _ in
            let first = try await herald.token()
            let fid = try await herald.installationID()
            #expect(first.hasPrefix(fid + ":"))
            #expect(delegate.recorded.tokens == [first])
            try await herald.deleteToken()
            let second = try await herald.token()
            #expect(second != first)
            #expect(delegate.recorded.tokens == [first, second])
            #expect(try await receiver.sendFCM(fcmBody(token: first, data: ["a": "b"]), to: herald).failure?.status == .unregistered)
            #expect((try? await receiver.sendFCM(fcmBody(token: second, data: ["a": "b"]), to: herald).get()) != nil)
        }
    }

    @Test("after shutdown, deliveries are refused with UNAVAILABLE")
    func afterShutdown() async throws {
        try await withHerald { herald, receiver, _ in
            await herald.shutdown()
            let outcome = await herald.deliver(RemoteMessage(userInfo: [:], target: .token("x")))
            #expect(outcome.failure?.status == .unavailable)
            #expect(throws: HeraldError.alreadyStarted) { try herald.register(RecordingDelegate()) }
            _ = receiver
        }
    }

    @Test("two instances in one process stay independent")
    func twoInstances() async throws {
        let a = RecordingDelegate(name: "a")
        let b = RecordingDelegate(name: "b")
        try await withHerald(plugins: [a]) { heraldA, receiverA, _ in
            try await withHerald(plugins: [b]) { heraldB, receiverB, _ in
                let tokenA = try await heraldA.token()
                let tokenB = try await heraldB.token()
                #expect(tokenA != tokenB)
                #expect(heraldA.loop !== heraldB.loop)
                #expect(try await receiverB.sendFCM(fcmBody(token: tokenA, data: ["a": "b"]), to: heraldB).failure?.status == .unregistered)
                _ = try await receiverA.sendFCM(fcmBody(token: tokenA, data: ["to": "a"]), to: heraldA).get()
                _ = try await receiverB.sendFCM(fcmBody(token: tokenB, data: ["to": "b"]), to: heraldB).get()
                try await heraldA.subscribe(toTopic: "only-a")
                #expect(try await heraldB.subscribedTopics().isEmpty)
                try await heraldA.waitUntilIdle()
                try await heraldB.waitUntilIdle()
                #expect(a.recorded.messages.map { $0.data["to"] } == ["a"])
                #expect(b.recorded.messages.map { $0.data["to"] } == ["b"])
            }
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// A receiver that records every topic set it is told.
final class TopicWatchingReceiver: Receiver, Sendable {
    let seen = Locked<[Set<String>]>([])
    func topicsDidChange(_ topics: Set<String>) { seen.withLock { $0.append(topics) } }
}
