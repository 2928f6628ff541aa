/// A handler plugin written as an ordinary Swift type and built as a shared object that Herald loads.
///
/// Conform to ``DynamicHandler`` and to the role protocols you need (``DynamicNotificationHandler``,
/// ``DynamicMessageHandler``, ``DynamicFetchWorker``, ``DynamicTokenHandler``) — Herald calls the plugin in
/// exactly those roles — and export it once per shared object:
///
/// ```swift
/// import HeraldPluginKit
///
/// final class Weather: DynamicNotificationHandler, DynamicFetchWorker {
///     static let name = "weather"
///     init(configuration: JSONObject) throws {}
///     func willPresent(_ message: PluginMessage) -> PresentationOptions { [.banner, .sound] }
///     func fetch(_ message: PluginMessage) -> BackgroundFetchResult { .newData }
/// }
///
/// @_cdecl("herald_plugin_entry_v1")
/// public func heraldPluginEntry() -> UnsafeRawPointer { HeraldPluginKit.export(Weather.self) }
/// ```
///
/// Calls are synchronous and run on Herald's threads for plugins, never on its event loop: blocking is allowed.
/// They may come from several threads at once unless ``isSerial`` is `true`, in which case Herald makes one call
/// at a time (a class with unsynchronised mutable state then needs `@unchecked Sendable` and `isSerial = true`).
public protocol DynamicHandler: Sendable {
    /// The plugin's name in Herald's logs and analytics (`plugin=<name>`).
    static var name: String { get }
    /// Whether Herald must call the plugin from one thread at a time (`HERALD_PLUGIN_SERIAL`). Default `false`.
    static var isSerial: Bool { get }
    /// Made once per load with the plugin's configuration (an empty object when it has none). Throwing refuses
    /// the load: Herald stops with an error naming the library; the error itself is written to standard error.
    init(configuration: JSONObject) throws
    /// Called once when Herald unloads the plugin, after every other call has returned. Default: nothing.
    func shutdown()
}

extension DynamicHandler {
    public static var isSerial: Bool { false }
    public func shutdown() {}
}

/// Asked how to present display notifications, and told of people's responses to them.
public protocol DynamicNotificationHandler: DynamicHandler {
    /// A display notification arrived: how to present it. Default `[]`.
    func willPresent(_ message: PluginMessage) -> PresentationOptions
    /// A person opened, dismissed or acted on a notification. Default: nothing.
    func didReceive(_ response: PluginResponse)
    /// The notification categories this plugin's notifications name in `aps.category`, registered by Herald when
    /// it loads the plugin (plugin ABI 1.1, `categories_json`): an object of categories by identifier, as
    /// `herald_plugin.h` shows, e.g. `["message": ["actions": [["identifier": "reply", "title": "Reply",
    /// "text-input": ["placeholder": "Your answer"]]]]]`. Default: none.
    static var categories: JSONObject { get }
}

extension DynamicNotificationHandler {
    public static var categories: JSONObject { [:] }
    public func willPresent(_ message: PluginMessage) -> PresentationOptions { [] }
    public func didReceive(_ response: PluginResponse) {}
}

/// Handles data-only messages.
public protocol DynamicMessageHandler: DynamicHandler {
    /// A data-only message arrived. A thrown error is logged (to standard error, by the kit) and recorded by
    /// Herald as a handler failure; it never stops other handlers.
    func didReceive(_ message: PluginMessage) throws
}

/// Woken by silent (`content-available: 1`) messages.
public protocol DynamicFetchWorker: DynamicHandler {
    /// Fetch what the message announces. Herald counts a call that runs past its deadline as `.failed`.
    func fetch(_ message: PluginMessage) -> BackgroundFetchResult
}

/// Told the registration token at every start and whenever it changes.
public protocol DynamicTokenHandler: DynamicHandler {
    /// The current token; `nil` after it was deleted, until a new one is minted.
    func didReceiveRegistrationToken(_ token: String?)
}

