import Herald

/// A plugin's `categories_json` (ABI 1.1) as categories: the shape `herald_plugin.h` documents, the same as the
/// `categories` section of `herald serve`'s config file.
enum CategoriesJSON {
    struct Problem: Error {
        let message: String
        init(_ key: String, _ what: String) { message = key.isEmpty ? what : "\(key) \(what)" }
    }

    /// The categories, or why they cannot be read: a ``Problem`` naming the member (`message.actions[1].title`).
    static func read(_ text: String) throws(Problem) -> [NotificationCategory] {
        let root: JSONValue
        do {
            root = try JSONParser.parse(text)
        } catch {
            throw Problem("", "is not valid JSON (\(error))")
        }
        guard let object = root.objectValue else { throw Problem("", "must be a JSON object of categories by identifier") }
        var categories: [NotificationCategory] = []
        for (identifier, value) in object.sorted(by: { $0.key < $1.key }) {
            guard !identifier.isEmpty else { throw Problem("", "has an empty category identifier") }
            guard let fields = value.objectValue else { throw Problem(identifier, "must be an object with actions") }
            var category = NotificationCategory(identifier: identifier, actions: [])
            for (field, value) in fields {
                switch field {
                case "custom-dismiss-action":
                    if try boolean(value, "\(identifier).\(field)") { category.options.insert(.customDismissAction) }
                case "actions":
                    guard let items = value.arrayValue else { throw Problem("\(identifier).actions", "must be an array") }
                    for (index, item) in items.enumerated() {
                        category.actions.append(try action(item, "\(identifier).actions[\(index)]"))
                    }
                default:
                    throw Problem("\(identifier).\(field)", "is not a member Herald knows (custom-dismiss-action, actions)")
                }
            }
            categories.append(category)
        }
        return categories
    }

    private static func action(_ value: JSONValue, _ key: String) throws(Problem) -> NotificationAction {
        guard let fields = value.objectValue else { throw Problem(key, "must be an object with identifier and title") }
        var action = NotificationAction(identifier: "", title: "")
        let options: [String: NotificationAction.Options] = [
            "foreground": .foreground, "destructive": .destructive, "authentication-required": .authenticationRequired,
        ]
        for (field, value) in fields {
            switch field {
            case "identifier": action.identifier = try text(value, "\(key).identifier")
            case "title": action.title = try text(value, "\(key).title")
            case "text-input":
                action.textInputPlaceholder = ""
                guard let input = value.objectValue else { throw Problem("\(key).text-input", "must be an object") }
                for (inputField, inputValue) in input {
                    switch inputField {
                    case "button-title": action.textInputButtonTitle = try text(inputValue, "\(key).text-input.button-title")
                    case "placeholder": action.textInputPlaceholder = try text(inputValue, "\(key).text-input.placeholder")
                    default:
                        throw Problem("\(key).text-input.\(inputField)", "is not a member Herald knows (button-title, placeholder)")
                    }
                }
            default:
                guard let option = options[field] else {
                    throw Problem(
                        "\(key).\(field)",
                        "is not a member Herald knows (identifier, title, foreground, destructive, authentication-required, text-input)")
                }
                if try boolean(value, "\(key).\(field)") { action.options.insert(option) }
            }
        }
        if action.identifier.isEmpty { throw Problem("\(key).identifier", "is missing") }
        if action.title.isEmpty { throw Problem("\(key).title", "is missing") }
        return action
    }

    private static func text(_ value: JSONValue, _ key: String) throws(Problem) -> String {
        guard let text = value.stringValue, !text.isEmpty else { throw Problem(key, "must be a non-empty string") }
        return text
    }

    private static func boolean(_ value: JSONValue, _ key: String) throws(Problem) -> Bool {
        guard let flag = value.boolValue else { throw Problem(key, "must be true or false") }
        return flag
    }
}
