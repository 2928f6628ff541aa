// Fixtures shared by the benchmark targets (MessagePath's timings, Allocations' ratchet): the FCM v1 sample
// body, a decoding context, and a Herald instance with a no-op handler that messages are dispatched to.

import Dispatch
import Foundation
import Herald
import HeraldJSONLExport
import HeraldPrometheusMetrics
import HeraldSQLite

/// The FCM v1 sample body addressed by token (fcm-v1-notification-token.json), 374 bytes.
public let fcmBody: [UInt8] = Array(
    #"""
    {
      "message": {
        "token": "REPLACE_WITH_TOKEN",
        "notification": { "title": "Portugal vs. Denmark", "body": "great match!" },
        "data": { "customKey": "customValue" },
        "apns": { "payload": { "aps": { "badge": 1, "category": "MATCH_UPDATE" } } },
        "fcm_options": { "analytics_label": "match-alerts" }
      }
    }
    """#.utf8)

public let context = DecodingContext(senderID: "1234567890", makeMessageID: { "1700000000000001" })

/// A no-op message handler that signals when the expected number of messages has arrived.
public final class CountingHandler: MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: `remaining` is only touched on the loop thread (handlers run there).
    public var remaining = 0
    public let done = DispatchSemaphore(value: 0)
    public init() {}
    public func didReceive(_ message: RemoteMessage) async throws {
        remaining -= 1
        if remaining == 0 { done.signal() }
    }
}

/// A no-op synchronous message handler that signals when the expected number of messages has arrived.
public final class SynchronousCountingHandler: SynchronousMessageHandler, @unchecked Sendable {
    // @unchecked Sendable: `remaining` is only touched on the loop thread (handlers run there).
    public var remaining = 0
    public let done = DispatchSemaphore(value: 0)
    public init() {}
    public func handle(_ message: RemoteMessage) throws {
        remaining -= 1
        if remaining == 0 { done.signal() }
    }
}

/// A no-op synchronous notification handler and presenter that signals when the expected number of notifications
/// has been shown.
public final class SynchronousCountingPresenter: SynchronousNotificationHandler, SynchronousPresenter, @unchecked Sendable {
    // @unchecked Sendable: `remaining` is only touched on the loop thread (handlers run there).
    public var remaining = 0
    public let done = DispatchSemaphore(value: 0)
    public init() {}
    public func presentationOptions(for message: RemoteMessage) -> PresentationOptions { [.banner] }
    public func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {
        remaining -= 1
        if remaining == 0 { done.signal() }
    }
}

/// One Herald instance with the in-memory store and synchronous plugins, for the bus's synchronous paths:
/// ``shared`` sends data-only messages to a ``SynchronousCountingHandler``, ``notifications`` display notifications
/// to a ``SynchronousCountingPresenter``. Messages are decoded before the iterations, each with its own message ID
/// as a receiver's decode gives it, and delivered round a pool twice the de-duplication window's size, so each
/// delivery is a new message to the bus (its ID has left the window when it comes round again).
public final class SynchronousBusFixture: @unchecked Sendable {
    // @unchecked Sendable: set up before and torn down after the iterations, on the benchmark thread; `next` and
    // `count` are read and written on the loop thread only, in between.
    public static let shared = SynchronousBusFixture(notifications: false)
    public static let notifications = SynchronousBusFixture(notifications: true)
    static let window = 1024
    let isNotifications: Bool
    var herald: Herald?
    var bus: MessageBus?
    var messages: [RemoteMessage] = []
    var next = 0
    var count = 0
    let handler = SynchronousCountingHandler()
    let presenter = SynchronousCountingPresenter()

    init(notifications: Bool) {
        isNotifications = notifications
    }

    public func start() {
        var configuration = Herald.Configuration(senderID: "1")
        configuration.maxInFlight = 4096
        configuration.deduplication.maximumCount = Self.window
        let herald = Herald(configuration: configuration, store: InMemoryStore())
        try! herald.register(handler)
        try! herald.register(presenter)
        let isNotifications = isNotifications
        let ready = DispatchSemaphore(value: 0)
        let box = ResultBox()
        Task {
            try! await herald.start()
            let token = try! await herald.token()
            let body = isNotifications ? notificationBody(token: token) : dataMessageBody(token: token)
            box.messages = (0..<2 * Self.window).map { _ in
                try! FCMSendRequest.decode(Array(body.utf8), context: herald.decodingContext).message
            }
            ready.signal()
        }
        ready.wait()
        self.herald = herald
        self.bus = try! herald.bus
        self.messages = box.messages
    }

    /// Delivers `count` messages on the loop. The closure captures nothing (it reads the shared fixture), so
    /// queueing it allocates nothing either.
    public func dispatch(count: Int) {
        guard let herald else { return }
        self.count = count
        if isNotifications {
            herald.loop.execute { SynchronousBusFixture.notifications.deliverAll() }
            presenter.done.wait()
        } else {
            herald.loop.execute { SynchronousBusFixture.shared.deliverAll() }
            handler.done.wait()
        }
    }

    /// On the loop thread: delivers `count` messages of the pool.
    private func deliverAll() {
        guard let bus else { return }
        handler.remaining = count
        presenter.remaining = count
        for _ in 0..<count {
            bus.deliver(messages[next]) { _ in }
            next = (next + 1) % messages.count
        }
    }

    public func stop() {
        let done = DispatchSemaphore(value: 0)
        let herald = self.herald
        Task {
            await herald?.shutdown()
            done.signal()
        }
        done.wait()
        (self.herald, self.bus, self.messages) = (nil, nil, [])
    }
}

/// One Herald instance with a no-op handler; messages are decoded once, before the iterations, and carry no
/// message ID, so the bus gives each delivery a new one (and de-duplicates by it, as for any message). Submitted
/// bodies (a receiver's way in) are decoded at each submission, and named anew by it.
public final class BusFixture: @unchecked Sendable {
    // @unchecked Sendable: set up before and torn down after the iterations, on the benchmark thread.
    public static let inMemory = BusFixture(durable: false)
    public static let durable = BusFixture(durable: true)
    public static let withAnalytics = BusFixture(durable: false, analytics: true)
    let durable: Bool
    let analytics: Bool
    var herald: Herald?
    var message: RemoteMessage?
    var body: [UInt8] = []
    var directory: String?
    let handler = CountingHandler()

    init(durable: Bool, analytics: Bool = false) {
        self.durable = durable
        self.analytics = analytics
    }

    public func start() {
        var configuration = Herald.Configuration(senderID: "1")
        configuration.maxInFlight = 4096
        let store: any HeraldStore
        let directory = NSTemporaryDirectory() + "herald-bench-\(getpid())"
        if durable {
            self.directory = directory
            store = try! SQLiteStore(directory: directory)
        } else {
            store = InMemoryStore()
        }
        let herald = Herald(configuration: configuration, store: store)
        try! herald.register(handler)
        if analytics {
            // HERALD_BENCH_SINKS=jsonl or =prometheus measures one sink alone; =null a sink that does nothing (the
            // bus's own share of the cost).
            let sinks = ProcessInfo.processInfo.environment["HERALD_BENCH_SINKS"] ?? "jsonl,prometheus"
            self.directory = directory
            if sinks.contains("jsonl") { try! herald.register(JSONLExport(options: .init(path: directory + "/delivery.jsonl"))) }
            if sinks.contains("null") { try! herald.register(NullSink()) }
            if sinks.contains("prometheus") {
                try! herald.register(PrometheusExporter(options: .init(address: .tcp(host: "127.0.0.1", port: 0))))
            }
        }
        let ready = DispatchSemaphore(value: 0)
        let box = ResultBox()
        Task {
            try! await herald.start()
            let token = try! await herald.token()
            let body = dataMessageBody(token: token)
            var message = try! FCMSendRequest.decode(Array(body.utf8), context: herald.decodingContext).message
            message.userInfo[UserInfoKey.messageID] = nil
            box.message = message
            box.body = Array(body.utf8)
            ready.signal()
        }
        ready.wait()
        self.herald = herald
        self.message = box.message
        self.body = box.body
    }

    public func dispatch(count: Int) {
        guard let herald, let message, let bus = try? herald.bus else { return }
        herald.loop.execute { [handler] in
            handler.remaining = count
            for _ in 0..<count { bus.deliver(message) { _ in } }
        }
        handler.done.wait()
    }

    /// Submits the body `count` times, as a receiver does for each request it reads.
    public func submit(count: Int) {
        guard let herald, let bus = try? herald.bus else { return }
        let body = self.body
        herald.loop.execute { [handler] in
            handler.remaining = count
            for _ in 0..<count { bus.submit(body, SendContext()) { _ in } }
        }
        handler.done.wait()
    }

    public func stop() {
        let done = DispatchSemaphore(value: 0)
        let herald = self.herald
        let analytics = self.analytics
        Task {
            if analytics, let statistics = try? await herald?.analyticsStatistics() {
                let sinks = statistics.sinks.sorted { $0.key < $1.key }.map {
                    "\($0.key): delivered \($0.value.delivered), queued \($0.value.queued), lost \($0.value.lost), failures \($0.value.failures)"
                }
                print("analytics: recorded \(statistics.recorded); " + sinks.joined(separator: "; "))
            }
            await herald?.shutdown()
            done.signal()
        }
        done.wait()
        self.herald = nil
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }
}

final class ResultBox: @unchecked Sendable {
    // @unchecked Sendable: written before a semaphore signal, read after the matching wait.
    var message: RemoteMessage?
    var body: [UInt8] = []
    var messages: [RemoteMessage] = []
}

/// An analytics sink that takes every batch and does nothing with it.
public final class NullSink: AnalyticsSink, Sendable {
    public init() {}
    public func record(_ events: [AnalyticsEvent]) async throws {}
}

/// The benchmark's FCM v1 body addressed to `token`, without its notification and APNs parts: a data message.
/// The sample body as a display notification without a category (an unknown category would log a warning per
/// message).
func notificationBody(token: String) -> String {
    String(decoding: fcmBody, as: UTF8.self).replacingOccurrences(of: "REPLACE_WITH_TOKEN", with: token)
        .replacingOccurrences(of: #", "category": "MATCH_UPDATE""#, with: "")
}

func dataMessageBody(token: String) -> String {
    String(decoding: fcmBody, as: UTF8.self).replacingOccurrences(of: "REPLACE_WITH_TOKEN", with: token)
        .replacingOccurrences(of: #""notification": { "title": "Portugal vs. Denmark", "body": "great match!" },"#, with: "")
        .replacingOccurrences(of: #""apns": { "payload": { "aps": { "badge": 1, "category": "MATCH_UPDATE" } } },"#, with: "")
}
