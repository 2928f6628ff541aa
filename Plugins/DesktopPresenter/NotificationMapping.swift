import Herald
import HeraldDBus

/// The arguments of one `Notify` call, worked out from a message, its presentation options, its category and
/// what the notification server can do. Pure: the presenter sends it; tests read it.
struct NotifyRequest: Sendable, Hashable {
    var appName: String
    /// The notification this one replaces, by key: `c:` and the collapse ID, or `t:` and the thread ID.
    var replacementKey: String?
    var appIcon: String
    var summary: String
    var body: String
    /// Action identifiers and titles, alternating, as `Notify` takes them.
    var actions: [String]
    var hints: [DBusEntry]
    var expireTimeout: Int32 = -1
    /// The action of the category whose reply comes as `NotificationReplied` (an inline reply).
    var textActionIdentifier: String?

    /// Whether anything pops up for these options: a banner (`.banner`, or the older `.alert`) and some text.
    static func popsUp(_ message: RemoteMessage, options: PresentationOptions) -> Bool {
        guard !options.isDisjoint(with: [.banner, .alert]), let alert = message.aps.alert else { return false }
        return [alert.title, alert.subtitle, alert.body].contains { !($0 ?? "").isEmpty }
    }

    /// The action key `Notify` uses for the notification itself (clicking it).
    static let defaultActionKey = "default"
    /// The action key of KDE's inline reply.
    static let inlineReplyKey = "inline-reply"

    init(
        message: RemoteMessage, options: PresentationOptions, actions categoryActions: [NotificationAction],
        capabilities: Set<String>, settings: DesktopPresenter.Options
    ) {
        let aps = message.aps
        appName = settings.appName
        appIcon = settings.appIcon
        if let collapse = message.collapseKey, !collapse.isEmpty {
            replacementKey = "c:" + collapse
        } else if let thread = aps.threadID, !thread.isEmpty {
            replacementKey = "t:" + thread
        }
        let title = aps.alert?.title ?? ""
        let subtitle = aps.alert?.subtitle ?? ""
        summary = [title, subtitle].filter { !$0.isEmpty }.joined(separator: " — ")
        let text = aps.alert?.body ?? ""
        body = capabilities.contains("body-markup") ? Self.escapeMarkup(text) : text
        if summary.isEmpty {
            summary = settings.appName
        }

        actions = []
        hints = []
        if capabilities.contains("actions") {
            actions = [Self.defaultActionKey, settings.defaultActionTitle]
            for action in categoryActions {
                if let placeholder = action.textInputPlaceholder {
                    guard capabilities.contains("inline-reply"), textActionIdentifier == nil else { continue }
                    textActionIdentifier = action.identifier
                    actions += [Self.inlineReplyKey, action.title]
                    if !placeholder.isEmpty { hints.append(DBusEntry("x-kde-reply-placeholder-text", .string(placeholder))) }
                    if let button = action.textInputButtonTitle, !button.isEmpty {
                        hints.append(DBusEntry("x-kde-reply-submit-button-text", .string(button)))
                    }
                } else {
                    actions += [action.identifier, action.title]
                }
            }
        }

        let urgency: UInt8 =
            switch aps.interruptionLevel {
            case .passive: 0
            case .active, nil: 1
            case .timeSensitive, .critical: 2
            }
        hints.append(DBusEntry("urgency", .byte(urgency)))
        if options.contains(.sound), let sound = aps.sound {
            let name: String =
                switch sound {
                case .named(let name): name
                case .critical(let name, _): name
                }
            if name.hasPrefix("/") {
                hints.append(DBusEntry("sound-file", .string(name)))
            } else if name == "default" || name.isEmpty {
                hints.append(DBusEntry("sound-name", .string("message-new-instant")))
            } else {
                hints.append(DBusEntry("sound-name", .string(Self.withoutExtension(name))))
            }
        } else {
            hints.append(DBusEntry("suppress-sound", .boolean(true)))
        }
        if let image = Self.localImagePath(message) {
            hints.append(DBusEntry("image-path", .string(image)))
        }
        if let entry = settings.desktopEntry, !entry.isEmpty {
            hints.append(DBusEntry("desktop-entry", .string(entry)))
        }
        if let category = aps.category, !category.isEmpty {
            hints.append(DBusEntry("category", .string(category)))
        }
        if !options.contains(.list), !options.isDisjoint(with: [.banner, .alert]) {
            hints.append(DBusEntry("transient", .boolean(true)))
        }
    }

    /// The `Notify` arguments, with `replacesID` for the notification replaced (0 for none).
    func arguments(replacesID: UInt32) -> [DBusValue] {
        [
            .string(appName), .uint32(replacesID), .string(appIcon), .string(summary), .string(body), .stringArray(actions),
            .dictionary(hints), .int32(expireTimeout),
        ]
    }

    /// `&`, `<` and `>` as entities, for servers that read the body as markup.
    static func escapeMarkup(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    private static func withoutExtension(_ name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return name }
        return String(name[..<dot])
    }

    /// The message's image: its first attachment (a content modifier's, such as the downloaded
    /// `fcm_options.image`), or `fcm_options.image` when it is a local file (`file://` URL or absolute path); an
    /// image on the web needs downloading first, which presenting does not do.
    static func localImagePath(_ message: RemoteMessage) -> String? {
        if let attachment = message.attachments.first { return attachment.path }
        guard let image = message.userInfo["fcm_options"]?["image"]?.stringValue else { return nil }
        if image.hasPrefix("file://") { return String(image.dropFirst("file://".count)).removingPercentEncodingIfAny }
        return image.hasPrefix("/") ? image : nil
    }
}

extension String {
    /// `%XX` escapes decoded (a `file://` URL's path); the string unchanged when an escape is malformed.
    fileprivate var removingPercentEncodingIfAny: String {
        guard contains("%") else { return self }
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                    let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return self }
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
