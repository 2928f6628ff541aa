import Glibc
import Herald
import HeraldEchoHandler
import HeraldExecFetchWorker
import HeraldHTTPReceiver
import HeraldImageAttachment
import HeraldJSONLExport
import HeraldNATSReceiver
import HeraldPrometheusMetrics
import HeraldSQLite
import HeraldSocketReceiver
import HeraldTokenWebhook
import HeraldUnifiedPush
import Logging
import Yams

/// Where the value of a setting came from. Each overrides the ones before it: default < file < environment < flag.
enum SettingSource: Equatable, Sendable, CustomStringConvertible {
    case defaultValue
    case file(path: String, line: Int)
    case environment(String)
    case flag(String)

    var description: String {
        switch self {
        case .defaultValue: "default"
        case .file(let path, let line): "config file \(path), line \(line)"
        case .environment(let name): "environment \(name)"
        case .flag(let name): "flag \(name)"
        }
    }
}

/// The settings `herald serve` runs with, resolved from its defaults, the config file, the environment and its flags.
struct ServeSettings: Sendable {
    /// Every key's value (absent: not set) and where it came from.
    private(set) var values: [String: SettingValue] = [:]
    private(set) var sources: [String: SettingSource] = [:]
    /// The config file's `categories` section (``CategoriesConfiguration``).
    var categories: [NotificationCategory] = []
    /// The config file's `plugin-settings` section (``PluginSettings``): each dynamic plugin's own settings.
    var pluginSettings: [PluginSettings] = []
    /// The settings there are: the daemon's, the bundled plugins' and an embedder's.
    let schema: ConfigurationSchema

    init(schema: ConfigurationSchema = ServeOption.schema) {
        self.schema = schema
        for option in schema.settings {
            if let value = option.defaultValue { values[option.key] = value }
            sources[option.key] = .defaultValue
        }
    }

    mutating func set(_ option: ServeOption, _ value: SettingValue, from source: SettingSource) {
        values[option.key] = value
        sources[option.key] = source
    }

    /// Takes `key`'s value (or its absence) and source from `other`: a live setting's new value on reload.
    mutating func adopt(_ key: String, from other: ServeSettings) {
        values[key] = other.values[key]
        sources[key] = other.sources[key] ?? .defaultValue
    }

    /// The values, as plugins read them to build their options.
    var configuration: ConfigurationValues { ConfigurationValues(values) }

    private func string(_ option: ServeOption) -> String? { configuration.string(option) }
    private func integer(_ option: ServeOption) -> Int { configuration.integer(option) }
    private func boolean(_ option: ServeOption) -> Bool { configuration.boolean(option) }
    /// A string setting whose value `none` turns something off: `nil` then.
    private func unlessNone(_ option: ServeOption) -> String? { string(option).flatMap { $0 == "none" ? nil : $0 } }

