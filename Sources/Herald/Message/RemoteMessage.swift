/// A push message as a handler sees it: the raw `userInfo` JSON object an Apple app would get, plus typed
/// views of it and the delivery metadata that is not part of `userInfo` (target, collapse key, priority,
/// expiration).
///
/// `userInfo` holds the same keys an Apple app finds: `aps` (FCM's `notification.title/body` become
/// `aps.alert.title/body`, `apns.payload` is merged in), each `data` entry as a top-level key,
/// `gcm.message_id` and `from` assigned by Herald as FCM assigns them, and `google.c.a.m_l` for the
/// analytics label.
public struct RemoteMessage: Sendable, Hashable {
    /// The raw payload, as `application(_:didReceiveRemoteNotification:)` would see it.
    public var userInfo: JSONObject
    /// Whom the sender addressed.
    public var target: MessageTarget
    /// Messages with the same collapse key replace each other while still queued (`apns-collapse-id`,
    /// FCM `android.collapse_key`).
    public var collapseKey: String?
    /// Delivery priority (`apns-priority` 10 or 5).
    public var priority: MessagePriority
    /// When the message stops being worth delivering, in seconds since 1970 (`apns-expiration`, or the
    /// receipt time plus an FCM `ttl`); `nil` when it does not expire.
    public var expiration: Int64?
    /// When Herald accepted the message, in milliseconds since 1970.
    public var receivedAt: Int64
    /// `true` when the message is delivered again after a restart (the durable inbox replays what was
    /// accepted but not finished), so a handler can tell.
    public var isReplay: Bool
    /// Files to show with the notification, which a ``ContentModifier`` attached (`UNNotificationContent`'s
    /// `attachments`); not part of `userInfo`.
    public var attachments: [NotificationAttachment] = []
}

// The initializer is in an extension, so that the struct keeps its memberwise initializer, which builds the message in
// place: one written in the struct's body assigned each field to a `self` on the stack and then copied it out (a
// retain and a release of every field of every message decoded).
extension RemoteMessage {
    public init(
        userInfo: JSONObject,
        target: MessageTarget,
        collapseKey: String? = nil,
        priority: MessagePriority = .high,
        expiration: Int64? = nil,
        receivedAt: Int64 = WallClock.nowMilliseconds(),
        isReplay: Bool = false
    ) {
        self.init(
            userInfo: userInfo, target: target, collapseKey: collapseKey, priority: priority, expiration: expiration,
            receivedAt: receivedAt, isReplay: isReplay, attachments: [])
    }

    /// What the notification shows: `aps.alert`'s title, subtitle and body, and ``attachments``.
    public var content: NotificationContent {
        let alert = aps.alert
        return NotificationContent(title: alert?.title, subtitle: alert?.subtitle, body: alert?.body, attachments: attachments)
    }

    /// Writes `content` into `aps.alert` (its other members, such as `launch-image`, stay; a string alert becomes an
    /// object) and ``attachments``.
    public mutating func apply(_ content: NotificationContent) {
        attachments = content.attachments
        guard content.title != aps.alert?.title || content.subtitle != aps.alert?.subtitle || content.body != aps.alert?.body else {
            return
        }
        var aps = userInfo[UserInfoKey.aps]?.objectValue ?? [:]
        var alert: JSONObject
        switch aps["alert"] {
        case .object(let object)?: alert = object
        case .string(let body)?: alert = ["body": .string(body)]
        default: alert = [:]
        }
        for (key, value) in [("title", content.title), ("subtitle", content.subtitle), ("body", content.body)] {
            alert[key] = value.map { .string($0) }
        }
        aps["alert"] = .object(alert)
        userInfo[UserInfoKey.aps] = .object(aps)
    }

    /// `gcm.message_id`: the message's ID, unique per sender.
    public var messageID: String? { userInfo[UserInfoKey.messageID]?.stringValue }

    /// `from`: the sender ID for token messages, `/topics/<name>` for topic messages.
    public var from: String? { userInfo[UserInfoKey.from]?.stringValue }

    /// The topic the message was sent to, when it was a topic message.
    public var topic: String? {
        if case .topic(let name) = target { return name }
        return nil
    }

    /// The typed view of `aps` (an empty one when the message has none).
    public var aps: APS { APS(userInfo[UserInfoKey.aps]) ?? APS() }

    /// `aps.alert`'s title and body as ``APS/Alert`` reads them (a string alert is the body), without decoding the rest
    /// of `aps`: what the log presenter's line shows.
    package var alertTitleAndBody: (title: String?, body: String?) {
        guard case .object(let aps)? = userInfo[UserInfoKey.aps] else { return (nil, nil) }
        switch aps["alert"] {
        case .object(let alert)?: return (alert["title"]?.stringValue, alert["body"]?.stringValue)
        case .string(let body)?: return (nil, body)
        default: return (nil, nil)
        }
    }

