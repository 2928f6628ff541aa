/// The value of one setting, once read from wherever it came from (a flag, an environment variable, a config file).
public enum ConfigurationValue: Hashable, Sendable {
    case string(String)
    case integer(Int)
    case boolean(Bool)
    case list([String])
}

/// A configuration that cannot be used: one line naming where the value came from (the file and line, the
/// environment variable or the flag), the key, the value and what is allowed.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    /// The whole line, as a command prints it.
    public let message: String
    public init(message: String) { self.message = message }
    public var description: String { message }
}

/// One setting of a plugin (or of the daemon itself): its key in a config file, its flag and environment variable,
/// its kind, its default and what it allows, whether it is a secret and whether it can change while running.
///
/// A daemon derives everything about the setting from this one description: the flag it parses, the `HERALD_*`
/// variable it reads, the config file key, the help text, the validation error and the configuration reference.
public struct ConfigurationSetting: Sendable {
    /// What a value is.
    public enum Kind: Sendable, Equatable {
        /// Any text ``ConfigurationSetting/accepts`` takes.
        case string
        /// A whole number in the range.
        case integer(ClosedRange<Int>)
        /// `true` or `false`; a flag `--key` or `--no-key`.
        case boolean
        /// Texts, each one ``ConfigurationSetting/accepts`` takes; a flag repeated.
        case list
        /// One of these words.
        case oneOf([String])
    }

    /// What a shell's completion offers for a value (`herald --generate-completion-script`).
    public enum ValueCompletion: Sendable, Equatable {
        /// Nothing: the value is typed.
        case none
        /// File names.
        case file
        /// Directory names.
        case directory
        /// Commands (programs in `PATH`).
        case command
        /// These words.
        case words([String])
    }

    /// The key in the config file; the environment variable is `HERALD_` and the key in upper case, `-` as `_`.
    public let key: String
    public let kind: Kind
    /// `nil`: not set unless given.
    public let defaultValue: ConfigurationValue?
    /// The default as the documentation states it.
    public let defaultText: String
    /// What a value may be, as error messages and the documentation say it.
    public let allowed: String
    /// What the setting does.
    public let help: String
    /// The flag: `--key` unless given.
    public let flag: String
    /// What the flag's value is called in the help (`file`, `seconds`...).
    public let valueName: String
    /// What separates a list's items in its environment variable.
    public let environmentSeparator: Character
    /// A value never printed (`--print-config` shows that it is set, not what it is).
    public let isSecret: Bool
    /// Whether a running daemon applies a new value when it reloads its configuration (SIGHUP).
    public let isLive: Bool
    /// What a shell's completion offers for a value.
    public let completion: ValueCompletion
    /// How a value is shown when it is printed: parts that are secret (a password in a URL) hidden.
    public let shown: @Sendable (String) -> String
    /// Whether a text (or each text of a list) is allowed; integers are checked against their range, one-of
    /// values against their words.
    public let accepts: @Sendable (String) -> Bool

    /// - Parameters:
    ///   - key: the config file key, also the flag (`--key`) unless `flag` says otherwise.
    ///   - kind: what a value is.
    ///   - defaultValue: the default, `nil` for none.
    ///   - defaultText: the default as the documentation states it.
    ///   - allowed: what a value may be, in words.
    ///   - help: what the setting does.
    ///   - flag: the flag, when it is not `--key`.
    ///   - valueName: the flag's value in the help.
    ///   - environmentSeparator: what separates a list's items in its environment variable.
    ///   - secret: whether the value is never printed.
    ///   - live: whether a reload applies a new value.
    ///   - completion: what a shell's completion offers for a value; by default a one-of setting's words, file names
    ///     for a value named `file` or `path`, directories for `dir`, commands for `program`, else nothing.
    ///   - shown: how a value is printed.
    ///   - accepts: whether a text is a valid value (or list item); by default any non-empty text.
    public init(
        _ key: String, _ kind: Kind, default defaultValue: ConfigurationValue?, _ defaultText: String, allowed: String, help: String,
        flag: String? = nil, valueName: String = "value", environmentSeparator: Character = ":", secret: Bool = false,
        live: Bool = false, completion: ValueCompletion? = nil, shown: @escaping @Sendable (String) -> String = { $0 },
        accepts: @escaping @Sendable (String) -> Bool = { !$0.isEmpty }
    ) {
        self.key = key
        self.kind = kind
        self.defaultValue = defaultValue
        self.defaultText = defaultText
        self.allowed = allowed
        self.help = help
        self.flag = flag ?? "--\(key)"
        self.valueName = valueName
        self.environmentSeparator = environmentSeparator
        self.isSecret = secret
        self.isLive = live
        self.shown = shown
        self.completion =
            completion
            ?? {
                switch (kind, valueName) {
                case (.oneOf(let words), _): .words(words)
                case (.boolean, _): .none
                case (_, "file"), (_, "path"): .file
                case (_, "dir"): .directory
                case (_, "program"): .command
                default: .none
                }
            }()
        if case .oneOf(let words) = kind {
            self.accepts = { words.contains($0) }
        } else {
            self.accepts = accepts
        }
    }