    /// The HTTP receiver's address, `nil` when off.
    var http: String? { unlessNone(HTTPReceiver.Settings.http) }
    /// The socket receiver's address as written (the default: `herald.sock` in the data directory), `nil` when off.
    var socket: String? {
        let text = string(SocketReceiver.Settings.socket) ?? "\(dataDirectory)/herald.sock"
        return text == "none" ? nil : text
    }
    var projectID: String { string(.projectID) ?? "herald" }
    var senderID: String { string(.senderID) ?? "herald" }
    var dataDirectory: String { string(.dataDirectory) ?? "herald-data" }
    var echo: Bool { boolean(EchoHandler.Settings.echo) }
    var presenter: String { string(.presenter) ?? "log" }
    var unifiedPush: Bool { boolean(UnifiedPushDistributor.Settings.enabled) }
    /// The UnifiedPush endpoint URL prefix: as set, or the HTTP endpoint's `/up/`.
    var unifiedPushEndpointURL: String {
        string(UnifiedPushDistributor.Settings.endpointURL)
            ?? "\(tlsCertificate == nil ? "http" : "https")://\(http ?? "127.0.0.1:8080")/up/"
    }
    /// How long a UnifiedPush app may take to answer a call.
    var unifiedPushCallTimeout: Int { integer(UnifiedPushDistributor.Settings.callTimeout) }
    var authTokenFile: String? { string(HTTPReceiver.Settings.authTokenFile) }
    var logLevel: Logger.Level { string(.logLevel).flatMap(Logger.Level.init(rawValue:)) ?? .info }
    var shutdownGrace: Int { integer(.shutdownGrace) }
    var maxReplays: Int { integer(.maxReplays) }
    var maxInFlight: Int { integer(.maxInFlight) }
    var contentModifierDeadline: Int { integer(.contentModifierDeadline) }
    var backgroundFetchDeadline: Int { integer(.backgroundFetchDeadline) }
    var analyticsStore: Bool { boolean(SQLiteAnalyticsStore.Settings.enabled) }
    var analyticsRetentionDays: Int { integer(SQLiteAnalyticsStore.Settings.retentionDays) }
    var plugins: [String] { configuration.list(.plugins) }
    /// Whether the bundled plugin of `section` may start (`disable-plugins` does not name it).
    func isEnabled(_ section: ConfigurationSection) -> Bool { !configuration.list(.disabledPlugins).contains(section.name) }
    var apnsKeys: [APNsKeySetting] { configuration.list(HTTPReceiver.Settings.apnsKeys).compactMap(APNsKeySetting.init(parsing:)) }
    var metrics: String? { unlessNone(PrometheusExporter.Settings.metrics) }
    var allowUnauthenticatedNetwork: Bool { boolean(.allowUnauthenticatedNetwork) }
    var allowPlaintextNetwork: Bool { boolean(.allowPlaintextNetwork) }
    var tlsCertificate: String? { string(.tlsCertificate) }
    var tlsKey: String? { string(.tlsKey) }
    var tlsClientCA: String? { string(.tlsClientCA) }
    /// tls-sni-certs: the certificates (and their keys) chosen by SNI besides tls-cert's.
    var tlsSNICertificates: [(certificate: String, key: String)] {
        configuration.list(.tlsSNICertificates).compactMap(ServeOption.sniCertificate)
    }
    var deliveryMetrics: String? { unlessNone(JSONLExport.Settings.path) }
    var fcmProxy: Bool { boolean(HTTPReceiver.Settings.fcmProxy) }

    /// The background-fetch worker's options, `nil` when no command is set.
    var execFetchOptions: ExecFetchWorker.Options? { ExecFetchWorker.Options(configuration: configuration) }

    /// Warns when the background-fetch command may run as long as Herald lets a fetch run: Herald then cancels the run
    /// at its deadline before the command's own timeout ends it (the same SIGTERM and `.failed`, but the operator's
    /// timeout is not the one in force). Logged at the start and after a reload that changes the timeout.
    func warnIfExecFetchOutlastsDeadline(logger: Logger) {
        guard execFetchOptions != nil, isEnabled(ExecFetchWorker.Settings.section) else { return }
        let timeout = integer(ExecFetchWorker.Settings.timeout)
        guard timeout >= backgroundFetchDeadline else { return }
        logger.warning(
            "exec-fetch-timeout is not shorter than background-fetch-deadline: a run still going at the deadline is ended then (counted failed); raise background-fetch-deadline for longer runs",
            metadata: ["exec_fetch_timeout": "\(timeout)s", "background_fetch_deadline": "\(backgroundFetchDeadline)s"])
    }

    /// The token webhook's URL, `nil` when off.
    var tokenWebhookURL: String? { string(TokenWebhook.Settings.url) }
    var tokenWebhookSecretFile: String? { string(TokenWebhook.Settings.secretFile) }
    var tokenWebhookCA: String? { string(TokenWebhook.Settings.ca) }
    /// `nil`: no limit.
    var tokenWebhookMaxAttempts: Int? {
        let attempts = integer(TokenWebhook.Settings.maxAttempts)
        return attempts == 0 ? nil : attempts
    }
    var imageAttachmentCA: String? { string(ImageAttachment.Settings.ca) }
    var imageAttachmentMaxBytes: Int { integer(ImageAttachment.Settings.maxBytes) }

    var natsServers: [String] { NATSReceiver.Settings.serverURLs(configuration) }
    var gateway: Bool { boolean(NATSReceiver.Settings.gateway) }
    var natsTokenFile: String? { string(NATSReceiver.Settings.tokenFile) }

