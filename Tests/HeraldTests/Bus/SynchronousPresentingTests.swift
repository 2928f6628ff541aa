import Herald
import HeraldEventLoop
import HeraldTesting
import Testing

/// A synchronous notification handler and presenter that records what it is given, in a log it may share with
/// other plugins, and whether it ran on the loop thread outside any task.
final class SynchronousPresentingRecorder: SynchronousNotificationHandler, SynchronousPresenter, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind a lock.
    struct Call {
        var step: String
        var message: RemoteMessage
        var options: PresentationOptions
        var actions: [NotificationAction]
        var onLoop: Bool
        var inTask: Bool
    }

    let name: String
    let loop: EventLoop?
    let options: PresentationOptions
    let log: Locked<[String]>
    private let calls = Locked<[Call]>([])

    init(name: String = "synchronous", loop: EventLoop? = nil, options: PresentationOptions = [.banner], log: Locked<[String]> = Locked([]))
    {
        self.name = name
        self.loop = loop
        self.options = options
        self.log = log
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }
    var recorded: [Call] { calls.withLock { $0 } }
    func recorded(_ step: String) -> [Call] { recorded.filter { $0.step == step } }

    private func note(_ step: String, _ message: RemoteMessage, options: PresentationOptions = [], actions: [NotificationAction] = []) {
        let call = Call(
            step: step, message: message, options: options, actions: actions, onLoop: loop?.inEventLoop ?? true,
            inTask: withUnsafeCurrentTask { $0 != nil })
        calls.withLock { $0.append(call) }
        log.withLock { $0.append("\(name).\(step):\(message.aps.alert?.title ?? "")") }
    }

    func presentationOptions(for message: RemoteMessage) -> PresentationOptions {
        note("options", message)
        return options
    }

    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {
        note("show", message, options: options, actions: actions)
    }
}

/// An asynchronous notification handler and presenter that suspends once per call and writes to a shared log.
final class SuspendingPresentingPlugin: NotificationHandler, Presenter, Sendable {
    let name: String
    let log: Locked<[String]>

    init(name: String, log: Locked<[String]>) {
        self.name = name
        self.log = log
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        await Task.yield()
        log.withLock { $0.append("\(name).options:\(message.aps.alert?.title ?? "")") }
        return [.sound]
    }

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        await Task.yield()
        log.withLock { $0.append("\(name).show:\(message.aps.alert?.title ?? "")") }
    }
}

/// A plugin that takes both notification handler roles and both presenter roles: "will present" and presenting go
/// through the synchronous ones; a person's responses reach its `NotificationHandler.didReceive(_:)`.
final class BothPresentingRoles: SynchronousNotificationHandler, NotificationHandler, SynchronousPresenter, Presenter, Sendable {
    let calls = Locked<[String]>([])
    func presentationOptions(for message: RemoteMessage) -> PresentationOptions {
        calls.withLock { $0.append("presentationOptions") }
        return []
    }
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        calls.withLock { $0.append("willPresent") }
        return []
    }
    func didReceive(_ response: NotificationResponse) async { calls.withLock { $0.append("didReceive:\(response.actionIdentifier)") } }
    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {
        calls.withLock { $0.append("show") }
    }
    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        calls.withLock { $0.append("present") }
    }
}

/// A content modifier that sets the title to the message's `secret`.
private final class TitleFromSecret: ContentModifier {
    func modify(_ request: ContentModificationRequest) async {
        request.update { $0.title = request.message.data["secret"] }
    }
}

/// A background-fetch worker that counts its fetches.
private final class CountingFetchWorker: BackgroundFetchWorker {
    let fetches = Locked(0)
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        fetches.withLock { $0 += 1 }
        return .newData
    }
}

@Suite("Synchronous notification handlers and presenters: called on the loop without a task, with the async path's semantics")
struct SynchronousPresentingTests {
    static let reply = NotificationAction(identifier: "REPLY", title: "Reply")
    static let categories = [NotificationCategory(identifier: "CHAT", actions: [reply])]

