public import Herald

extension TokenWebhook {
    /// The webhook's settings in a daemon's configuration (`herald serve`). Off unless `token-webhook-url` is set.
    public enum Settings {
        public static let url = ConfigurationSetting(
            "token-webhook-url", .string, default: nil, "none (the token is not posted)",
            allowed: "an http:// or https:// URL",
            help:
                "POST the registration token (JSON) to this URL at every start and whenever it changes, retried with backoff; a URL it cannot use stops the start.",
            valueName: "url",
            accepts: { $0.hasPrefix("http://") || $0.hasPrefix("https://") })
        public static let secretFile = ConfigurationSetting(
            "token-webhook-secret-file", .string, default: nil, "none", allowed: "a non-empty file path",
            help:
                "A file holding the bearer secret the token webhook sends as Authorization: Bearer (the secret itself is never logged or printed).",
            valueName: "file")
        public static let ca = ConfigurationSetting(
            "token-webhook-ca", .string, default: nil, "the system's CAs", allowed: "a non-empty file path",
            help: "A PEM file of the CAs that sign the app server's certificate, instead of the system's.", valueName: "file")
        public static let maxAttempts = ConfigurationSetting(
            "token-webhook-max-attempts", .integer(0...1_000_000), default: .integer(0), "0",
            allowed: "a whole number from 0 (no limit) to 1000000",
            help:
                "Attempts per token, the first included, before the token webhook gives it up; 0 retries without limit. A reload's new value applies to the token being retried too.",
            valueName: "count", live: true)

        /// The section: where the token goes, the secret it carries, the CAs and the retries.
        public static let section = ConfigurationSection(
            name: "TokenWebhook", summary: "The registration token POSTed to the app server.", settings: [url, secretFile, ca, maxAttempts])
    }
}

extension TokenWebhook: LiveConfigurable {
    /// Takes `token-webhook-max-attempts` as it is now (``setMaximumAttempts(_:)``; 0 is no limit).
    public func applyLiveSettings(_ configuration: ConfigurationValues) {
        let attempts = configuration.integer(Settings.maxAttempts)
        // The schema allows 0 (no limit) and above, all of which setMaximumAttempts takes.
        try? setMaximumAttempts(attempts == 0 ? nil : attempts)
    }
}