    /// NATSReceiver's options from the nats-* settings (`authToken` read from nats-token-file by the caller), or
    /// `nil` when no server is given (NATS off).
    func natsOptions(authToken: String?) throws -> NATSReceiver.Options? {
        try NATSReceiver.Options(configuration: configuration, authToken: authToken)
    }
}

/// Reads `herald serve`'s settings: defaults, then the YAML config file, then `HERALD_*` environment variables, then
/// flags, each overriding the one before. Every value is checked where it is read, so an error names its source.
enum ServeConfiguration {
    /// The settings, and warnings for `HERALD_*` environment variables that are not settings (the environment is
    /// shared with other programs, so they do not stop the start).
    ///
    /// - Parameters:
    ///   - file: the config file's path, or `nil` for none.
    ///   - environment: the process's environment.
    ///   - flags: the values given as flags, by key, with the flag's name as written.
    /// - Throws: ``ConfigurationError`` for a file that cannot be read or is not valid YAML, an unknown key, a value of
    ///   the wrong type or out of range, wherever it came from.
    ///   - schema: the settings there are.
    static func resolve(
        file: String?, environment: [String: String], flags: [(key: String, value: SettingValue, flag: String)],
        schema: ConfigurationSchema = ServeOption.schema
    ) throws -> (settings: ServeSettings, warnings: [String]) {
        var settings = ServeSettings(schema: schema)
        if let file { try readFile(file, into: &settings) }
        let warnings = try readEnvironment(environment, into: &settings)
        for (key, value, flag) in flags {
            guard let option = schema.setting(forKey: key) else { continue }
            let source = SettingSource.flag(flag)
            switch value {
            case .list(let items):
                if let bad = items.first(where: { !option.accepts($0) }) { throw invalid(option, "'\(bad)'", at: source) }
            default:
                guard option.isAllowed(value) else { throw invalid(option, quoted(value), at: source) }
            }
            settings.set(option, value, from: source)
        }
        try PluginSettings.check(settings.pluginSettings, plugins: settings.plugins)
        return (settings, warnings)
    }

    // MARK: The file

    static func readFile(_ path: String, into settings: inout ServeSettings) throws {
        guard let bytes = readWholeFile(path) else {
            throw ConfigurationError(message: "herald: cannot read the config file \(path): \(String(cString: strerror(errno)))")
        }
        try readFile(contents: bytes, path: path, into: &settings)
    }