    @Test("a display notification goes to synchronous handlers and presenters once each, in order, on the loop thread, outside any task")
    func everyNotificationOnce() async throws {
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        for category in Self.categories { try herald.register(category: category) }
        let first = SynchronousPresentingRecorder(name: "first", loop: herald.loop, options: [.banner])
        let second = SynchronousPresentingRecorder(name: "second", loop: herald.loop, options: [.sound])
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, first, second]) { herald in
            let token = try await herald.token()
            for index in 0..<50 {
                let body = fcmBody(token: token, notification: ("n\(index)", "b"), apns: #"{"payload": {"aps": {"category": "CHAT"}}}"#)
                _ = try await receiver.sendFCM(body, to: herald).get()
                // Presented inside the delivery: nothing is left in flight by the time the sender has its answer.
                #expect(try await herald.loop.submit { try herald.bus.messagesInFlight } == 0)
            }
            try await herald.waitUntilIdle()
        }
        for plugin in [first, second] {
            #expect(plugin.recorded("options").map { $0.message.aps.alert?.title } == (0..<50).map { "n\($0)" })
            let shown = plugin.recorded("show")
            #expect(shown.map { $0.message.aps.alert?.title } == (0..<50).map { "n\($0)" })
            // The union of both handlers' answers, and the category's actions.
            #expect(shown.allSatisfy { $0.options == [.banner, .sound] && $0.actions == [Self.reply] })
            #expect(plugin.recorded.allSatisfy { $0.onLoop && !$0.inTask })
        }
    }

    @Test("beside an asynchronous handler and presenter, notifications get a task; every plugin is called in registration order")
    func mixed() async throws {
        let log = Locked<[String]>([])
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let asynchronous = SuspendingPresentingPlugin(name: "a", log: log)
        let synchronous = SynchronousPresentingRecorder(name: "s", loop: herald.loop, log: log)
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, asynchronous, synchronous]) { herald in
            let token = try await herald.token()
            for index in 0..<10 {
                _ = try await receiver.sendFCM(fcmBody(token: token, notification: ("n\(index)", "b")), to: herald).get()
            }
            try await herald.waitUntilIdle()
        }
        let entries = log.withLock { $0 }
        #expect(entries.count == 40)
        for index in 0..<10 {
            #expect(
                entries.filter { $0.hasSuffix(":n\(index)") } == [
                    "a.options:n\(index)", "s.options:n\(index)", "a.show:n\(index)", "s.show:n\(index)",
                ])
        }
        #expect(synchronous.recorded("show").allSatisfy { $0.options == [.banner, .sound] })
        #expect(synchronous.recorded.allSatisfy { $0.onLoop && $0.inTask })
    }

    @Test("a mutable-content notification with a content modifier goes through a task; the presenter gets the changed content")
    func contentModifier() async throws {
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let recorder = SynchronousPresentingRecorder(loop: herald.loop)
        let receiver = InMemoryReceiver()
        let payload = #"{"aps": {"alert": {"title": "Encrypted", "body": "…"}, "mutable-content": 1}, "secret": "hello"}"#
        let plain = #"{"aps": {"alert": {"title": "Plain", "body": "…"}}, "secret": "hello"}"#
        try await withStarted(herald, plugins: [receiver, TitleFromSecret(), recorder]) { herald in
            let token = try await herald.token()
            _ = try await receiver.sendAPNs(payload, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            _ = try await receiver.sendAPNs(plain, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
        }
        let shown = recorder.recorded("show")
        #expect(shown.map { $0.message.aps.alert?.title } == ["hello", "Plain"])
        // The modified one waited for its modifier in a task; the other needed none.
        #expect(shown.map(\.inTask) == [true, false])
    }

    @Test("a notification that is also silent goes through a task: its fetch runs and its presenting is the same")
    func silentToo() async throws {
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let recorder = SynchronousPresentingRecorder(loop: herald.loop)
        let worker = CountingFetchWorker()
        let receiver = InMemoryReceiver()
        let payload = #"{"aps": {"alert": {"title": "Both", "body": "…"}, "content-available": 1}}"#
        try await withStarted(herald, plugins: [receiver, recorder, worker]) { herald in
            let token = try await herald.token()
            _ = try await receiver.sendAPNs(payload, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
        }
        #expect(recorder.recorded("show").map(\.inTask) == [true])
        #expect(recorder.recorded("options").count == 1)
        #expect(worker.fetches.withLock { $0 } == 1)
    }

    @Test("the analytics events of the synchronous path are the asynchronous path's, in the foreground and the background")
    func sameAnalytics() async throws {
        func events(with plugin: any HeraldPlugin, state: ApplicationState) async throws -> [String] {
            var seen: [String] = []
            try await withHerald(plugins: [plugin], categories: Self.categories) { herald, receiver, sink in
                herald.applicationState = state
                let token = try await herald.token()
                for category in ["CHAT", "NOPE"] {
                    let body = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"category": "\#(category)"}}}"#)
                    _ = try await receiver.sendFCM(body, to: herald).get()
                }
                try await herald.waitUntilIdle()
                await herald.shutdown()
                seen = sink.recorded.map { event in
                    let parameters = event.parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
                    return "\(event.name.rawValue) \(event.messageType ?? "-") \(parameters.joined(separator: ","))"
                }
            }
            return seen
        }
        for state in [ApplicationState.active, .background] {
            let synchronous = try await events(with: SynchronousPresentingRecorder(options: [.list, .banner]), state: state)
            let asynchronous = try await events(with: RecordingDelegate(options: [.list, .banner]), state: state)
            #expect(synchronous == asynchronous)
            #expect(synchronous.filter { $0.contains("unknown_category") }.count == 1)
            #expect(
                synchronous.filter { $0.hasPrefix(state == .active ? "notification_foreground" : "notification_background") }.count == 2)
        }
    }

    @Test(
        "synchronous plugins are listed in their roles; a plugin with both kinds is asked and shows through the synchronous ones, and gets responses"
    )
    func roles() async throws {
        let both = BothPresentingRoles()
        try await withHerald(plugins: [SynchronousPresentingRecorder(), both], categories: Self.categories) { herald, receiver, _ in
            // After withHerald's receiver and sink.
            #expect(
                herald.registeredPlugins.suffix(2).map(\.roles) == [
                    [.notificationHandler, .presenter], [.notificationHandler, .presenter],
                ])
            let token = try await herald.token()
            let body = fcmBody(token: token, notification: ("t", "b"), apns: #"{"payload": {"aps": {"category": "CHAT"}}}"#)
            let id = try await receiver.sendFCM(body, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(try await herald.loop.submit { try herald.bus.messagesInFlight } == 0)
            try await herald.respond(to: id, action: "REPLY")
            #expect(both.calls.withLock { $0 } == ["presentationOptions", "show", "didReceive:REPLY"])
        }
    }
}
