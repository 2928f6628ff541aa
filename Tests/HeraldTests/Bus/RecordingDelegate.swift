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

    init(
        name: String = "recording", options: PresentationOptions = [.list, .banner], fetchResult: BackgroundFetchResult = .newData,
        throwOnMessage: Bool = false, loop: EventLoop? = nil
    ) {
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
        calls.withLock {
            $0.willPresent.append(message)
            $0.onLoop.append(onLoop)
        }
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