    /// The config file's `bytes` (read from `path`, which errors name) into `settings`: what the fuzz target
    /// (Fuzz/Sources/FuzzConfig) drives.
    static func readFile(contents bytes: [UInt8], path: String, into settings: inout ServeSettings) throws {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigurationError(message: "herald: config file \(path): not UTF-8 text")
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw ConfigurationError(message: "herald: config file \(path)\(yamlProblem(error))")
        }
        // An empty file (or one of comments only) sets nothing.
        guard let root else { return }
        guard let mapping = root.mapping else {
            throw ConfigurationError(
                message: "herald: config file \(path): the top level must be a mapping of keys to values (key: value lines)")
        }
        // Where each key was given (a plugin's key may stand at the top level or in its section, not both).
        var given: [String: (line: Int, place: String)] = [:]
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line ?? 0
            guard let key = keyNode.scalar?.string else {
                throw ConfigurationError(message: "herald: config file \(path), line \(line): a key must be a plain name")
            }
            if key == "categories" {
                settings.categories = try CategoriesConfiguration.read(valueNode, path: path)
                continue
            }
            if key == PluginSettings.key {
                settings.pluginSettings = try PluginSettings.read(valueNode, path: path)
                continue
            }
            if let section = settings.schema.section(fileSection: key) {
                try readSection(section, valueNode, line: line, path: path, given: &given, into: &settings)
                continue
            }
            guard let option = settings.schema.setting(forKey: key) else {
                throw unknownTopLevelKey(key, line: line, path: path, schema: settings.schema)
            }
            try readSetting(option, valueNode, line: line, place: key, path: path, given: &given, into: &settings)
        }
    }

    /// A plugin's section of the file (`TokenWebhook:` and its keys below): a mapping of that section's keys only,
    /// each as the flag and the variable name it. Empty (every key commented out) it sets nothing.
    private static func readSection(
        _ section: ConfigurationSection, _ node: Node, line: Int, path: String, given: inout [String: (line: Int, place: String)],
        into settings: inout ServeSettings
    ) throws {
        let name = section.fileSection ?? section.name
        if isNull(node) { return }
        guard let mapping = node.mapping else {
            throw ConfigurationError(
                message: """
                    herald: config file \(path), line \(line), key \(name): \(shown(node)) is not valid; allowed: a mapping of \
                    \(name)'s keys to their values (\(section.settings.map(\.key).joined(separator: ", ")))
                    """)
        }
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line ?? 0
            guard let key = keyNode.scalar?.string else {
                throw ConfigurationError(message: "herald: config file \(path), line \(line), key \(name): a key must be a plain name")
            }
            guard let option = section.settings.first(where: { $0.key == key }) else {
                throw unknownSectionKey(key, in: section, line: line, path: path, schema: settings.schema)
            }
            try readSetting(option, valueNode, line: line, place: "\(name).\(key)", path: path, given: &given, into: &settings)
        }
    }

    /// One setting's value at `place` (its key, or `Section.key`) and `line` of the file.
    private static func readSetting(
        _ option: ServeOption, _ node: Node, line: Int, place: String, path: String, given: inout [String: (line: Int, place: String)],
        into settings: inout ServeSettings
    ) throws {
        if let earlier = given[option.key] {
            throw ConfigurationError(
                message: """
                    herald: config file \(path), line \(line), key \(place): given twice, also at line \(earlier.line) (\(earlier.place)); \
                    keep one
                    """)
        }
        given[option.key] = (line, place)
        let source = SettingSource.file(path: path, line: line)
        guard let value = decode(node, as: option.kind), option.isAllowed(value) else {
            throw invalid(option, shown(node), at: source, place: place)
        }
        settings.set(option, value, from: source)
    }

    /// A top-level key that is neither a setting, a section, `categories` nor `plugin-settings`: named with the nearest
    /// of them (a section written in kebab case, `token-webhook`, is taken for the section it spells).
    private static func unknownTopLevelKey(_ key: String, line: Int, path: String, schema: ConfigurationSchema) -> ConfigurationError {
        let sections = schema.sections.compactMap(\.fileSection)
        let folded = { (name: String) in String(name.lowercased().filter { $0 != "-" && $0 != "_" }) }
        let nearest =
            sections.first { folded($0) == folded(key) }
            ?? ConfigurationSchema.nearest(to: key, among: schema.settings.map(\.key) + sections)
        let suggestion = nearest.map { " (did you mean '\($0)'?)" } ?? ""
        let topLevel = schema.sections.filter { $0.fileSection == nil }.flatMap(\.settings).map(\.key)
        return ConfigurationError(
            message: """
                herald: config file \(path), line \(line): unknown key '\(key)'\(suggestion); the keys are \
                \((topLevel + ["categories", PluginSettings.key]).joined(separator: ", ")) and the plugins' sections \
                \(sections.joined(separator: ", ")) (whose keys may also stand at the top level)
                """)
    }

    /// A key in `section` that is not one of its settings: when it is another section's (or a top-level one), where it
    /// belongs; else the nearest of the section's keys, or of the others'.
    private static func unknownSectionKey(
        _ key: String, in section: ConfigurationSection, line: Int, path: String, schema: ConfigurationSchema
    ) -> ConfigurationError {
        let name = section.fileSection ?? section.name
        let keys = section.settings.map(\.key)
        func home(_ key: String) -> String {
            schema.section(forKey: key)?.fileSection.map { "in section \($0)" } ?? "at the top level"
        }
        let hint: String
        if schema.setting(forKey: key) != nil {
            hint = ": it belongs \(home(key))"
        } else if let nearest = ConfigurationSchema.nearest(to: key, among: keys) {
            hint = " (did you mean '\(nearest)'?)"
        } else if let nearest = ConfigurationSchema.nearest(to: key, among: schema.settings.map(\.key)) {
            hint = " (did you mean '\(nearest)', \(home(nearest))?)"
        } else {
            hint = ""
        }
        return ConfigurationError(
            message: """
                herald: config file \(path), line \(line), key \(name).\(key): unknown key '\(key)' in section \(name)\(hint); \
                the keys of \(name) are \(keys.joined(separator: ", "))
                """)
    }

    /// `node` as a value of `kind`, or `nil` when it is not one. Strings take any scalar as written (`sender-id: 123`
    /// is the string "123"); integers must be written as whole numbers; booleans as YAML has them (true, false, yes,
    /// no, on, off); lists as sequences of scalars. An empty value (`key:` alone) is never a value.
    static func decode(_ node: Node, as kind: ServeOption.Kind) -> SettingValue? {
        if isNull(node) { return nil }
        switch kind {
        case .string, .oneOf:
            return node.scalar.map { .string($0.string) }
        case .integer:
            return node.scalar.flatMap { Int($0.string) }.map { .integer($0) }
        case .boolean:
            return node.scalar.flatMap { Bool.construct(from: $0) }.map { .boolean($0) }
        case .list:
            guard let sequence = node.sequence else { return nil }
            var items: [String] = []
            for item in sequence {
                guard let scalar = item.scalar, !isNull(item) else { return nil }
                items.append(scalar.string)
            }
            return .list(items)
        }
    }

    /// Whether `node` is YAML's null: nothing after the colon, `~` or `null`.
    static func isNull(_ node: Node) -> Bool {
        node.scalar != nil && node.tag == Tag(.null)
    }

    /// How an error shows a YAML value: a scalar quoted, anything else by what it is.
    static func shown(_ node: Node) -> String {
        switch node {
        case .scalar(let scalar): isNull(node) ? "an empty value" : "'\(scalar.string)'"
        case .sequence: "a list"
        case .mapping: "a mapping"
        case .alias: "an alias"
        }
    }

    /// Yams' error as `, line L, column C: not valid YAML: problem` (one line; Yams' own text spans several).
    static func yamlProblem(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return ", line \(mark.line), column \(mark.column): not valid YAML: \(problem)"
        case .duplicatedKeysInMapping(let duplicates, let context):
            return ", line \(context.mark.line): the key \(duplicates.sorted().joined(separator: ", ")) is given more than once"
        case .reader(let problem, _, _, _):
            return ": not valid YAML: \(problem)"
        default:
            return ": not valid YAML: \(error)"
        }
    }

    // MARK: The environment

    static func readEnvironment(_ environment: [String: String], into settings: inout ServeSettings) throws -> [String] {
        for option in settings.schema.settings {
            // An empty variable counts as not set, as shells treat it.
            guard let text = environment[option.environmentName], !text.isEmpty else { continue }
            let source = SettingSource.environment(option.environmentName)
            guard let value = option.decode(text, separator: option.environmentSeparator), option.isAllowed(value) else {
                throw invalid(option, "'\(text)'", at: source)
            }
            settings.set(option, value, from: source)
        }
        let known = Set(settings.schema.settings.map(\.environmentName)).union(ServeOption.otherEnvironmentNames)
        return environment.keys.filter { $0.hasPrefix("HERALD_") && !known.contains($0) }.sorted().map { name in
            let suggestion = ConfigurationSchema.nearest(to: name, among: known.sorted()).map { " (did you mean \($0)?)" } ?? ""
            return "environment \(name) is not a setting of herald serve and is ignored\(suggestion)"
        }
    }

    // MARK: Checks and messages

    /// A value `option` does not allow, `shown` as the message quotes it; for a one-of setting, with the nearest of
    /// its words when the value looks like a slip (`desktp`: did you mean 'desktop'?). `place` is the key as the file
    /// gives it (`TokenWebhook.token-webhook-url` in a section).
    static func invalid(_ option: ServeOption, _ shown: String, at source: SettingSource, place key: String? = nil) -> ConfigurationError {
        let place = if case .file = source { "\(source), key \(key ?? option.key)" } else { "\(source)" }
        var suggestion = ""
        if case .oneOf(let words) = option.kind,
            let nearest = ConfigurationSchema.nearest(to: String(shown.filter { $0 != "'" && $0 != "\"" }), among: words)
        {
            suggestion = " (did you mean '\(nearest)'?)"
        }
        return ConfigurationError(message: "herald: \(place): \(shown) is not valid; allowed: \(option.allowed)\(suggestion)")
    }

    static func quoted(_ value: SettingValue) -> String {
        switch value {
        case .string(let text): "'\(text)'"
        case .integer(let number): "'\(number)'"
        case .boolean(let flag): "'\(flag)'"
        case .list(let items): "'\(items.joined(separator: ":"))'"
        }
    }
}

