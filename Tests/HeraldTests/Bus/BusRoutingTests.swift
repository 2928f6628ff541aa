import HeraldTesting
import Testing

@testable import Herald

@Suite("The bus routes each message class to exactly the right roles")
struct BusRoutingTests {
    @Test("a display notification reaches willPresent and the presenters, not the message handlers")
    func display() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            let outcome = try await receiver.sendFCM(
                fcmBody(token: token, notification: ("Portugal vs. Denmark", "great match!")), to: herald)
            let id = try outcome.get()
            try await herald.waitUntilIdle()
            let calls = delegate.recorded
            #expect(calls.willPresent.map(\.messageID) == [id])
            #expect(calls.presented.count == 1)
            #expect(calls.presented.first?.1 == [.list, .banner])
            #expect(calls.messages.isEmpty)
            #expect(calls.fetches.isEmpty)
            #expect(calls.onLoop == [true])
            await herald.shutdown()
            #expect(sink.events(named: .notificationReceive).map(\.messageID) == [id])
            #expect(sink.events(named: .notificationForeground).map(\.messageID) == [id])
        }
    }

    @Test("a silent message wakes the background-fetch workers only")
    func silent() async throws {
        let delegate = RecordingDelegate(fetchResult: .newData)
        try await withHerald(plugins: [delegate]) { herald, receiver, sink in
            let token = try await herald.token()
            let body = fcmBody(
                token: token, data: ["city": "Lisbon"],
                apns: #"{"headers": {"apns-priority": "5", "apns-push-type": "background"}, "payload": {"aps": {"content-available": 1}}}"#)
            _ = try await receiver.sendFCM(body, to: herald).get()
            try await herald.waitUntilIdle()
            let calls = delegate.recorded
            #expect(calls.fetches.count == 1)
            #expect(calls.fetches.first?.userInfo["city"] == "Lisbon")
            #expect(calls.willPresent.isEmpty)
            #expect(calls.messages.isEmpty)
            await herald.shutdown()
            #expect(sink.events(named: .backgroundFetch).first?.parameters["result"] == "newData")
        }
    }

    @Test("a data-only message reaches the message handlers only")
    func dataOnly() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, _ in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["kind": "digest"]), to: herald).get()
            try await herald.waitUntilIdle()
            let calls = delegate.recorded
            #expect(calls.messages.count == 1)
            #expect(calls.messages.first?.data == ["kind": "digest"])
            #expect(calls.willPresent.isEmpty && calls.fetches.isEmpty)
        }
    }

    @Test("alert plus content-available takes both paths, as on iOS")
    func both() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, receiver, _ in
            let token = try await herald.token()
            let body = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"content-available": 1}}}"#)
            _ = try await receiver.sendFCM(body, to: herald).get()
            try await herald.waitUntilIdle()
            let calls = delegate.recorded
            #expect(calls.willPresent.count == 1)
            #expect(calls.fetches.count == 1)
            #expect(calls.messages.isEmpty)
        }
    }

    @Test("presentation options of several handlers combine as a union")
    func optionsUnion() async throws {
        let first = RecordingDelegate(name: "first", options: [.list])
        let second = RecordingDelegate(name: "second", options: [.banner, .sound])
        try await withHerald(plugins: [first, second]) { herald, receiver, _ in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, notification: ("t", "b")), to: herald).get()
            try await herald.waitUntilIdle()
            #expect(first.recorded.presented.first?.1 == [.list, .banner, .sound])
        }
    }

    @Test("a registered category gives its actions; an unknown one is presented without actions and recorded")
    func categories() async throws {
        let delegate = RecordingDelegate()
        let reply = NotificationAction(identifier: "REPLY", title: "Reply", textInputPlaceholder: "Say something")
        let category = NotificationCategory(identifier: "MATCH_UPDATE", actions: [reply])
        try await withHerald(plugins: [delegate], categories: [category]) { herald, receiver, sink in
            let token = try await herald.token()
            let known = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"category": "MATCH_UPDATE"}}}"#)
            let unknown = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"category": "NOPE"}}}"#)
            _ = try await receiver.sendFCM(known, to: herald).get()
            try await herald.waitUntilIdle()
            _ = try await receiver.sendFCM(unknown, to: herald).get()
            try await herald.waitUntilIdle()
            let presented = delegate.recorded.presented
            #expect(presented.count == 2)
            #expect(presented[0].2 == [reply])
            #expect(presented[1].2 == [])
            await herald.shutdown()
            #expect(
                sink.events(named: .diagnostic).contains {
                    $0.parameters["detail"] == "unknown_category" && $0.parameters["category"] == "NOPE"
                })
        }
    }

    @Test("responses reach didReceive: default, dismiss and custom actions; unknown ones are refused")
    func responses() async throws {
        let delegate = RecordingDelegate()
        let category = NotificationCategory(
            identifier: "MATCH_UPDATE", actions: [NotificationAction(identifier: "FOLLOW", title: "Follow")])
        try await withHerald(plugins: [delegate], categories: [category]) { herald, receiver, sink in
            let token = try await herald.token()
            let body = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"category": "MATCH_UPDATE"}}}"#)
            let id = try await receiver.sendFCM(body, to: herald).get()
            try await herald.waitUntilIdle()
            try await herald.respond(to: id)
            try await herald.respond(to: id, action: "FOLLOW")
            try await herald.respond(to: id, action: NotificationResponse.dismissActionIdentifier)
            await #expect(throws: HeraldError.unknownAction("UNFOLLOW", category: "MATCH_UPDATE")) {
                try await herald.respond(to: id, action: "UNFOLLOW")
            }
            await #expect(throws: HeraldError.unknownMessage("42")) { try await herald.respond(to: "42") }
            let responses = delegate.recorded.responses
            #expect(
                responses.map(\.actionIdentifier) == [
                    NotificationResponse.defaultActionIdentifier, "FOLLOW", NotificationResponse.dismissActionIdentifier,
                ])
            #expect(responses.allSatisfy { $0.message.messageID == id })
            await herald.shutdown()
            #expect(sink.events(named: .notificationOpen).count == 2)
            #expect(sink.events(named: .notificationDismiss).count == 1)
        }
    }

    @Test("each registered plugin is listed with its descriptor and the roles its conformances give it")
    func descriptors() async throws {
        let herald = Herald()
        try herald.register(RecordingDelegate(name: "delegate"))
        try herald.register(RecordingSink())
        let listed = herald.registeredPlugins
        #expect(listed.map(\.descriptor.name) == ["delegate", "recording-sink"])
        #expect(listed[0].roles == [.notificationHandler, .messageHandler, .backgroundFetchWorker, .tokenHandler, .presenter])
        #expect(listed[1].roles == .analyticsSink)
        #expect(listed[1].roles.description == "analytics-sink")
        await herald.shutdown()
    }

    @Test("a throwing handler does not stop other handlers or later messages")
    func throwingHandler() async throws {
        let thrower = RecordingDelegate(name: "thrower", throwOnMessage: true)
        let steady = RecordingDelegate(name: "steady")
        try await withHerald(plugins: [thrower, steady]) { herald, receiver, sink in
            let token = try await herald.token()
            for index in 0..<3 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
            }
            try await herald.waitUntilIdle()
            #expect(thrower.recorded.messages.count == 3)
            #expect(steady.recorded.messages.count == 3)
            await herald.shutdown()
            #expect(sink.events(named: .diagnostic).filter { $0.parameters["detail"] == "handler_failed" }.count == 3)
        }
    }
}

