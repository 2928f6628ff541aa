/// Something that plugs into a ``Herald`` instance. A plugin conforms to one or more role protocols
/// (``Receiver``, ``NotificationHandler`` or ``SynchronousNotificationHandler``, ``MessageHandler`` or
/// ``SynchronousMessageHandler``, ``BackgroundFetchWorker``, ``TokenHandler``, ``AnalyticsSink``, ``Presenter`` or
/// ``SynchronousPresenter``, ``ContentModifier``); each role's methods have no-op defaults, so a plugin writes only
/// what it needs.
///
/// Plugins are registered with ``Herald/register(_:)`` before the instance starts; the set is then frozen.
/// A plugin never owns the loop: it gets the loop and the bus in ``start(_:)`` and gives them back in ``stop()``.
public protocol HeraldPlugin: AnyObject, Sendable {
    /// Name and summary, for logs.
    var descriptor: PluginDescriptor { get }
    /// Called once when the instance starts, before any message flows, in registration order.
    func start(_ context: PluginContext) async throws
    /// Called once when the instance stops, after messages stopped flowing, in reverse registration order.
    func stop() async
}

extension HeraldPlugin {
    public var descriptor: PluginDescriptor { PluginDescriptor(name: String(describing: Self.self)) }
    public func start(_ context: PluginContext) async throws {}
    public func stop() async {}
}

/// Describes a plugin: its name and what it does. Its settings, when a daemon's configuration sets it up, are
/// its ``ConfigurationSection``, declared beside its options.
public struct PluginDescriptor: Sendable, Hashable {
    public var name: String
    public var summary: String

    public init(name: String, summary: String = "") {
        self.name = name
        self.summary = summary
    }
}

/// The roles a registered plugin plays, worked out from its conformances.
public struct PluginRoles: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let receiver = PluginRoles(rawValue: 1 << 0)
    public static let notificationHandler = PluginRoles(rawValue: 1 << 1)
    public static let messageHandler = PluginRoles(rawValue: 1 << 2)
    public static let backgroundFetchWorker = PluginRoles(rawValue: 1 << 3)
    public static let tokenHandler = PluginRoles(rawValue: 1 << 4)
    public static let analyticsSink = PluginRoles(rawValue: 1 << 5)
    public static let presenter = PluginRoles(rawValue: 1 << 6)
    public static let contentModifier = PluginRoles(rawValue: 1 << 7)

    /// The roles `plugin` conforms to.
    public static func of(_ plugin: any HeraldPlugin) -> PluginRoles {
        var roles: PluginRoles = []
        if plugin is any Receiver { roles.insert(.receiver) }
        if plugin is any NotificationHandler || plugin is any SynchronousNotificationHandler { roles.insert(.notificationHandler) }
        if plugin is any MessageHandler || plugin is any SynchronousMessageHandler { roles.insert(.messageHandler) }
        if plugin is any BackgroundFetchWorker { roles.insert(.backgroundFetchWorker) }
        if plugin is any TokenHandler { roles.insert(.tokenHandler) }
        if plugin is any AnalyticsSink { roles.insert(.analyticsSink) }
        if plugin is any Presenter || plugin is any SynchronousPresenter { roles.insert(.presenter) }
        if plugin is any ContentModifier { roles.insert(.contentModifier) }
        return roles
    }

    public var description: String {
        let names: [(PluginRoles, String)] = [
            (.receiver, "receiver"), (.notificationHandler, "notification-handler"), (.messageHandler, "message-handler"),
            (.backgroundFetchWorker, "background-fetch-worker"), (.tokenHandler, "token-handler"),
            (.analyticsSink, "analytics-sink"), (.presenter, "presenter"), (.contentModifier, "content-modifier"),
        ]
        return names.filter { contains($0.0) }.map(\.1).joined(separator: ",")
    }
}

/// Brings messages to the bus: from a socket, HTTP, NATS, a file, or memory. Runs on the loop thread. A receiver
/// keeps its transport and hands each send body to ``MessageBus/submit(_:_:completion:)``, which decodes it,
/// records it when invalid and delivers it, and answers with what to tell the sender.
public protocol Receiver: HeraldPlugin {
    /// Stop taking messages in (stop reading sockets): the bus is full. Called on the loop thread.
    func pause()
    /// Take messages in again. Called on the loop thread.
    func resume()
    /// The instance's topics changed (receivers that route by topic subscribe to the new set). Called on the
    /// loop thread, at start and after every change.
    func topicsDidChange(_ topics: Set<String>)
    /// Connections open now (for metrics). Called on the loop thread. The default is 0.
    var openConnections: Int { get }
    /// The state of what the receiver depends on (a broker connection, say), for health checks: `/healthz` of
    /// PrometheusMetrics answers 503 while one receiver is not healthy. Called on the loop thread. The default,
    /// `nil`, reports nothing (the receiver is healthy while the instance runs).
    var health: ReceiverHealth? { get }
}