/// The whole contents of the file at `path`, or `nil` (with `errno` set) when it cannot be read.
package func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var contents: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count < 0, errno == EINTR { continue }
        guard count >= 0 else { return nil }
        if count == 0 { return contents }
        contents += buffer[0..<count]
    }
}

extension ServeSettings {
    /// The effective configuration as a config file: the daemon's settings at the top level, then each plugin's in its
    /// section (`TokenWebhook:`), one `key: value` line per setting with its source in a comment. Unset settings (the
    /// auth token file) are commented out. The bearer secret itself is never shown.
    func rendered(environment: [String: String]) -> String {
        var lines = ["# herald serve: the effective configuration; each line says where its value came from"]
        for section in schema.sections where !section.settings.isEmpty {
            var indent = ""
            if let name = section.fileSection {
                lines.append("\(Self.yamlScalar(name)):  # \(section.summary)")
                indent = "  "
            }
            for option in section.settings { lines.append(indent + line(option, environment: environment)) }
        }
        if !categories.isEmpty { lines += CategoriesConfiguration.rendered(categories) }
        if !pluginSettings.isEmpty { lines += PluginSettings.rendered(pluginSettings) }
        return lines.joined(separator: "\n")
    }

    /// `option`'s line of ``rendered(environment:)``, without its indentation.
    private func line(_ option: ServeOption, environment: [String: String]) -> String {
        let source = sources[option.key] ?? .defaultValue
        var origin = "\(source)"
        if option.key == SocketReceiver.Settings.socket.key, values[option.key] == nil { origin += " (herald.sock in data-dir)" }
        if option.isSecret, values[option.key] != nil {
            return "# \(option.key): set, not shown (a secret)  # \(origin)"
        }
        let value: String
        switch values[option.key] {
        case .string(let text)?: value = Self.yamlScalar(option.shown(text))
        case .integer(let number)?: value = "\(number)"
        case .boolean(let flag)?: value = "\(flag)"
        case .list(let items)?:
            // A server URL may carry a password: shown as ***, like the receiver's logs show it.
            value = "[" + items.map(option.shown).map(Self.yamlScalar).joined(separator: ", ") + "]"
        case nil:
            if option.key == SocketReceiver.Settings.socket.key, let socket {
                value = Self.yamlScalar(socket)
            } else {
                guard option.key == HTTPReceiver.Settings.authTokenFile.key else {
                    return "# \(option.key): not set; \(option.defaultText)"
                }
                let secret =
                    environment["HERALD_AUTH_TOKEN"].map { $0.isEmpty ? "" : "; the bearer secret comes from HERALD_AUTH_TOKEN" } ?? ""
                return "# \(option.key): not set\(secret.isEmpty ? "; no bearer secret" : secret)"
            }
        }
        return "\(option.key): \(value)  # \(origin)"
    }

