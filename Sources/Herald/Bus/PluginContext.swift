public import Logging

/// What a plugin gets when the instance starts: the loop, the bus, and a logger tagged with its name.
public struct PluginContext: Sendable {
    /// The instance's event loop. Receivers create their sockets on it.
    public let loop: EventLoop
    /// The bus: receivers hand messages to it.
    public let bus: MessageBus
    /// A logger whose lines carry `plugin=<name>`.
    public let logger: Logger
    /// The descriptor of the plugin being started.
    public let descriptor: PluginDescriptor
    /// What the instance decodes messages with (``MessageBus/submit(_:_:completion:)`` does it for receivers):
    /// the sender ID and the message IDs of this instance.
    public let decoding: DecodingContext
    /// The project ID for FCM resource names in answers (`projects/{project}/messages/{id}`).
    public let projectID: String
    /// The instance's topics and token, for receivers that manage subscriptions on a sender's behalf.
    public let topics: TopicControl
    /// The registered notification categories by identifier (frozen once the instance starts), for presenters.
    public let categories: [String: NotificationCategory]
}

/// Topic subscriptions of the instance, as a receiver may change them (FCM's topic management API).
public struct TopicControl: Sendable {
    /// Subscribes to a topic (FCM's name rule); persisted.
    public let subscribe: @Sendable (String) async throws -> Void
    /// Unsubscribes from a topic; returns whether it was subscribed.
    public let unsubscribe: @Sendable (String) async throws -> Bool
    /// The current registration token.
    public let token: @Sendable () async throws -> String?
    /// The topics subscribed to.
    public let subscribed: @Sendable () async throws -> Set<String>

    public init(
        subscribe: @escaping @Sendable (String) async throws -> Void,
        unsubscribe: @escaping @Sendable (String) async throws -> Bool,
        token: @escaping @Sendable () async throws -> String?,
        subscribed: @escaping @Sendable () async throws -> Set<String> = { [] }
    ) {
        self.subscribe = subscribe
        self.unsubscribe = unsubscribe
        self.token = token
        self.subscribed = subscribed
    }
}

/// Errors of the ``Herald`` instance's own API (as opposed to a sender's ``MessageError``).
public enum HeraldError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Plugins and categories are registered before the instance starts; the set is then frozen.
    case alreadyStarted
    /// The instance has not been started, or has shut down.
    case notRunning
    /// ``Herald/respond(to:action:userText:)`` named a message that was not presented (or was presented
    /// too long ago to be remembered).
    case unknownMessage(String)
    /// ``Herald/respond(to:action:userText:)`` named an action the message's category does not have.
    case unknownAction(String, category: String?)
    /// A plugin's `start` threw; the instance did not start.
    case pluginFailedToStart(plugin: String, error: String)

    public var description: String {
        switch self {
        case .alreadyStarted: "the Herald instance has started; register plugins and categories before start()"
        case .notRunning: "the Herald instance is not running"
        case .unknownMessage(let id): "no presented notification with message ID \(id) is known (it was never presented, or is too old)"
        case .unknownAction(let action, let category):
            "the action '\(action)' is not one of category '\(category ?? "none")'; use one of its actions, the default action or the dismiss action"
        case .pluginFailedToStart(let plugin, let error): "plugin \(plugin) failed to start: \(error)"
        }
    }
}