    /// `HERALD_` and the key in upper case with `_` for `-`: `project-id` is `HERALD_PROJECT_ID`.
    public var environmentName: String {
        "HERALD_" + String(key.uppercased().map { $0 == "-" ? "_" : $0 })
    }

    /// The flag that turns a boolean off: `--no-` and the flag's name.
    public var negatedFlag: String { "--no-" + flag.dropFirst(2) }

    /// Whether `value` is of this setting's kind and allowed.
    public func isAllowed(_ value: ConfigurationValue) -> Bool {
        switch (kind, value) {
        case (.string, .string(let text)), (.oneOf, .string(let text)): accepts(text)
        case (.integer(let range), .integer(let number)): range.contains(number)
        case (.boolean, .boolean): true
        case (.list, .list(let items)): items.allSatisfy(accepts)
        default: false
        }
    }

    /// `text` (from an environment variable or a flag) as a value of this kind, or `nil` when it is not one:
    /// integers as whole numbers, booleans as true / false / yes / no / on / off / 1 / 0, lists split at
    /// `separator`.
    public func decode(_ text: String, separator: Character? = nil) -> ConfigurationValue? {
        switch kind {
        case .string, .oneOf:
            return .string(text)
        case .integer:
            return Int(text).map { .integer($0) }
        case .boolean:
            switch text.lowercased() {
            case "true", "yes", "on", "1": return .boolean(true)
            case "false", "no", "off", "0": return .boolean(false)
            default: return nil
            }
        case .list:
            guard let separator else { return .list([text]) }
            return .list(text.split(separator: separator).map(String.init))
        }
    }
}

/// The settings of one plugin (or of the daemon itself), declared by the plugin beside its options.
public struct ConfigurationSection: Sendable {
    /// The plugin's name, as the reference titles its section.
    public let name: String
    /// What the plugin does, in a sentence.
    public let summary: String
    public let settings: [ConfigurationSetting]
    /// The config file's mapping that holds the section's settings: the plugin's name, as `--help`, the reference and
    /// `disable-plugins` write it (`TokenWebhook:`); `nil` for settings that stand at the top level of the file only
    /// (the daemon's own). A key of a section may also stand at the top level, as it did before sections.
    public let fileSection: String?

    /// - Parameters:
    ///   - name: the plugin's name; also the config file's mapping of its settings, unless `topLevel`.
    ///   - summary: what the plugin does, in a sentence.
    ///   - settings: its settings.
    ///   - topLevel: whether the settings stand at the config file's top level rather than in a mapping of their own.
    public init(name: String, summary: String, settings: [ConfigurationSetting], topLevel: Bool = false) {
        self.name = name
        self.summary = summary
        self.settings = settings
        self.fileSection = topLevel ? nil : name
    }
}

/// The sections of a daemon's plugins composed: the one list its flags, environment variables, config file keys,
/// help, validation and reference come from. Keys and flags are unique across sections.
public struct ConfigurationSchema: Sendable {
    public let sections: [ConfigurationSection]
    /// Every setting, section by section.
    public let settings: [ConfigurationSetting]
    private let byKey: [String: Int]
    /// Each key's section, by index in ``sections``.
    private let sectionByKey: [String: Int]
    /// Each config file section's index in ``sections``, by ``ConfigurationSection/fileSection``.
    private let byFileSection: [String: Int]

    /// Composes `sections`. A key, a flag or a section name given twice, or a section named like a key, is a
    /// programming error: a config file key must say without doubt whether it is a setting or a section.
    public init(_ sections: [ConfigurationSection]) {
        self.sections = sections
        settings = sections.flatMap(\.settings)
        var byKey: [String: Int] = [:]
        for (index, setting) in settings.enumerated() {
            precondition(byKey.updateValue(index, forKey: setting.key) == nil, "the setting \(setting.key) is declared twice")
        }
        precondition(Set(settings.map(\.flag)).count == settings.count, "a flag is declared twice")
        var sectionByKey: [String: Int] = [:]
        var byFileSection: [String: Int] = [:]
        for (index, section) in sections.enumerated() {
            for setting in section.settings { sectionByKey[setting.key] = index }
            guard let name = section.fileSection else { continue }
            precondition(byKey[name] == nil, "the section \(name) is named like a setting")
            precondition(byFileSection.updateValue(index, forKey: name) == nil, "the section \(name) is declared twice")
        }
        self.byKey = byKey
        self.sectionByKey = sectionByKey
        self.byFileSection = byFileSection
    }

    /// The setting of a config file key.
    public func setting(forKey key: String) -> ConfigurationSetting? {
        byKey[key].map { settings[$0] }
    }