extension Receiver {
    public func pause() {}
    public func resume() {}
    public func topicsDidChange(_ topics: Set<String>) {}
    public var openConnections: Int { 0 }
    public var health: ReceiverHealth? { nil }
}

/// What a receiver reports about its health: whether it can take messages now, and its state in its own words
/// (`connected`, `reconnecting`, `closed` for NATS).
public struct ReceiverHealth: Sendable, Hashable {
    /// Whether the receiver can do its work now.
    public var healthy: Bool
    /// The state, one word.
    public var state: String

    public init(healthy: Bool, state: String) {
        self.healthy = healthy
        self.state = state
    }
}

/// Where a receiver's valid FCM v1 send request goes instead of the local bus (``SendContext/forwarder``): a gateway, which passes sends on
/// to the fleet (see HTTPReceiver's `forwarder` and NATSReceiver's `NATSGateway`). The receiver keeps its parsing,
/// authentication, limits and error shapes; the forwarder decides where the message goes and answers with the
/// message ID the sender gets, or the ``MessageError`` it gets instead.
public protocol SendForwarder: Sendable {
    /// Forwards `request` (decoded and valid; `body` is the request body as received). Called from a task on the
    /// loop's executor; may suspend (a broker's acknowledgement).
    func forward(_ request: FCMSendRequest, body: [UInt8]) async -> Result<String, MessageError>
}

/// A ``SendForwarder`` that also passes topic management on (the Instance ID API's `batchAdd`, `batchRemove` and
/// `info`, FCM v1's `topicSubscriptions`): a gateway, which has each token's change made by the instance that holds the token
/// (NATSReceiver's `NATSGateway`). The receiver keeps its parsing, authorization and answers' shapes; with a forwarder
/// that is not one of these, it answers those routes 501.
public protocol TopicForwarder: SendForwarder {
    /// Subscribes (`add`) or unsubscribes `topic` (valid, without `/topics/`) for each of `tokens` on the instance that
    /// holds it, and answers one result per token, in order. Called from a task on the loop's executor; may suspend
    /// (the instances' answers).
    func changeTopic(_ topic: String, add: Bool, tokens: [String]) async -> [TopicChangeResult]

    /// The topics the instance that holds `token` is subscribed to (the Instance ID API's `GET /iid/info/{token}`);
    /// `nil` when no instance holds it; a ``MessageError`` (`UNAVAILABLE`) when its instance did not answer. Called
    /// from a task on the loop's executor; may suspend.
    func subscribedTopics(token: String) async -> Result<Set<String>?, MessageError>
}

/// The "will present" and "did receive response" handler, as `UNUserNotificationCenterDelegate`.
public protocol NotificationHandler: HeraldPlugin {
    /// A display notification arrived: answer how to present it. Answers of several handlers are combined
    /// as a union. The default answers `[]` (show nothing).
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions
    /// A person acted on a notification: the default action, dismissal, or a custom action.
    func didReceive(_ response: NotificationResponse) async
}

extension NotificationHandler {
    public func willPresent(_ message: RemoteMessage) async -> PresentationOptions { [] }
    public func didReceive(_ response: NotificationResponse) async {}
}

/// Answers "will present" without suspending: the synchronous variant of ``NotificationHandler/willPresent(_:)``, for
/// handlers that decide from the message and their own state (a setting, a do-not-disturb flag, a counter).
///
/// The bus calls ``presentationOptions(for:)`` on the loop thread, in registration order with the other notification
/// handlers; the answers are combined as a union, as theirs are. When every notification handler and every presenter
/// of the instance is synchronous (``SynchronousPresenter``, or none: the log line), a display notification that no
/// content modifier has to change goes through them without a task: the calls happen inside the delivery, as for
/// ``SynchronousMessageHandler``. Otherwise each notification gets a task as with ``NotificationHandler`` alone, and
/// the synchronous handlers are called from it, in their place in the order.
///
/// A handler must return promptly: it runs on the loop thread, and every receiver waits while it runs. A person's
/// responses still go to ``NotificationHandler/didReceive(_:)``: a plugin that wants them conforms to both roles, and
/// is then asked "will present" through this one only. Counted as ``PluginRoles/notificationHandler``.
public protocol SynchronousNotificationHandler: HeraldPlugin {
    /// A display notification arrived, in the foreground: answer how to present it. Called on the loop thread. The
    /// default answers `[]` (show nothing).
    func presentationOptions(for message: RemoteMessage) -> PresentationOptions
}

extension SynchronousNotificationHandler {
    public func presentationOptions(for message: RemoteMessage) -> PresentationOptions { [] }
}

/// Handles data-only messages (neither display nor silent).
public protocol MessageHandler: HeraldPlugin {
    /// A data-only message arrived. A thrown error is logged and recorded; it never stops other handlers.
    func didReceive(_ message: RemoteMessage) async throws
}