/// How to present a notification: the raw values of `UNNotificationPresentationOptions` and Herald's
/// `PresentationOptions`.
public struct PresentationOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let badge = PresentationOptions(rawValue: 1 << 0)
    public static let sound = PresentationOptions(rawValue: 1 << 1)
    /// Deprecated on Apple platforms in favour of `.list` and `.banner`.
    public static let alert = PresentationOptions(rawValue: 1 << 2)
    public static let list = PresentationOptions(rawValue: 1 << 3)
    public static let banner = PresentationOptions(rawValue: 1 << 4)
}

/// What a background fetch found.
public enum BackgroundFetchResult: Sendable, Hashable {
    case newData
    case noData
    case failed
}

/// A message as a plugin gets it: the `userInfo` an Apple app would see, and Herald's delivery metadata.
public struct PluginMessage: Sendable, Hashable {
    /// The payload: `aps`, the data keys, `gcm.message_id`, `from`, ...
    public var userInfo: JSONObject
    /// `gcm.message_id`.
    public var messageID: String?
    /// The sender ID, or `/topics/<name>` for a topic message.
    public var from: String?
    /// The topic, for a topic message.
    public var topic: String?
    public var collapseKey: String?
    /// `"high"` or `"normal"`.
    public var priority: String
    /// When the message expires, in seconds since 1970.
    public var expiration: Int64?
    /// When Herald accepted it, in milliseconds since 1970.
    public var receivedAt: Int64
    /// Delivered again after a restart (the durable inbox replays what was not finished).
    public var isReplay: Bool

    /// The envelope Herald sends (see `herald_plugin.h`); `nil` when it is not one.
    public init?(envelope: JSONValue) {
        guard let object = envelope.objectValue, let userInfo = object["userInfo"]?.objectValue else { return nil }
        self.userInfo = userInfo
        messageID = object["messageID"]?.stringValue
        from = object["from"]?.stringValue
        topic = object["topic"]?.stringValue
        collapseKey = object["collapseKey"]?.stringValue
        priority = object["priority"]?.stringValue ?? "high"
        expiration = object["expiration"]?.intValue
        receivedAt = object["receivedAt"]?.intValue ?? 0
        isReplay = object["isReplay"]?.boolValue ?? false
    }

    /// `aps`, when the message has it.
    public var aps: JSONObject? { userInfo["aps"]?.objectValue }

    /// The alert's title (`aps.alert.title`).
    public var title: String? { aps?["alert"]?["title"]?.stringValue }

    /// The alert's body (`aps.alert.body`, or `aps.alert` when it is a string).
    public var body: String? {
        guard let alert = aps?["alert"] else { return nil }
        return alert.stringValue ?? alert["body"]?.stringValue
    }

    /// The custom keys whose values are strings (an FCM message's `data`): every top-level key but `aps`,
    /// `from` and the `gcm.*` / `google.*` keys.
    public var data: [String: String] {
        var data: [String: String] = [:]
        for (key, value) in userInfo where key != "aps" && key != "from" && !key.hasPrefix("gcm.") && !key.hasPrefix("google.") {
            if let string = value.stringValue { data[key] = string }
        }
        return data
    }
}

/// A person's response to a notification.
public struct PluginResponse: Sendable, Hashable {
    /// The person opened the notification.
    public static let defaultActionIdentifier = "com.apple.UNNotificationDefaultActionIdentifier"
    /// The person dismissed it.
    public static let dismissActionIdentifier = "com.apple.UNNotificationDismissActionIdentifier"

    public var message: PluginMessage
    /// ``defaultActionIdentifier``, ``dismissActionIdentifier``, or one of the category's actions.
    public var actionIdentifier: String
    /// What the person typed, for a text-input action.
    public var userText: String?

    /// The envelope Herald sends for a response; `nil` when it is not one.
    public init?(envelope: JSONValue) {
        guard let message = PluginMessage(envelope: envelope), let action = envelope["action"]?.stringValue else { return nil }
        self.message = message
        actionIdentifier = action
        userText = envelope["userText"]?.stringValue
    }

    public var isDefaultAction: Bool { actionIdentifier == Self.defaultActionIdentifier }
    public var isDismissal: Bool { actionIdentifier == Self.dismissActionIdentifier }
}
