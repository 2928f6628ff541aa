import HeraldTesting
import Testing

@testable import Herald

/// A synchronous message handler that records what it is given, in a log it may share with other handlers, and
/// whether it ran on the loop thread outside any task.
final class SynchronousRecorder: SynchronousMessageHandler, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind a lock.
    struct Call {
        var message: RemoteMessage
        var onLoop: Bool
        var inTask: Bool
    }

    let name: String
    let loop: EventLoop?
    let throwing: Bool
    let log: Locked<[String]>
    private let calls = Locked<[Call]>([])

    init(name: String = "synchronous", loop: EventLoop? = nil, throwing: Bool = false, log: Locked<[String]> = Locked([])) {
        self.name = name
        self.loop = loop
        self.throwing = throwing
        self.log = log
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }
    var recorded: [Call] { calls.withLock { $0 } }

    struct Failure: Error {}

    func handle(_ message: RemoteMessage) throws {
        let call = Call(message: message, onLoop: loop?.inEventLoop ?? true, inTask: withUnsafeCurrentTask { $0 != nil })
        calls.withLock { $0.append(call) }
        log.withLock { $0.append("\(name):\(message.data["n"] ?? "")") }
        if throwing { throw Failure() }
    }
}

/// An asynchronous message handler that writes to a shared log, suspending once per message.
final class LoggingHandler: MessageHandler, Sendable {
    let name: String
    let log: Locked<[String]>

    init(name: String, log: Locked<[String]>) {
        self.name = name
        self.log = log
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }

    func didReceive(_ message: RemoteMessage) async throws {
        await Task.yield()
        log.withLock { $0.append("\(name):\(message.data["n"] ?? "")") }
    }
}

/// The in-memory store claiming durability, so that the bus keeps the durable inbox with it: what is committed
/// survives as long as the store object, which is enough to start a second instance on it.
final class DurableMemoryStore: HeraldStore, Sendable {
    let base = InMemoryStore()
    var isDurable: Bool { true }
    func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState { try base.load(window: window, now: now) }
    func save(identity: StoredIdentity) throws(StoreError) { try base.save(identity: identity) }
    func setTopic(_ name: String, subscribed: Bool) throws(StoreError) { try base.setTopic(name, subscribed: subscribed) }
    func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        try base.commit(batch, window: window, now: now)
    }
    func deleteAll() throws(StoreError) { try base.deleteAll() }
}

/// A plugin that takes both message handler roles: only its synchronous one is called.
final class BothRoles: SynchronousMessageHandler, MessageHandler, Sendable {
    let calls = Locked<[String]>([])
    func handle(_ message: RemoteMessage) throws { calls.withLock { $0.append("handle") } }
    func didReceive(_ message: RemoteMessage) async throws { calls.withLock { $0.append("didReceive") } }
}

