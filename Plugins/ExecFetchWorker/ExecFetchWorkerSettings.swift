public import Herald

extension ExecFetchWorker {
    /// The worker's settings in a daemon's configuration (`herald serve`). Off unless `exec-fetch-command` names a
    /// program.
    public enum Settings {
        public static let command = ConfigurationSetting(
            "exec-fetch-command", .string, default: nil, "none (no background-fetch command)",
            allowed: "a program: an absolute path, or a name looked up in PATH at start (no shell)",
            help:
                "Run this program for each silent (content-available) message: the message's userInfo as JSON on its standard input, HERALD_MESSAGE_ID in its environment; exit 0 is new data, 3 no data, anything else (a signal, the timeout) failed. A command that is missing or not executable stops the start.",
            valueName: "program")
        public static let arguments = ConfigurationSetting(
            "exec-fetch-arguments", .list, default: .list([]), "none",
            allowed: "a list of arguments (environment: separated by ',')",
            help: "An argument of the background-fetch command; repeatable, in order.",
            flag: "--exec-fetch-argument", valueName: "argument", environmentSeparator: ",", accepts: { _ in true })
        public static let environment = ConfigurationSetting(
            "exec-fetch-environment", .list, default: .list([]), "none",
            allowed: "a list of NAME=value (environment: separated by ',')",
            help: "A variable added to the background-fetch command's environment; repeatable.",
            flag: "--exec-fetch-env", valueName: "name=value", environmentSeparator: ",", accepts: { environmentEntry($0) != nil })
        public static let timeout = ConfigurationSetting(
            "exec-fetch-timeout", .integer(1...3_600), default: .integer(25), "25", allowed: "a whole number of seconds from 1 to 3600",
            help:
                "Seconds one run of the background-fetch command may take; then its process group gets SIGTERM, SIGKILL 2 s later, and the fetch failed. A reload's new value applies to the runs started after it.",
            valueName: "seconds", live: true)
        public static let concurrency = ConfigurationSetting(
            "exec-fetch-concurrency", .integer(1...256), default: .integer(4), "4", allowed: "a whole number from 1 to 256",
            help:
                "How many background-fetch commands run at once; further fetches wait their turn. Raised on reload, waiting fetches start at once; lowered, running commands finish first.",
            valueName: "count", live: true)

        /// The section: the command, its arguments and environment, its time limit and how many run at once.
        public static let section = ConfigurationSection(
            name: "ExecFetchWorker", summary: "Background fetch by running a command.",
            settings: [command, arguments, environment, timeout, concurrency])

        /// `NAME=value`, NAME a non-empty name without `=`; `nil` otherwise.
        public static func environmentEntry(_ text: String) -> (String, String)? {
            guard let equals = text.firstIndex(of: "="), equals != text.startIndex else { return nil }
            return (String(text[..<equals]), String(text[text.index(after: equals)...]))
        }
    }
}

extension ExecFetchWorker.Options {
    /// The options `values` give, `nil` when no command is set.
    public init?(configuration values: ConfigurationValues) {
        typealias Settings = ExecFetchWorker.Settings
        guard let command = values.string(Settings.command) else { return nil }
        var environment: [String: String] = [:]
        for item in values.list(Settings.environment) {
            if let (name, value) = Settings.environmentEntry(item) { environment[name] = value }
        }
        self.init(
            command: command, arguments: values.list(Settings.arguments), environment: environment,
            timeout: .seconds(values.integer(Settings.timeout)), maxConcurrent: values.integer(Settings.concurrency))
    }
}

extension ExecFetchWorker: LiveConfigurable {
    /// Takes `exec-fetch-timeout` and `exec-fetch-concurrency` as they are now (``setLimits(timeout:maxConcurrent:)``).
    public func applyLiveSettings(_ configuration: ConfigurationValues) {
        // The schema has checked both values against the ranges setLimits allows.
        try? setLimits(
            timeout: .seconds(configuration.integer(Settings.timeout)), maxConcurrent: configuration.integer(Settings.concurrency))
    }
}
