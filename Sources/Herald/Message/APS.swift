/// The typed view of a message's `aps` dictionary, as an Apple app sees it in `userInfo["aps"]`.
///
/// Missing or mistyped keys read as `nil` / `false`; decoding has already refused messages whose `aps`
/// has the wrong types, so a handler can trust what it reads here.
public struct APS: Sendable, Hashable {
    /// The alert: title, subtitle, body and their localization keys. `aps.alert` may be a plain string,
    /// which reads as a body.
    public var alert: Alert?
    /// The badge number; 0 clears the badge.
    public var badge: Int?
    /// The sound: a file name (`"default"`) or the critical-alert dictionary.
    public var sound: Sound?
    /// `thread-id`: groups notifications.
    public var threadID: String?
    /// `category`: the identifier of a registered ``NotificationCategory``.
    public var category: String?
    /// `content-available: 1`: a silent message that wakes background-fetch workers.
    public var contentAvailable: Bool
    /// `mutable-content: 1`: a notification service extension may change the content.
    public var mutableContent: Bool
    /// `interruption-level`: `passive`, `active`, `time-sensitive` or `critical`.
    public var interruptionLevel: InterruptionLevel?
    /// `relevance-score`, between 0 and 1.
    public var relevanceScore: Double?
    /// `target-content-id`: the window or content to bring forward.
    public var targetContentID: String?

    public struct Alert: Sendable, Hashable {
        public var title: String?
        public var subtitle: String?
        public var body: String?
        public var titleLocKey: String?
        public var titleLocArgs: [String]?
        public var subtitleLocKey: String?
        public var subtitleLocArgs: [String]?
        public var locKey: String?
        public var locArgs: [String]?
        public var launchImage: String?

        public init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
        }
    }

    public enum Sound: Sendable, Hashable {
        /// A sound file name, or `"default"`.
        case named(String)
        /// A critical alert sound: `{"critical": 1, "name": "...", "volume": 0.0...1.0}`.
        case critical(name: String, volume: Double)
    }

    public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
        case passive
        case active
        case timeSensitive = "time-sensitive"
        case critical
    }

    /// Whether the message shows something to a person: an alert, a badge or a sound.
    public var isDisplay: Bool { alert != nil || badge != nil || sound != nil }

    public init(
        alert: Alert? = nil, badge: Int? = nil, sound: Sound? = nil, threadID: String? = nil, category: String? = nil,
        contentAvailable: Bool = false, mutableContent: Bool = false, interruptionLevel: InterruptionLevel? = nil,
        relevanceScore: Double? = nil, targetContentID: String? = nil
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.targetContentID = targetContentID
    }

    /// Reads the typed view from a `userInfo["aps"]` value; `nil` when it is not an object.
    ///
    /// Walks the members once (an `aps` dictionary has a few of the many keys looked for); every message's
    /// route reads it.
    public init?(_ value: JSONValue?) {
        guard let object = value?.objectValue else { return nil }
        self.init()
        for (key, member) in object {
            switch key {
            case "alert":
                switch member {
                case .string(let body): alert = Alert(body: body)
                case .object(let fields): alert = Alert(fields)
                default: break
                }
            case "badge": badge = member.intValue.map { Int($0) }
            case "sound":
                switch member {
                case .string(let name): sound = .named(name)
                case .object(let fields):
                    sound = .critical(name: fields["name"]?.stringValue ?? "default", volume: fields["volume"]?.doubleValue ?? 1)
                default: break
                }
            case "thread-id": threadID = member.stringValue
            case "category": category = member.stringValue
            case "content-available": contentAvailable = member.intValue == 1
            case "mutable-content": mutableContent = member.intValue == 1
            case "interruption-level": interruptionLevel = member.stringValue.flatMap(InterruptionLevel.init(rawValue:))
            case "relevance-score": relevanceScore = member.doubleValue
            case "target-content-id": targetContentID = member.stringValue
            default: break
            }
        }
    }
}

extension APS.Alert {
    /// Reads an `alert` dictionary, walking its members once.
    init(_ fields: JSONObject) {
        self.init()
        for (key, member) in fields {
            switch key {
            case "title": title = member.stringValue
            case "subtitle": subtitle = member.stringValue
            case "body": body = member.stringValue
            case "title-loc-key": titleLocKey = member.stringValue
            case "title-loc-args": titleLocArgs = member.arrayValue?.compactMap(\.stringValue)
            case "subtitle-loc-key": subtitleLocKey = member.stringValue
            case "subtitle-loc-args": subtitleLocArgs = member.arrayValue?.compactMap(\.stringValue)
            case "loc-key": locKey = member.stringValue
            case "loc-args": locArgs = member.arrayValue?.compactMap(\.stringValue)
            case "launch-image": launchImage = member.stringValue
            default: break
            }
        }
    }
}
