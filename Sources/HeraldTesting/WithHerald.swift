public import Herald
public import Testing

/// Starts a Herald instance with an in-memory receiver, a recording sink, `plugins` and `categories`, runs `body`
/// with the three, then shuts the instance down (also when `body` throws) and checks that no libuv handle is left.
///
/// `timeSource` lets the test drive deadlines with a ``ManualEventLoop``; by default the instance's own loop.
///
/// The shutdown waits as long as a test needs: where `configuration` keeps the defaults of
/// `Herald.Configuration/analyticsDrainTimeout` and `shutdownGracePeriod`, they are two minutes
/// (``patientShutdown(_:)``). A sink's or a handler's task can wait seconds for a thread while the whole suite runs
/// in parallel, and the defaults would count its events as lost.
public func withHerald(
    configuration: Herald.Configuration = .init(senderID: "1234567890"),
    timeSource: (any EventLoopScheduler)? = nil,
    plugins: [any HeraldPlugin] = [],
    categories: [NotificationCategory] = [],
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (Herald, InMemoryReceiver, RecordingSink) async throws -> Void
) async throws {
    let herald = Herald(configuration: patientShutdown(configuration), timeSource: timeSource)
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
    #expect(herald.loop.statistics.liveHandles == 0, "libuv handles left open", sourceLocation: sourceLocation)
}

/// `configuration` with the shutdown's bounds it keeps at their defaults (`analyticsDrainTimeout`, 5 s;
/// `shutdownGracePeriod`, 10 s) raised to two minutes, for a test's instance: on a machine running the whole suite at
/// once, a sink's or a handler's task can wait that long for a thread, and the defaults would then count its events
/// as lost or cut its handling short. Bounds a test chose are kept.
public func patientShutdown(_ configuration: Herald.Configuration) -> Herald.Configuration {
    let defaults = Herald.Configuration()
    var configuration = configuration
    if configuration.analyticsDrainTimeout == defaults.analyticsDrainTimeout { configuration.analyticsDrainTimeout = .seconds(120) }
    if configuration.shutdownGracePeriod == defaults.shutdownGracePeriod { configuration.shutdownGracePeriod = .seconds(120) }
    return configuration
}

/// Registers `plugins` on `herald`, starts it, runs `body` with it, then shuts it down, also when `body` throws: for
/// an instance the test made itself (on a store of its own, say).
public func withStarted(_ herald: Herald, plugins: [any HeraldPlugin] = [], _ body: (Herald) async throws -> Void) async throws {
    for plugin in plugins { try herald.register(plugin) }
    try await herald.start()
    do {
        try await body(herald)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
}

/// An FCM v1 send body (`{"message": {...}}`) addressed to `token`, with an optional notification (title, body),
/// `data` (in key order) and `apns` member (its JSON text, as written).
public func fcmBody(token: String, notification: (String, String)? = nil, data: [String: String] = [:], apns: String? = nil) -> String {
    var message: [String] = ["\"token\": \"\(token)\""]
    if let notification { message.append("\"notification\": {\"title\": \"\(notification.0)\", \"body\": \"\(notification.1)\"}") }
    if !data.isEmpty {
        message.append(
            "\"data\": {" + data.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \"\($0.value)\"" }.joined(separator: ", ") + "}")
    }
    if let apns { message.append("\"apns\": \(apns)") }
    return "{\"message\": {" + message.joined(separator: ", ") + "}}"
}
