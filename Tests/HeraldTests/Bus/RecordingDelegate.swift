import HeraldTesting
@testable import Herald

/// A handler plugin for tests that records every call and answers as configured.
final class RecordingDelegate: NotificationHandler, MessageHandler, BackgroundFetchWorker, TokenHandler, Presenter, @unchecked Sendable {
    // @unchecked Sendable: mutable state is behind a lock.
    struct Calls {
        var willPresent: [RemoteMessage] = []
        var responses: [NotificationResponse] = []
        var messages: [RemoteMessage] = []
        var fetches: [RemoteMessage] = []
        var tokens: [String?] = []
        var presented: [(RemoteMessage, PresentationOptions, [NotificationAction])] = []
        var onLoop: [Bool] = []
    }

    let name: String
    let options: PresentationOptions
    let fetchResult: BackgroundFetchResult
    let throwOnMessage: Bool
    let loop: EventLoop?
    private let calls = Locked(Calls())

    init(name: String = "recording", options: PresentationOptions = [.list, .banner], fetchResult: BackgroundFetchResult = .newData,
         throwOnMessage: Bool = false, loop: EventLoop? = nil) {
        self.name = name
        self.options = options
        self.fetchResult = fetchResult
        self.throwOnMessage = throwOnMessage
        self.loop = loop
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }
    var recorded: Calls { calls.withLock { $0 } }

    struct Failure: Error {}

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        let onLoop = loop?.inEventLoop ?? true
        calls.withLock { $0.willPresent.append(message); $0.onLoop.append(onLoop) }
        return options
    }

    func didReceive(_ response: NotificationResponse) async {
        calls.withLock { $0.responses.append(response) }
    }

    func didReceive(_ message: RemoteMessage) async throws {
        calls.withLock { $0.messages.append(message) }
        if throwOnMessage { throw Failure() }
    }

    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        calls.withLock { $0.fetches.append(message) }
        return fetchResult
    }

    func didReceiveRegistrationToken(_ token: String?) async {
        calls.withLock { $0.tokens.append(token) }
    }

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        calls.withLock { $0.presented.append((message, options, actions)) }
    }
}

/// Starts a Herald instance with `plugins` plus an in-memory receiver and a recording sink, runs `body`, shuts down.
func withHerald(
    configuration: Herald.Configuration = .init(senderID: "1234567890"),
    timeSource: (any EventLoopScheduler)? = nil,
    plugins: [any HeraldPlugin] = [],
    categories: [NotificationCategory] = [],
    _ body: (Herald, InMemoryReceiver, RecordingSink) async throws -> Void
) async throws {
    let herald = Herald(configuration: configuration, timeSource: timeSource)
    let receiver = InMemoryReceiver()
    let sink = RecordingSink()
    try herald.register(receiver)
    try herald.register(sink)
    for plugin in plugins { try herald.register(plugin) }
    for category in categories { try herald.register(category: category) }
    try await herald.start()
    do {
        try await body(herald, receiver, sink)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
    #expect(herald.loop.statistics.liveHandles == 0)
}

/// An FCM v1 send body addressed to `token`.
func fcmBody(token: String, notification: (String, String)? = nil, data: [String: String] = [:], apns: String? = nil) -> String {
    var message: [String] = ["\"token\": \"\(token)\""]
    if let notification { message.append("\"notification\": {\"title\": \"\(notification.0)\", \"body\": \"\(notification.1)\"}") }
    if !data.isEmpty {
        message.append("\"data\": {" + data.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \"\($0.value)\"" }.joined(separator: ", ") + "}")
    }
    if let apns { message.append("\"apns\": \(apns)") }
    return "{\"message\": {" + message.joined(separator: ", ") + "}}"
}

import Testing