/// A plugin whose start throws, and one that records start and stop.
final class FailingPlugin: HeraldPlugin, Sendable {
    struct StartFailure: Error {}
    var descriptor: PluginDescriptor { PluginDescriptor(name: "failing") }
    func start(_ context: PluginContext) async throws { throw StartFailure() }
}

final class LifecyclePlugin: HeraldPlugin, Sendable {
    let events = Locked<[String]>([])
    var descriptor: PluginDescriptor { PluginDescriptor(name: "lifecycle") }
    func start(_ context: PluginContext) async throws { events.withLock { $0.append("start") } }
    func stop() async { events.withLock { $0.append("stop") } }
}

@Suite("Plugin lifecycle")
struct PluginLifecycleTests {
    @Test("a plugin whose start throws stops the start, and the plugins already started are stopped")
    func failingStart() async throws {
        let herald = Herald()
        let lifecycle = LifecyclePlugin()
        try herald.register(lifecycle)
        try herald.register(FailingPlugin())
        await #expect(throws: HeraldError.self) { try await herald.start() }
        #expect(lifecycle.events.withLock { $0 } == ["start", "stop"])
        // The instance's own loop is shut down with the failed start.
        #expect(herald.loop.lifecycle == .closed)
        await herald.shutdown()
        #expect(herald.loop.statistics.liveHandles == 0)
    }

    @Test("plugins start in order and stop in reverse at shutdown")
    func order() async throws {
        let herald = Herald()
        let first = LifecyclePlugin()
        try herald.register(first)
        try await herald.start()
        #expect(first.events.withLock { $0 } == ["start"])
        await herald.shutdown()
        #expect(first.events.withLock { $0 } == ["start", "stop"])
    }
}
