public import Herald

extension EchoHandler {
    /// The handler's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let echo = ConfigurationSetting(
            "echo", .boolean, default: .boolean(false), "false", allowed: "true or false",
            help: "Write one JSON object per line on standard output for every handled event.")

        /// The section: the handler on or off.
        public static let section = ConfigurationSection(
            name: "EchoHandler", summary: "One JSON line per handled event on standard output.", settings: [echo])
    }
}
