public import Herald

extension SQLiteAnalyticsStore {
    /// The analytics store's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let enabled = ConfigurationSetting(
            "analytics-store", .boolean, default: .boolean(true), "true", allowed: "true or false",
            help: "Keep analytics events in DATA-DIR/analytics.sqlite (herald report reads them).")
        public static let retentionDays = ConfigurationSetting(
            "analytics-retention-days", .integer(0...36_500), default: .integer(90), "90",
            allowed: "a whole number of days from 0 (keep everything) to 36500",
            help: "Days of analytics events kept in the analytics store; 0 keeps everything.", valueName: "days")

        /// The section: the store on or off, and how long it keeps events.
        public static let section = ConfigurationSection(
            name: "AnalyticsStore", summary: "Analytics events in the data directory's analytics.sqlite.",
            settings: [enabled, retentionDays])
    }
}
