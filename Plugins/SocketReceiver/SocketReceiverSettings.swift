public import Herald

extension SocketReceiver {
    /// The receiver's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let socket = ConfigurationSetting(
            "socket", .string, default: nil, "herald.sock in the data directory",
            allowed: "a path, unix:PATH, HOST:PORT, or none",
            help:
                "The socket receiver's Unix socket path (or unix:PATH), or HOST:PORT for TCP (loopback only unless allow-unauthenticated-network); 'none' turns it off.",
            valueName: "path",
            accepts: { $0 == "none" || address($0) != nil })

        /// The section: the socket's address.
        public static let section = ConfigurationSection(
            name: "SocketReceiver", summary: "FCM v1 send bodies as JSON lines over a Unix or TCP socket.", settings: [socket])

        /// The address of a socket setting: what `SocketAddress(parsing:)` reads, or a bare file name (a path
        /// relative to the working directory).
        public static func address(_ text: String) -> SocketAddress? {
            if let address = SocketAddress(parsing: text) { return address }
            guard !text.isEmpty, !text.contains(":") else { return nil }
            return .unix(path: text)
        }
    }
}