    /// `text` as a YAML scalar: plain when that reads back as the same string, else double-quoted.
    static func yamlScalar(_ text: String) -> String {
        let plain =
            !text.isEmpty && text.allSatisfy { $0.isLetter || $0.isNumber || "._/-:@+".contains($0) }
            && !text.hasSuffix(":") && !text.hasPrefix("-")
        return plain ? text : yamlQuoted(text)
    }
}

/// One dynamic plugin's own settings, from the config file's `plugin-settings` section: a mapping from the plugin's
/// path, as `plugins` names it, to a mapping of whatever the plugin takes, handed to its `init_plugin` as a JSON
/// object (YAML's null, booleans, integers and floats as JSON's; every other scalar a string).
///
/// ```yaml
/// plugins: [/usr/lib/herald/libweather.so]
/// plugin-settings:
///   /usr/lib/herald/libweather.so:
///     cache: /var/lib/weather/forecast.json
///     units: [metric]
/// ```
struct PluginSettings: Equatable, Sendable {
    static let key = "plugin-settings"

    /// The plugin's path, as `plugins` names it.
    let path: String
    let settings: JSONObject
    let file: String
    let line: Int

    /// The section's `node` (from the file at `path`).
    static func read(_ node: Node, path file: String) throws -> [PluginSettings] {
        func failure(_ node: Node, _ key: String, _ what: String) -> ConfigurationError {
            ConfigurationError(message: "herald: config file \(file), line \(node.mark?.line ?? 0), key \(key): \(what)")
        }
        guard let mapping = node.mapping else {
            throw failure(node, key, "must be a mapping of plugin paths (as plugins names them) to their settings")
        }
        return try mapping.map { pathNode, value in
            guard let path = pathNode.scalar?.string, !path.isEmpty else {
                throw failure(pathNode, key, "a plugin's path must be a plain string")
            }
            guard let settings = try json(value, key: "\(key).\(path)", failure: failure)?.objectValue else {
                throw failure(value, "\(key).\(path)", "must be a mapping of the plugin's settings")
            }
            return PluginSettings(path: path, settings: settings, file: file, line: pathNode.mark?.line ?? 0)
        }
    }