    /// The section that declares the setting of `key`.
    public func section(forKey key: String) -> ConfigurationSection? {
        sectionByKey[key].map { sections[$0] }
    }

    /// The section whose settings a config file's mapping `name` holds (``ConfigurationSection/fileSection``).
    public func section(fileSection name: String) -> ConfigurationSection? {
        byFileSection[name].map { sections[$0] }
    }

    /// A setting given as a flag, with where it came from.
    public struct FlagValue: Sendable {
        public let key: String
        public let value: ConfigurationValue
        /// The flag as written (`--no-echo`, `--http`).
        public let flag: String
    }

    /// Reads settings from command-line arguments: `--flag value` and `--flag=value`; a boolean as `--flag`,
    /// `--no-flag` or `--flag=true|false`; a list's flag repeated, its values in order. A value's kind is checked
    /// here; whether it is allowed is for the caller, which knows the other sources too.
    ///
    /// - Throws: ``ConfigurationError`` for an unknown flag (with the nearest known one), a missing value or a value
    ///   of the wrong kind, naming the flag.
    public func parse(arguments: [String]) throws -> [FlagValue] {
        var flags: [String: (setting: ConfigurationSetting, negated: Bool)] = [:]
        for setting in settings {
            flags[setting.flag] = (setting, false)
            if setting.kind == .boolean { flags[setting.negatedFlag] = (setting, true) }
        }
        var given: [FlagValue] = []
        var lists: [String: Int] = [:]
        var index = arguments.startIndex
        while index < arguments.endIndex {
            let argument = arguments[index]
            index += 1
            let name: String
            var inline: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            } else {
                name = argument
            }
            guard name.hasPrefix("-"), let (setting, negated) = flags[name] else {
                guard name.hasPrefix("-") else {
                    throw ConfigurationError(message: "herald: unexpected argument '\(argument)'")
                }
                let suggestion = Self.nearest(to: name, among: flags.keys.sorted()).map { " (did you mean '\($0)'?)" } ?? ""
                throw ConfigurationError(message: "herald: unknown flag '\(name)'\(suggestion); see --help")
            }
            if setting.kind == .boolean, inline == nil {
                given.append(FlagValue(key: setting.key, value: .boolean(!negated), flag: name))
                continue
            }
            guard !negated else {
                throw ConfigurationError(message: "herald: flag \(name): takes no value")
            }
            let text: String
            if let inline {
                text = inline
            } else {
                guard index < arguments.endIndex else {
                    throw ConfigurationError(message: "herald: flag \(name): a value is missing; allowed: \(setting.allowed)")
                }
                text = arguments[index]
                index += 1
            }
            guard let value = setting.decode(text) else {
                throw ConfigurationError(message: "herald: flag \(name): '\(text)' is not valid; allowed: \(setting.allowed)")
            }
            if case .list(let items) = value, let earlier = lists[setting.key], case .list(let before) = given[earlier].value {
                given[earlier] = FlagValue(key: setting.key, value: .list(before + items), flag: name)
            } else {
                if case .list = value { lists[setting.key] = given.count }
                given.append(FlagValue(key: setting.key, value: value, flag: name))
            }
        }
        return given
    }

    /// The candidate closest to `word` by edit distance, when it is close enough to be a slip (at most a third of
    /// the word's length, and at most 3).
    public static func nearest(to word: String, among candidates: [String]) -> String? {
        let limit = min(3, max(1, word.count / 3))
        let scored = candidates.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= limit }
        return scored.min { $0.1 < $1.1 }?.0
    }

    /// Levenshtein distance between `a` and `b`.
    public static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// Resolved values, as a plugin reads them to build its options: each setting's value, or its default.
public struct ConfigurationValues: Sendable {
    /// Every key's value; an absent key is not set.
    public let values: [String: ConfigurationValue]

    public init(_ values: [String: ConfigurationValue]) { self.values = values }

    /// Whether `setting` has a value (given, or a default).
    public func isSet(_ setting: ConfigurationSetting) -> Bool { values[setting.key] != nil || setting.defaultValue != nil }

    /// A string setting's value, `nil` when it is not set.
    public func string(_ setting: ConfigurationSetting) -> String? {
        if case .string(let text)? = values[setting.key] ?? setting.defaultValue { return text }
        return nil
    }

    /// An integer setting's value (0 when it is not set and has no default).
    public func integer(_ setting: ConfigurationSetting) -> Int {
        if case .integer(let number)? = values[setting.key] ?? setting.defaultValue { return number }
        return 0
    }

    /// A boolean setting's value (`false` when it is not set and has no default).
    public func boolean(_ setting: ConfigurationSetting) -> Bool {
        if case .boolean(let flag)? = values[setting.key] ?? setting.defaultValue { return flag }
        return false
    }

    /// A list setting's items (none when it is not set).
    public func list(_ setting: ConfigurationSetting) -> [String] {
        if case .list(let items)? = values[setting.key] ?? setting.defaultValue { return items }
        return []
    }
}
