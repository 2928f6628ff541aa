/// One analytics event: what happened to which message, when. Names follow FCM's analytics events.
public struct AnalyticsEvent: Sendable, Hashable {
    public enum Name: String, Sendable, Hashable, CaseIterable {
        case notificationReceive = "notification_receive"
        case notificationForeground = "notification_foreground"
        /// A notification presented while the app was in the background (``ApplicationState/background``): as its
        /// payload asked, without `willPresent`.
        case notificationBackground = "notification_background"
        case notificationOpen = "notification_open"
        case notificationDismiss = "notification_dismiss"
        case backgroundFetch = "background_fetch"
        case tokenRefresh = "token_refresh"
        case topicSubscribe = "topic_subscribe"
        case topicUnsubscribe = "topic_unsubscribe"
        case messageDropped = "message_dropped"
        /// Something a person should look at that is not an error of the sender: an unknown category, a
        /// handler that threw, a worker that ran out of time.
        case diagnostic = "diagnostic"
        /// A push Herald keeps for another app (a UnifiedPush distributor's `Message` call answered): handed over
        /// to the app it was addressed to. Its ``AnalyticsEvent/messageType`` is ``AnalyticsEvent/unifiedPush``.
        case messageDelivered = "message_delivered"
    }

    /// The ``messageType`` of the events about a UnifiedPush push (Herald as the push service and distributor of
    /// another app): `notification_receive` when a push was accepted, `message_delivered` when its app took it,
    /// `message_dropped` when it was not delivered.
    public static let unifiedPush = "UNIFIEDPUSH"

    /// Why a message was dropped (`message_dropped`).
    public enum DropReason: String, Sendable, Hashable, CaseIterable {
        case invalid
        case duplicate
        case expired
        case notTargeted = "not_targeted"
        case rejectedBackpressure = "rejected_backpressure"
        /// A newer message with the same collapse key replaced it while it waited.
        case collapsed
        /// The store could not commit it, so the sender was refused.
        case storeFailure = "store_failure"
        /// Still pending after ``Herald/Configuration/maxReplays`` starts replayed it (its handling likely crashed
        /// the process each time): moved to the store's quarantine instead of being replayed again.
        case quarantined
        /// Its UnifiedPush endpoint was unregistered (by its app, or `herald up unregister`) while it waited, or
        /// before it arrived.
        case unregistered
    }

    public var name: Name
    /// The event's identity: unique among the events of one instance run and random across runs, assigned when the
    /// bus records the event (0 until then). A sink that is given a batch again after it threw can tell events it
    /// already stored from new ones by it.
    public var id: UInt64 = 0
    /// Milliseconds since 1970.
    public var timestamp: Int64
    public var messageID: String?
    public var analyticsLabel: String?
    public var topic: String?
    public var collapseKey: String?
    public var priority: MessagePriority?
    /// `DISPLAY_NOTIFICATION` or `DATA_MESSAGE`, as FCM's delivery export has it; ``unifiedPush`` for a push to
    /// another app.
    public var messageType: String?
    /// Seconds the message was to live from its receipt (`ttl` / `apns-expiration`), when it expires.
    public var ttl: Int64?
    /// When Herald accepted the message, in milliseconds since 1970.
    public var receivedAt: Int64?
    /// Event-specific values: `reason`, `result`, `duration_ms`, `action`, `detail`, `plugin`, ...
    public var parameters: [String: String]

    public init(
        name: Name, timestamp: Int64 = WallClock.nowMilliseconds(), messageID: String? = nil, analyticsLabel: String? = nil,
        topic: String? = nil, collapseKey: String? = nil, priority: MessagePriority? = nil, messageType: String? = nil,
        ttl: Int64? = nil, receivedAt: Int64? = nil, parameters: [String: String] = [:]
    ) {
        self.name = name
        self.timestamp = timestamp
        self.messageID = messageID
        self.analyticsLabel = analyticsLabel
        self.topic = topic
        self.collapseKey = collapseKey
        self.priority = priority
        self.messageType = messageType
        self.ttl = ttl
        self.receivedAt = receivedAt
        self.parameters = parameters
    }

    /// An event about `message`, carrying its ID, label, topic, collapse key, priority and type.
    public init(_ name: Name, for message: RemoteMessage, parameters: [String: String] = [:]) {
        self.init(
            name: name, messageID: message.messageID, analyticsLabel: message.analyticsLabel, topic: message.topic,
            collapseKey: message.collapseKey, priority: message.priority,
            messageType: message.kind.contains(.display) ? "DISPLAY_NOTIFICATION" : "DATA_MESSAGE",
            ttl: message.expiration.map { max(0, $0 - message.receivedAt / 1000) }, receivedAt: message.receivedAt,
            parameters: parameters
        )
    }
}
