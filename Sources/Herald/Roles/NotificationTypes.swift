import Synchronization

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
        guard !isEmpty else { return "[]" }
        var text = "["
        for (option, name) in Self.names where contains(option) {
            if text.utf8.count > 1 { text += ", " }
            text += name
        }
        return text + "]"
    }

    private static let names: [(PresentationOptions, String)] = [
        (.list, ".list"), (.banner, ".banner"), (.sound, ".sound"), (.badge, ".badge"), (.alert, ".alert"),
    ]
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
    /// For a text-input action: the title of the button that sends the text (`UNTextInputNotificationAction`'s
    /// `textInputButtonTitle`); `nil` leaves it to the platform.
    public var textInputButtonTitle: String?

    public init(
        identifier: String, title: String, options: Options = [], textInputPlaceholder: String? = nil,
        textInputButtonTitle: String? = nil
    ) {
        self.identifier = identifier
        self.title = title
        self.options = options
        self.textInputPlaceholder = textInputPlaceholder
        self.textInputButtonTitle = textInputButtonTitle
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

/// A local file shown with a notification, as `UNNotificationAttachment` (an image, for the desktop presenter's
/// `image-path`).
public struct NotificationAttachment: Sendable, Hashable {
    /// A name for the attachment, unique in its notification.
    public var identifier: String
    /// The file's absolute path.
    public var path: String
    /// Its media type (`image/png`), when known.
    public var type: String?

    public init(identifier: String, path: String, type: String? = nil) {
        self.identifier = identifier
        self.path = path
        self.type = type
    }
}

/// What a notification shows, as `UNMutableNotificationContent`: what a ``ContentModifier`` may change.
public struct NotificationContent: Sendable, Hashable {
    /// `aps.alert.title`.
    public var title: String?
    /// `aps.alert.subtitle`.
    public var subtitle: String?
    /// `aps.alert.body`.
    public var body: String?
    /// Files shown with the notification.
    public var attachments: [NotificationAttachment]

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil, attachments: [NotificationAttachment] = []) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.attachments = attachments
    }
}

/// One `mutable-content` notification handed to the ``ContentModifier``s: the message as it arrived and the
/// content they change. Thread-safe: a modifier may change the content from any task, and the bus reads it at the
/// end or at the deadline (later changes are ignored).
public final class ContentModificationRequest: Sendable {
    /// The message as it arrived.
    public let message: RemoteMessage
    private let state: Locked<(content: NotificationContent, diagnostics: [(String, [String: String])])>

    public init(message: RemoteMessage) {
        self.message = message
        state = Locked((message.content, []))
    }

    /// The content to present; starts as the message's.
    public var content: NotificationContent {
        get { state.withLock { $0.content } }
        set { state.withLock { $0.content = newValue } }
    }

    /// Changes the content in one step (no change of another task's comes between reading and writing it).
    public func update(_ change: (inout NotificationContent) -> Void) {
        state.withLock { change(&$0.content) }
    }

    /// Records a `diagnostic` analytics event for this message, `detail` naming what happened (an image not
    /// downloaded, say) and `parameters` adding to it; the bus records it when the modification ends.
    public func recordDiagnostic(_ detail: String, parameters: [String: String] = [:]) {
        state.withLock { $0.diagnostics.append((detail, parameters)) }
    }

    var diagnostics: [(String, [String: String])] { state.withLock { $0.diagnostics } }
}

/// Whether the host's app is in use, as `UIApplication.State` (see ``Herald/applicationState``).
public enum ApplicationState: String, Sendable, Hashable, CaseIterable {
    /// In use: `willPresent` decides how each notification is presented.
    case active
    /// Not in use: notifications are presented as their payload asks; handlers see them when opened.
    case background
}

/// The application state shared by an instance and its bus: read on every notification's path, so an atomic rather
/// than a lock.
final class ApplicationStateCell: Sendable {
    private let isBackground: Atomic<Bool>

    init(_ state: ApplicationState = .active) {
        isBackground = Atomic(state == .background)
    }

    var value: ApplicationState { isBackground.load(ordering: .acquiring) ? .background : .active }

    /// Sets `state`; returns the state before.
    @discardableResult
    func exchange(_ state: ApplicationState) -> ApplicationState {
        isBackground.exchange(state == .background, ordering: .acquiringAndReleasing) ? .background : .active
    }
}
