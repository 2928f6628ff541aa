import Herald
import Yams

/// The config file's `categories` section: notification categories and their actions, declared without code.
///
/// ```yaml
/// categories:
///   message:                       # the identifier aps.category names
///     custom-dismiss-action: true  # report dismissals (optional, default false)
///     actions:
///       - identifier: reply
///         title: Reply
///         text-input: {button-title: Send, placeholder: Your answer}
///       - {identifier: delete, title: Delete, destructive: true, authentication-required: true}
///       - {identifier: open, title: Open, foreground: true}
/// ```
///
/// Any mistake stops start-up with the file, the line and the key (`categories.message.actions[1].title`).
enum CategoriesConfiguration {
    static let categoryKeys = ["custom-dismiss-action", "actions"]
    static let actionKeys = ["identifier", "title", "foreground", "destructive", "authentication-required", "text-input"]
    static let textInputKeys = ["button-title", "placeholder"]

    static func read(_ node: Node, path: String) throws -> [NotificationCategory] {
        let problem = Problem(path: path)
        guard let mapping = node.mapping else {
            throw problem(node, "categories", "must be a mapping of category identifiers to their actions")
        }
        var categories: [NotificationCategory] = []
        for (keyNode, valueNode) in mapping {
            guard let identifier = keyNode.scalar?.string, !identifier.isEmpty else {
                throw problem(keyNode, "categories", "a category identifier must be a non-empty name")
            }
            let key = "categories.\(identifier)"
            var category = NotificationCategory(identifier: identifier, actions: [])
            guard let fields = valueNode.mapping else {
                throw problem(valueNode, key, "must be a mapping with actions (and custom-dismiss-action)")
            }
            for (fieldNode, value) in fields {
                switch try problem.known(fieldNode, in: key, categoryKeys) {
                case "custom-dismiss-action":
                    if try problem.boolean(value, "\(key).custom-dismiss-action") { category.options.insert(.customDismissAction) }
                default:
                    guard let sequence = value.sequence else {
                        throw problem(value, "\(key).actions", "must be a list of actions")
                    }
                    for (index, actionNode) in sequence.enumerated() {
                        category.actions.append(try action(actionNode, key: "\(key).actions[\(index)]", problem))
                    }
                }
            }
            let identifiers = category.actions.map(\.identifier)
            if let repeated = identifiers.first(where: { id in identifiers.filter { $0 == id }.count > 1 }) {
                throw problem(valueNode, "\(key).actions", "the action identifier '\(repeated)' is given more than once")
            }
            categories.append(category)
        }
        return categories
    }

    private static func action(_ node: Node, key: String, _ problem: Problem) throws -> NotificationAction {
        guard let fields = node.mapping else {
            throw problem(node, key, "must be a mapping with identifier and title")
        }
        var identifier: String?
        var title: String?
        var action = NotificationAction(identifier: "", title: "")
        for (fieldNode, value) in fields {
            let field = try problem.known(fieldNode, in: key, actionKeys)
            switch field {
            case "identifier": identifier = try problem.text(value, "\(key).identifier")
            case "title": title = try problem.text(value, "\(key).title")
            case "foreground": if try problem.boolean(value, "\(key).foreground") { action.options.insert(.foreground) }
            case "destructive": if try problem.boolean(value, "\(key).destructive") { action.options.insert(.destructive) }
            case "authentication-required":
                if try problem.boolean(value, "\(key).authentication-required") { action.options.insert(.authenticationRequired) }
            default:
                action.textInputPlaceholder = ""
                if isNull(value) { continue }  // `text-input:` alone: a text field with the platform's defaults
                guard let input = value.mapping else {
                    throw problem(value, "\(key).text-input", "must be a mapping with button-title and placeholder (both optional)")
                }
                for (inputNode, inputValue) in input {
                    switch try problem.known(inputNode, in: "\(key).text-input", textInputKeys) {
                    case "button-title": action.textInputButtonTitle = try problem.text(inputValue, "\(key).text-input.button-title")
                    default: action.textInputPlaceholder = try problem.text(inputValue, "\(key).text-input.placeholder")
                    }
                }
            }
        }
        guard let identifier else { throw problem(node, "\(key).identifier", "is missing") }
        guard let title else { throw problem(node, "\(key).title", "is missing") }
        action.identifier = identifier
        action.title = title
        return action
    }

    /// The section as `--print-config` prints it: one flow mapping per action, reading back to the same categories.
    static func rendered(_ categories: [NotificationCategory]) -> [String] {
        let scalar = ServeSettings.yamlScalar
        var lines = ["categories:  # config file"]
        for category in categories {
            lines.append("  \(scalar(category.identifier)):")
            if category.options.contains(.customDismissAction) { lines.append("    custom-dismiss-action: true") }
            lines.append(category.actions.isEmpty ? "    actions: []" : "    actions:")
            for action in category.actions {
                var fields = ["identifier: \(scalar(action.identifier))", "title: \(scalar(action.title))"]
                let options: [(NotificationAction.Options, String)] = [
                    (.foreground, "foreground"), (.destructive, "destructive"), (.authenticationRequired, "authentication-required"),
                ]
                fields += options.filter { action.options.contains($0.0) }.map { "\($0.1): true" }
                if let placeholder = action.textInputPlaceholder {
                    var input: [String] = []
                    if let button = action.textInputButtonTitle { input.append("button-title: \(scalar(button))") }
                    if !placeholder.isEmpty { input.append("placeholder: \(scalar(placeholder))") }
                    fields.append("text-input: {\(input.joined(separator: ", "))}")
                }
                lines.append("      - {\(fields.joined(separator: ", "))}")
            }
        }
        return lines
    }

    private static func isNull(_ node: Node) -> Bool { ServeConfiguration.isNull(node) }

    /// Makes the errors: `herald: config file P, line L, key K: what`.
    private struct Problem {
        let path: String

        func callAsFunction(_ node: Node, _ key: String, _ what: String) -> ConfigurationError {
            ConfigurationError(message: "herald: config file \(path), line \(node.mark?.line ?? 0), key \(key): \(what)")
        }

        func known(_ node: Node, in key: String, _ keys: [String]) throws -> String {
            guard let name = node.scalar?.string, keys.contains(name) else {
                let name = node.scalar?.string ?? ServeConfiguration.shown(node)
                throw self(node, key, "unknown key '\(name)'; the keys are \(keys.joined(separator: ", "))")
            }
            return name
        }

        func text(_ node: Node, _ key: String) throws -> String {
            guard !CategoriesConfiguration.isNull(node), let text = node.scalar?.string, !text.isEmpty else {
                throw self(node, key, "\(ServeConfiguration.shown(node)) is not valid; allowed: a non-empty string")
            }
            return text
        }

        func boolean(_ node: Node, _ key: String) throws -> Bool {
            guard let scalar = node.scalar, let flag = Bool.construct(from: scalar) else {
                throw self(node, key, "\(ServeConfiguration.shown(node)) is not valid; allowed: true or false")
            }
            return flag
        }
    }
}
