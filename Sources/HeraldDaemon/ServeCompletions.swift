package import ArgumentParser
import Herald

/// `herald serve`'s settings in the shell completion scripts `herald --generate-completion-script` prints.
///
/// swift-argument-parser writes those scripts from the options it declares, and `herald serve`'s settings are not
/// among them: they are read from the schema (``ServeOption/schema``), after swift-argument-parser has handed them
/// over as unrecognized arguments. So the script it generates is completed here, from the same schema: every
/// setting's flag (a boolean's `--no-` form too; a list's flag as repeatable), with its value's completion — a one-of
/// setting's words, file names, directories or commands (``ConfigurationSetting/ValueCompletion``). Each shell's
/// script gets the flags where it keeps serve's own (`--config`, `--print-config`), so the generated parsing of the
/// command line (which words are option values) counts them too.
package enum ServeCompletions {
    /// `base`, swift-argument-parser's script for `shell` (of the root command `commandName`), with serve's settings
    /// added; `base` unchanged when it does not have the shape this expects (a newer swift-argument-parser: the
    /// completion tests say so).
    package static func script(extending base: String, shell: CompletionShell, commandName: String = "herald") -> String {
        let schema = ServeOption.schema
        return switch shell {
        case .bash: bash(base, commandName: commandName, settings: schema.settings) ?? base
        case .zsh: zsh(base, commandName: commandName, settings: schema.settings) ?? base
        case .fish: fish(base, commandName: commandName, settings: schema.settings) ?? base
        default: base
        }
    }

    /// The shell named by `--generate-completion-script SHELL` (or `=SHELL`; without one, the shell this runs in) among
    /// `arguments` (the program's, without its name); `nil` when they do not ask for a script or name no shell this
    /// knows.
    package static func requestedShell(_ arguments: [String]) -> CompletionShell? {
        let flag = "--generate-completion-script"
        guard let index = arguments.firstIndex(where: { $0 == flag || $0.hasPrefix(flag + "=") }) else { return nil }
        if arguments[index].hasPrefix(flag + "=") { return CompletionShell(rawValue: String(arguments[index].dropFirst(flag.count + 1))) }
        // A word that is not a shell is left to swift-argument-parser, which names the shells it knows.
        if index + 1 < arguments.endIndex, !arguments[index + 1].hasPrefix("-") { return CompletionShell(rawValue: arguments[index + 1]) }
        return CompletionShell.autodetected()
    }

    // MARK: Shells

    /// bash: the flags join `_herald_serve`'s arrays of flags and options (the generated parser skips an option's
    /// value by them), and a `case "${prev}"` after the arrays' use offers each value.
    private static func bash(_ base: String, commandName: String, settings: [ConfigurationSetting]) -> String? {
        guard let (found, range) = function("_\(commandName)_serve() {", in: base),
            let addCompletions = base.split(separator: "\n").first(where: { $0.hasSuffix("_add_completions() {") })?.dropLast(4)
        else { return nil }
        let words: [String: [String]] = [
            "repeating_flags": [],
            "non_repeating_flags": settings.filter { $0.kind == .boolean }.flatMap { [$0.flag, $0.negatedFlag] },
            "repeating_options": settings.filter { $0.kind == .list }.map(\.flag),
            "non_repeating_options": settings.filter { $0.kind != .boolean && $0.kind != .list }.map(\.flag),
        ]
        var lines = found
        var offered: Int?
        for index in range {
            let line = lines[index]
            let trimmed = line.drop { $0 == " " }
            if let equals = trimmed.firstIndex(of: "="), let extra = words[String(trimmed[..<equals])], trimmed.hasSuffix(")") {
                let items = trimmed[trimmed.index(equals, offsetBy: 2)..<trimmed.index(before: trimmed.endIndex)]
                let all = (items.isEmpty ? [] : [String(items)]) + extra
                lines[index] = String(line.prefix(line.count - trimmed.count) + trimmed[...equals]) + "(" + all.joined(separator: " ") + ")"
            } else if trimmed.contains("_offer_flags_options ") {
                offered = index
            }
        }
        guard let offered else { return nil }
        // The flags by what completes their values, in the schema's order.
        var cases: [(arguments: String, flags: [String])] = []
        for setting in settings {
            let arguments: String
            switch setting.completion {
            case .none: continue
            case .file: arguments = "-f"
            case .directory: arguments = "-d"
            case .command: arguments = "-c"
            case .words(let words): arguments = "-W " + words.map(singleQuoted).joined(separator: "$'\\n'")
            }
            if let index = cases.firstIndex(where: { $0.arguments == arguments }) {
                cases[index].flags.append(setting.flag)
            } else {
                cases.append((arguments, [setting.flag]))
            }
        }
        var block = ["", "    # herald serve's settings (its configuration schema): their values", "    case \"${prev}\" in"]
        for (arguments, flags) in cases {
            block += [
                "    \(flags.map(singleQuoted).joined(separator: "|")))", "        \(addCompletions) \(arguments)", "        return",
                "        ;;",
            ]
        }
        block.append("    esac")
        lines.insert(contentsOf: block, at: offered + 1)
        return lines.joined(separator: "\n")
    }

    /// zsh: an `_arguments` specification per flag joins `_herald_serve`'s `arg_specs`.
    private static func zsh(_ base: String, commandName: String, settings: [ConfigurationSetting]) -> String? {
        guard let (found, range) = function("_\(commandName)_serve() {", in: base),
            let specs = range.first(where: { found[$0].hasSuffix("local -ar arg_specs=(") })
        else { return nil }
        var lines = found
        let indent = String(repeating: " ", count: lines[specs].prefix { $0 == " " }.count + 4)
        var added: [String] = []
        for setting in settings {
            let description = "[\(zshEscaped(summary(setting)))]"
            switch setting.kind {
            case .boolean:
                added.append(indent + singleQuoted("(\(setting.negatedFlag))\(setting.flag)\(description)"))
                added.append(indent + singleQuoted("(\(setting.flag))\(setting.negatedFlag)\(description)"))
            default:
                let action: String
                switch setting.completion {
                case .none: action = " "
                case .file: action = "_files"
                case .directory: action = "_files -/"
                case .command: action = "_command_names -e"
                case .words(let words): action = "(\(words.joined(separator: " ")))"
                }
                let repeating = setting.kind == .list ? "*" : ""
                added.append(indent + singleQuoted("\(repeating)\(setting.flag)\(description):\(zshEscaped(setting.valueName)):\(action)"))
            }
        }
        lines.insert(contentsOf: added, at: specs + 1)
        return lines.joined(separator: "\n")
    }

    /// fish: the flags join serve's option specifications in the generated parser (`argparse` must know them to skip
    /// their values), and a `complete` line per flag follows.
    private static func fish(_ base: String, commandName: String, settings: [ConfigurationSetting]) -> String? {
        var lines = base.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let serveCase = lines.firstIndex(where: { $0.drop { $0 == " " } == "case 'serve'" }),
            serveCase + 1 < lines.count, lines[serveCase + 1].contains("_parse_subcommand "),
            let condition = lines.first(where: {
                $0.hasPrefix("function ") && $0.contains("_should_offer_completions_for_flags_or_options")
            })?
            .split(separator: " ").dropFirst().first
        else { return nil }
        let names = settings.flatMap { setting -> [String] in
            let name = String(setting.flag.dropFirst(2))
            switch setting.kind {
            case .boolean: return [name, String(setting.negatedFlag.dropFirst(2))]
            case .list: return [name + "=+"]
            default: return [name + "="]
            }
        }
        lines[serveCase + 1] += names.map { " " + singleQuoted($0) }.joined()
        let command = "complete -c \(singleQuoted(commandName)) -n "
        let context = "\"\(commandName) serve\""
        var added = ["", "# herald serve's settings (its configuration schema)"]
        for setting in settings {
            let description = "-d \(singleQuoted(summary(setting)))"
            let flags = setting.kind == .boolean ? [setting.flag, setting.negatedFlag] : [setting.flag]
            for flag in flags {
                let name = String(flag.dropFirst(2))
                // A flag given once is not offered again; a list's may be.
                let when = singleQuoted("\(condition) \(context)" + (setting.kind == .list ? "" : " \(name)"))
                var line = "\(command)\(when) -l \(singleQuoted(name)) \(description)"
                if setting.kind != .boolean {
                    switch setting.completion {
                    case .none: line += " -rfka ''"
                    case .file: line += " -rF"
                    case .directory: line += " -rfa '(__fish_complete_directories)'"
                    case .command: line += " -rfa '(__fish_complete_command)'"
                    case .words(let words): line += " -rfka \(singleQuoted(words.joined(separator: " ")))"
                    }
                }
                added.append(line)
            }
        }
        return lines.joined(separator: "\n") + "\n" + added.joined(separator: "\n") + "\n"
    }

    // MARK: Text

    /// The lines of `script` and the range of those of the function that starts with the line `header` (up to its
    /// closing `}` at the start of a line).
    private static func function(_ header: String, in script: String) -> ([String], Range<Int>)? {
        let lines = script.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let start = lines.firstIndex(of: header), let end = lines[start...].firstIndex(of: "}") else { return nil }
        return (lines, start..<end)
    }

    /// What a completion menu says of `setting`: its help's first sentence.
    private static func summary(_ setting: ConfigurationSetting) -> String {
        let help = setting.help
        guard let end = help.range(of: ". ") ?? help.range(of: "; ") else {
            return help.hasSuffix(".") ? String(help.dropLast()) : help
        }
        return String(help[..<end.lowerBound])
    }

    /// `text` in single quotes for any of the three shells (`'` as `'\''`).
    private static func singleQuoted(_ text: String) -> String {
        "'" + text.replacing("'", with: "'\\''") + "'"
    }

    /// `text` inside an `_arguments` specification: its `[`, `]` and `:` escaped.
    private static func zshEscaped(_ text: String) -> String {
        var escaped = ""
        for character in text {
            if "[]:\\".contains(character) { escaped.append("\\") }
            escaped.append(character)
        }
        return escaped
    }
}