    /// `node` as JSON; `nil` for a mapping key that is not a string.
    private static func json(
        _ node: Node, key: String, failure: (Node, String, String) -> ConfigurationError
    ) throws -> JSONValue? {
        switch node {
        case .scalar(let scalar):
            if node.tag == Tag(.null) { return .null }
            if node.tag == Tag(.bool), let flag = Bool.construct(from: scalar) { return .bool(flag) }
            if node.tag == Tag(.int), let number = Int64(scalar.string) { return .int(number) }
            if node.tag == Tag(.float), let number = Double(scalar.string) { return .double(number) }
            return .string(scalar.string)
        case .sequence(let sequence):
            return .array(try sequence.map { try json($0, key: key, failure: failure) ?? .null })
        case .mapping(let mapping):
            var members: [(String, JSONValue)] = []
            var names: Set<String> = []
            for (nameNode, value) in mapping {
                guard let name = nameNode.scalar?.string else { throw failure(nameNode, key, "a key must be a plain string") }
                guard names.insert(name).inserted else { throw failure(nameNode, key, "the key \(name) is given more than once") }
                members.append((name, try json(value, key: "\(key).\(name)", failure: failure) ?? .null))
            }
            return .object(JSONObject(uniqueKeysWithValues: members))
        case .alias:
            throw failure(node, key, "an alias is not allowed here")
        }
    }

    /// Refuses settings for a plugin `plugins` does not name (with the nearest path it names).
    static func check(_ sections: [PluginSettings], plugins: [String]) throws {
        for section in sections where !plugins.contains(section.path) {
            let suggestion = ConfigurationSchema.nearest(to: section.path, among: plugins).map { " (did you mean '\($0)'?)" } ?? ""
            throw ConfigurationError(
                message:
                    "herald: config file \(section.file), line \(section.line), key \(key).\(section.path): not a plugin plugins names\(suggestion)"
            )
        }
    }

    /// The section as `--print-config` writes it: each plugin's settings as one YAML flow mapping.
    static func rendered(_ sections: [PluginSettings]) -> [String] {
        ["\(key):"]
            + sections.map {
                "  \(ServeSettings.yamlScalar($0.path)): \(flow(.object($0.settings)))  # config file \($0.file), line \($0.line)"
            }
    }

    /// `value` as YAML flow text that reads back as the same JSON: every string double-quoted.
    private static func flow(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let flag): "\(flag)"
        case .int(let number): "\(number)"
        case .double(let number): "\(number)"
        case .string(let text): yamlQuoted(text)
        case .array(let items): "[" + items.map(flow).joined(separator: ", ") + "]"
        case .object(let object): "{" + object.map { "\(yamlQuoted($0.key)): \(flow($0.value))" }.joined(separator: ", ") + "}"
        }
    }
}

/// `text` double-quoted for YAML (quote, backslash and newline escaped).
private func yamlQuoted(_ text: String) -> String {
    var escaped = ""
    for character in text {
        switch character {
        case "\"": escaped += "\\\""
        case "\\": escaped += "\\\\"
        case "\n": escaped += "\\n"
        default: escaped.append(character)
        }
    }
    return "\"\(escaped)\""
}
