public import Herald

extension JSONLExport {
    /// The export's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let path = ConfigurationSetting(
            "delivery-metrics", .string, default: .string("none"), "none", allowed: "a file path, or none",
            help: "Write FCM's delivery-metrics export as JSON lines to this file (rotated by size); 'none' turns it off.",
            valueName: "file")

        /// The section: the export's file.
        public static let section = ConfigurationSection(
            name: "JSONLExport", summary: "FCM's delivery-metrics export as JSON lines.", settings: [path])
    }
}
