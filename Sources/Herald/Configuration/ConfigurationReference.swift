extension ConfigurationSetting {
    /// The flag as the help writes it: `--key <value>`, a boolean's `--key / --no-key`.
    public var flagUsage: String {
        switch kind {
        case .boolean: "\(flag), \(negatedFlag)"
        case .list: "\(flag) <\(valueName)> (repeatable)"
        default: "\(flag) <\(valueName)>"
        }
    }

    /// What happens to a new value on reload.
    var reloadText: String { isLive ? "applied on reload (SIGHUP)" : "needs a restart" }
}

extension ConfigurationSection {
    /// Where the section's keys go in a config file, as a sentence.
    var fileText: String {
        guard let fileSection else { return "In the config file: at the top level." }
        return "In the config file: under \(fileSection): (or each key at the top level)."
    }
}

extension ConfigurationSchema {
    /// The settings section by section, as a command's help lists them: each flag, what it does, its default, what it
    /// allows, its environment variable and config file key.
    public func helpText() -> String {
        var lines: [String] = []
        for section in sections where !section.settings.isEmpty {
            lines.append("\(section.name): \(section.summary) \(section.fileText)")
            for setting in section.settings {
                lines.append("  \(setting.flagUsage)")
                lines.append(
                    "        \(setting.help) Default: \(setting.defaultText). Allowed: \(setting.allowed). Environment: "
                        + "\(setting.environmentName); config key: \(setting.key); \(setting.reloadText)\(setting.isSecret ? "; a secret" : "")."
                )
            }
            lines.append("")
        }
        return lines.joined(separator: "\n")
    }

    /// The configuration reference as a Markdown page: `title`, `introduction`, then a table per section with every
    /// setting's key, flag, environment variable, default, what it allows and what it does.
    public func markdownReference(title: String, introduction: String) -> String {
        var lines = ["# \(title)", "", introduction, ""]
        for section in sections where !section.settings.isEmpty {
            let file =
                section.fileSection.map { "In the config file: the section `\($0):` (a key of it may also stand at the top level)." }
                ?? "In the config file: at the top level."
            lines += ["## \(section.name)", "", "\(section.summary) \(file)", ""]
            lines.append("| key | flag | environment | default | allowed | reload | what it does |")
            lines.append("|---|---|---|---|---|---|---|")
            for setting in section.settings {
                let cells = [
                    "`\(setting.key)`", "`\(setting.flagUsage)`", "`\(setting.environmentName)`", Self.cell(setting.defaultText),
                    Self.cell(setting.allowed), setting.isLive ? "live" : "restart",
                    Self.cell(setting.help) + (setting.isSecret ? " (a secret: never printed)" : ""),
                ]
                lines.append("| " + cells.joined(separator: " | ") + " |")
            }
            lines.append("")
        }
        return lines.joined(separator: "\n")
    }

    /// `text` in a Markdown table cell: `|` escaped, `<` and `>` as entities (`<PROJECT-ID>` is not a tag).
    private static func cell(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "|": escaped += "\\|"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