extension MessageHandler {
    public func didReceive(_ message: RemoteMessage) async throws {}
}

/// Handles data-only messages without suspending: the synchronous variant of ``MessageHandler``, for handlers that
/// only update state, count or hand the message on (to a buffer, a queue of their own).
///
/// The bus calls ``handle(_:)`` on the loop thread, in registration order with the other message handlers. When
/// every message handler of the instance is synchronous, a data-only message goes to them without a task: the
/// call happens inside the delivery, and the bus allocates nothing per message for it. When some are asynchronous,
/// each message gets a task as with ``MessageHandler`` alone, and the synchronous ones are called from it, in
/// their place in the order. Everything else is the same as for ``MessageHandler``: each message once, the
/// in-flight bound, analytics, the durable inbox's removal once the handlers have returned.
///
/// A handler must return promptly: it runs on the loop thread, and every receiver waits while it runs. Work that
/// waits for something belongs in a ``MessageHandler``. A plugin that conforms to both roles is called through
/// this one only. Counted as ``PluginRoles/messageHandler`` in ``PluginRoles``.
public protocol SynchronousMessageHandler: HeraldPlugin {
    /// A data-only message arrived. Called on the loop thread. A thrown error is logged and recorded; it never
    /// stops other handlers.
    func handle(_ message: RemoteMessage) throws
}

extension SynchronousMessageHandler {
    public func handle(_ message: RemoteMessage) throws {}
}

/// Woken by silent (`content-available: 1`) messages, as `application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`.
public protocol BackgroundFetchWorker: HeraldPlugin {
    /// Fetch what the message announces. Runs off the loop thread, with a deadline after which the task is
    /// cancelled and counted `.failed`.
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult
}

extension BackgroundFetchWorker {
    public func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult { .noData }
}

/// Told the registration token at every start and whenever it changes, as `messaging(_:didReceiveRegistrationToken:)`.
/// At a start it is told before ``Herald/start()`` returns, so it must not await ``Herald/shutdown()`` there (a
/// shutdown during the start waits for it).
public protocol TokenHandler: HeraldPlugin {
    /// The current registration token; `nil` after ``Herald/deleteToken()`` until a new one is minted.
    func didReceiveRegistrationToken(_ token: String?) async
}

extension TokenHandler {
    public func didReceiveRegistrationToken(_ token: String?) async {}
}

/// Takes analytics events, in batches, off the hot path.
public protocol AnalyticsSink: HeraldPlugin {
    /// Records a batch of events. A thrown error is counted and the batch retried later.
    func record(_ events: [AnalyticsEvent]) async throws
}

extension AnalyticsSink {
    public func record(_ events: [AnalyticsEvent]) async throws {}
}

/// Acts on presentation options: shows the notification (a log line by default; a desktop notification later).
public protocol Presenter: HeraldPlugin {
    /// Present `message` as `options` say, with the actions of its category (empty for an unknown category).
    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async
}

extension Presenter {
    public func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {}
}

/// Shows a notification without suspending: the synchronous variant of ``Presenter``, for presenters that hand the
/// notification on at once (a line to a file or a socket, a queue of their own that another thread drains).
///
/// The bus calls ``show(_:options:actions:)`` on the loop thread, in registration order with the other presenters.
/// With synchronous notification handlers (or none) and no asynchronous presenter, a notification is presented
/// without a task (see ``SynchronousNotificationHandler``). A presenter must return promptly: every receiver waits
/// while it runs; one that talks to a desktop or a remote service is a ``Presenter``. A plugin that conforms to both
/// roles is called through this one only. Counted as ``PluginRoles/presenter``.
public protocol SynchronousPresenter: HeraldPlugin {
    /// Present `message` as `options` say, with the actions of its category (empty for an unknown category). Called
    /// on the loop thread.
    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction])
}

extension SynchronousPresenter {
    public func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {}
}

/// Changes a notification before it is presented, as an Apple notification service extension: called for each
/// notification whose `aps` has `mutable-content: 1`, before ``NotificationHandler/willPresent(_:)``, in the order
/// the modifiers were registered, within ``Herald/Configuration/contentModifierDeadline`` for all of them.
public protocol ContentModifier: HeraldPlugin {
    /// `didReceive(_:withContentHandler:)`: change `request.content` (title, subtitle, body, attachments). What it
    /// holds when the last modifier returns, or at the deadline, is what handlers and presenters get. Runs off the
    /// loop; cancelled at the deadline.
    func modify(_ request: ContentModificationRequest) async
    /// `serviceExtensionTimeWillExpire()`: the deadline has passed while ``modify(_:)`` ran; put the best attempt in
    /// `request.content` now (it is read when this returns). Default: nothing, the content stays as it is.
    func serviceExtensionTimeWillExpire(_ request: ContentModificationRequest)
}

extension ContentModifier {
    public func serviceExtensionTimeWillExpire(_ request: ContentModificationRequest) {}
}
