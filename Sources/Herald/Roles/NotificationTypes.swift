/// How to present a notification, as `UNNotificationPresentationOptions` (same raw values).
public struct PresentationOptions: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    public static let badge = PresentationOptions(rawValue: 1 << 0)
    public static let sound = PresentationOptions(rawValue: 1 << 1)
    /// Deprecated on Apple platforms in favour of `.list` and `.banner`; kept so old handlers work.
    public static let alert = PresentationOptions(rawValue: 1 << 2)
    public static let list = PresentationOptions(rawValue: 1 << 3)
    public static let banner = PresentationOptions(rawValue: 1 << 4)

    public var description: String {
        let names: [(PresentationOptions, String)] = [
            (.list, "list"), (.banner, "banner"), (.sound, "sound"), (.badge, "badge"), (.alert, "alert"),
        ]
        return "[" + names.filter { contains($0.0) }.map { ".\($0.1)" }.joined(separator: ", ") + "]"
    }
}

/// What a background-fetch worker found, as `UIBackgroundFetchResult`.
public enum BackgroundFetchResult: String, Sendable, Hashable {
    case newData
    case noData
    case failed

    /// Combines the answers of several workers for one message: `.newData` if any worker got new data,
    /// otherwise `.noData` if any worker finished without new data, otherwise (every worker failed) `.failed`.
    /// No workers at all is `.noData`.
    public static func combined(_ results: some Sequence<BackgroundFetchResult>) -> BackgroundFetchResult {
        var sawNoData = false
        var sawAny = false
        for result in results {
            sawAny = true
            switch result {
            case .newData: return .newData
            case .noData: sawNoData = true
            case .failed: break
            }
        }
        return sawNoData || !sawAny ? .noData : .failed
    }
}

/// A custom action a notification of a category offers, as `UNNotificationAction`.
public struct NotificationAction: Sendable, Hashable {
    public struct Options: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let authenticationRequired = Options(rawValue: 1 << 0)
        public static let destructive = Options(rawValue: 1 << 1)
        public static let foreground = Options(rawValue: 1 << 2)
    }

    public var identifier: String
    public var title: String
    public var options: Options
    /// For a text-input action: the placeholder; `nil` for a plain button.
    public var textInputPlaceholder: String?

    public init(identifier: String, title: String, options: Options = [], textInputPlaceholder: String? = nil) {
        self.identifier = identifier
        self.title = title
        self.options = options
        self.textInputPlaceholder = textInputPlaceholder
    }
}

/// A set of actions notifications can name in `aps.category`, as `UNNotificationCategory`.
/// Register categories before use with ``Herald/register(category:)``.
public struct NotificationCategory: Sendable, Hashable {
    /// How notifications of a category behave, as `UNNotificationCategoryOptions`.
    public struct Options: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// A person's dismissal reaches the notification handlers as a response with
        /// ``NotificationResponse/dismissActionIdentifier`` (Apple's `customDismissAction`); without it a
        /// dismissal is not reported.
        public static let customDismissAction = Options(rawValue: 1 << 0)
    }

    public var identifier: String
    public var actions: [NotificationAction]
    public var options: Options

    public init(identifier: String, actions: [NotificationAction], options: Options = []) {
        self.identifier = identifier
        self.actions = actions
        self.options = options
    }
}

/// A person's response to a notification, as `UNNotificationResponse`.
public struct NotificationResponse: Sendable, Hashable {
    /// The person opened the notification (the reference's `UNNotificationDefaultActionIdentifier`).
    public static let defaultActionIdentifier = "com.apple.UNNotificationDefaultActionIdentifier"
    /// The person dismissed it (`UNNotificationDismissActionIdentifier`).
    public static let dismissActionIdentifier = "com.apple.UNNotificationDismissActionIdentifier"

    /// The notification responded to.
    public var message: RemoteMessage
    /// ``defaultActionIdentifier``, ``dismissActionIdentifier``, or a custom action's identifier.
    public var actionIdentifier: String
    /// What the person typed, for a text-input action.
    public var userText: String?

    public init(message: RemoteMessage, actionIdentifier: String, userText: String? = nil) {
        self.message = message
        self.actionIdentifier = actionIdentifier
        self.userText = userText
    }

    /// Whether this is the default action (the notification was opened).
    public var isDefaultAction: Bool { actionIdentifier == Self.defaultActionIdentifier }
    /// Whether the notification was dismissed.
    public var isDismissal: Bool { actionIdentifier == Self.dismissActionIdentifier }
}