    /// ``kind`` and what the bus reads from `aps` for every notification before presenting it (``APSPresentation``),
    /// from one look-up of `aps` and one walk over its members, without decoding the rest of it (a look-up per key
    /// took a dozen).
    var kindAndPresentation: (kind: MessageKind, presentation: APSPresentation) {
        guard case .object(let aps)? = userInfo[UserInfoKey.aps] else { return ([], APSPresentation()) }
        // The same rule as `aps.isDisplay` / `aps.contentAvailable`: an alert or a sound (a string or an object) or
        // a numeric badge displays; `content-available: 1` is silent.
        var kind: MessageKind = []
        var presentation = APSPresentation()
        for (key, value) in aps {
            switch key {
            case "alert":
                switch value {
                case .string:
                    kind.insert(.display)
                case .object(let alert):
                    kind.insert(.display)
                    presentation.alertHasLocalizationKey =
                        alert["title-loc-key"]?.stringValue != nil || alert["subtitle-loc-key"]?.stringValue != nil
                        || alert["loc-key"]?.stringValue != nil
                default:
                    break
                }
            case "sound":
                switch value {
                case .string, .object: kind.insert(.display)
                default: break
                }
            case "badge":
                if value.intValue != nil { kind.insert(.display) }
            case "content-available":
                if value.intValue == 1 { kind.insert(.silent) }
            case "mutable-content":
                presentation.mutableContent = value.intValue == 1
            case "category":
                presentation.category = value.stringValue
            default:
                break
            }
        }
        return (kind, presentation)
    }

    /// The analytics label (`fcm_options.analytics_label`, kept in `userInfo` as `google.c.a.m_l`).
    public var analyticsLabel: String? { userInfo[UserInfoKey.analyticsLabel]?.stringValue }

    /// The custom keys: every top-level key but `aps`, `from` and the `gcm.*` / `google.*` keys Herald and
    /// FCM add. For an FCM message these are its `data` entries.
    public var customKeys: JSONObject {
        var custom = JSONObject()
        for (key, value) in userInfo where !UserInfoKey.isReservedTopLevel(key) {
            custom[key] = value
        }
        return custom
    }

    /// The custom keys whose values are strings, as FCM's `data` map carries them.
    public var data: [String: String] {
        var data: [String: String] = [:]
        for (key, value) in userInfo where !UserInfoKey.isReservedTopLevel(key) {
            if let string = value.stringValue { data[key] = string }
        }
        return data
    }

    /// Which paths the message takes through the bus.
    public var kind: MessageKind { kindAndPresentation.kind }

    /// Whether the message has expired at `nowSeconds` (seconds since 1970).
    public func isExpired(atSeconds nowSeconds: Int64) -> Bool {
        guard let expiration, expiration > 0 else { return false }
        return nowSeconds > expiration
    }
}

/// The well-known keys of `userInfo`.
public enum UserInfoKey {
    public static let aps = "aps"
    public static let messageID = "gcm.message_id"
    public static let from = "from"
    public static let analyticsLabel = "google.c.a.m_l"
    public static let messageType = "message_type"

    /// Keys a sender may not use in `data` (FCM's reserved words and prefixes).
    public static func isReservedDataKey(_ key: String) -> Bool {
        // The prefixes are looked for only after a "g": most keys are not reserved, and this runs for each of them.
        key == from || key == messageType || key == "notification"
            || (key.utf8.first == UInt8(ascii: "g") && (key.hasPrefix("google.") || key.hasPrefix("gcm.")))
    }

    /// Top-level keys that are not custom keys.
    static func isReservedTopLevel(_ key: String) -> Bool {
        key == aps || key == from || key.hasPrefix("google.") || key.hasPrefix("gcm.")
    }
}

/// Whom a message is addressed to.
public enum MessageTarget: Sendable, Hashable, CustomStringConvertible {
    /// A registration token (FCM `token`; APNs device token in the URL).
    case token(String)
    /// An installation ID (FCM `fid`, which current Firebase Admin SDKs send instead of `token`).
    case installation(String)
    /// A topic name, without the `/topics/` prefix.
    case topic(String)
    /// An FCM condition such as `'a' in topics && ('b' in topics || !('c' in topics))`.
    case condition(String)

    public var description: String {
        switch self {
        case .token(let token): "token \(token)"
        case .installation(let id): "installation \(id)"
        case .topic(let name): "topic \(name)"
        case .condition(let condition): "condition \(condition)"
        }
    }
}

/// Delivery priority, as APNs and FCM have it.
public enum MessagePriority: Int, Sendable, Hashable {
    /// Deliver now (`apns-priority: 10`, FCM `HIGH`).
    case high = 10
    /// Deliver when convenient (`apns-priority: 5`, FCM `NORMAL`); required for background pushes.
    case normal = 5
}

/// The paths a message takes: display, silent, both, or neither (data-only).
public struct MessageKind: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Shows something: an alert, a badge or a sound. Goes to `willPresent` and the presenters.
    public static let display = MessageKind(rawValue: 1 << 0)
    /// `content-available: 1`. Goes to the background-fetch workers.
    public static let silent = MessageKind(rawValue: 1 << 1)

    /// Neither display nor silent: goes to the message handlers.
    public var isDataOnly: Bool { isEmpty }
}

/// The members of `aps` the bus reads for every notification (``RemoteMessage/kindAndPresentation``).
struct APSPresentation {
    /// `aps.alert` names a localization key as a string.
    var alertHasLocalizationKey = false
    /// `aps.mutable-content` is 1.
    var mutableContent = false
    /// `aps.category`.
    var category: String?
}