@Suite("Synchronous message handlers: called on the loop without a task, with the async path's semantics")
struct SynchronousHandlerTests {
    @Test("a synchronous handler gets every data-only message once, in order, on the loop thread, outside any task")
    func everyMessageOnceInOrder() async throws {
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let handler = SynchronousRecorder(loop: herald.loop)
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, handler]) { herald in
            let token = try await herald.token()
            for index in 0..<200 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
                // Handled inside the delivery: nothing is left in flight by the time the sender has its answer.
                #expect(try await herald.loop.submit { try herald.bus.messagesInFlight } == 0)
            }
            try await herald.waitUntilIdle()
            let calls = handler.recorded
            #expect(calls.map { $0.message.data["n"] } == (0..<200).map { "\($0)" })
            #expect(Set(calls.compactMap(\.message.messageID)).count == 200)
            #expect(calls.allSatisfy { $0.onLoop && !$0.inTask })
        }
    }

    @Test("notifications still go to the notification handlers, and data-only messages to the synchronous handler only")
    func notificationsUnchanged() async throws {
        let delegate = RecordingDelegate()
        let handler = SynchronousRecorder()
        try await withHerald(plugins: [handler, delegate]) { herald, receiver, _ in
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, notification: ("t", "b")), to: herald).get()
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.willPresent.count == 1)
            #expect(delegate.recorded.presented.count == 1)
            #expect(handler.recorded.isEmpty)
        }
    }

    @Test("synchronous and asynchronous handlers of one message run in registration order, each message once")
    func mixed() async throws {
        let log = Locked<[String]>([])
        let first = LoggingHandler(name: "a1", log: log)
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let synchronous = SynchronousRecorder(name: "s", loop: herald.loop, log: log)
        let last = LoggingHandler(name: "a2", log: log)
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, first, synchronous, last]) { herald in
            let token = try await herald.token()
            for index in 0..<20 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
            }
            try await herald.waitUntilIdle()
            let entries = log.withLock { $0 }
            #expect(entries.count == 60)
            for index in 0..<20 {
                #expect(entries.filter { $0.hasSuffix(":\(index)") } == ["a1:\(index)", "s:\(index)", "a2:\(index)"])
            }
            // With an asynchronous handler beside it, the message has a task, and the synchronous handler is
            // called from it, still on the loop thread.
            #expect(synchronous.recorded.allSatisfy { $0.onLoop && $0.inTask })
            #expect(synchronous.recorded.count == 20)
        }
    }

    @Test("a throwing synchronous handler is logged and recorded; other handlers and later messages go on")
    func throwing() async throws {
        let thrower = SynchronousRecorder(name: "thrower", throwing: true)
        let steady = SynchronousRecorder(name: "steady")
        try await withHerald(plugins: [thrower, steady]) { herald, receiver, sink in
            let token = try await herald.token()
            for index in 0..<3 {
                let outcome = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald)
                #expect((try? outcome.get()) != nil)
            }
            try await herald.waitUntilIdle()
            #expect(thrower.recorded.count == 3)
            #expect(steady.recorded.count == 3)
            await herald.shutdown()
            let failures = sink.events(named: .diagnostic).filter { $0.parameters["detail"] == "handler_failed" }
            #expect(failures.count == 3)
            #expect(failures.allSatisfy { $0.parameters["plugin"] == "thrower" && $0.parameters["error"] == "Failure()" })
        }
    }

    @Test("the analytics events of the synchronous path are the asynchronous path's")
    func sameAnalytics() async throws {
        func events(with handler: any HeraldPlugin) async throws -> [String] {
            var seen: [String] = []
            try await withHerald(plugins: [handler]) { herald, receiver, sink in
                let token = try await herald.token()
                for index in 0..<3 {
                    _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
                }
                _ = try await receiver.sendFCM(fcmBody(token: "someone-else", data: ["n": "x"]), to: herald)
                try await herald.waitUntilIdle()
                await herald.shutdown()
                seen = sink.recorded.map { event in
                    let parameters = event.parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    return "\(event.name.rawValue) \(event.messageType ?? "-") \(parameters.joined(separator: ","))"
                }
            }
            return seen
        }
        let synchronous = try await events(with: SynchronousRecorder(name: "handler", throwing: true))
        let asynchronous = try await events(with: RecordingDelegate(name: "handler", throwOnMessage: true))
        #expect(synchronous == asynchronous)
        #expect(synchronous.filter { $0.contains("handler_failed") }.count == 3)
        #expect(synchronous.filter { $0.hasPrefix("notification_receive") }.count == 3)
    }

    @Test("a synchronous handler is listed as a message handler; a plugin with both roles is called through the synchronous one once")
    func roles() async throws {
        let both = BothRoles()
        try await withHerald(plugins: [SynchronousRecorder(name: "synchronous"), both]) { herald, receiver, _ in
            // After withHerald's receiver and sink.
            #expect(herald.registeredPlugins.suffix(2).map(\.roles) == [.messageHandler, .messageHandler])
            let token = try await herald.token()
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "1"]), to: herald).get()
            try await herald.waitUntilIdle()
            #expect(both.calls.withLock { $0 } == ["handle"])
        }
    }

    @Test("at an in-flight bound of 1, each message leaves the bus as it is handled: none refused, the receivers resumed")
    func inFlightBound() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.maxInFlight = 1
        let handler = SynchronousRecorder()
        try await withHerald(configuration: configuration, plugins: [handler]) { herald, receiver, sink in
            let token = try await herald.token()
            for index in 0..<10 {
                _ = try await receiver.sendFCM(fcmBody(token: token, data: ["n": "\(index)"]), to: herald).get()
            }
            try await herald.waitUntilIdle()
            #expect(handler.recorded.count == 10)
            #expect(try await herald.loop.submit { try herald.bus.isFull } == false)
            await herald.shutdown()
            #expect(sink.events(named: .messageDropped).isEmpty)
        }
    }

    @Test("with the durable inbox, a message handled synchronously leaves the inbox: the next start replays nothing")
    func durableInboxRemoval() async throws {
        let store = DurableMemoryStore()
        let first = SynchronousRecorder()
        try await withStarted(Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store), plugins: [first]) {
            herald in
            let token = try await herald.token()
            let bus = try herald.bus
            for index in 0..<5 {
                let message = RemoteMessage(userInfo: ["n": .string("\(index)")], target: .token(token))
                _ = try await bus.deliver(message).get()
            }
            try await herald.waitUntilIdle()
        }
        #expect(first.recorded.count == 5)
        #expect(try store.load(window: .init(), now: 0).pending.isEmpty)
        let second = SynchronousRecorder()
        try await withStarted(Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store), plugins: [second]) {
            herald in
            try await herald.waitUntilIdle()
        }
        #expect(second.recorded.isEmpty)
    }
}
