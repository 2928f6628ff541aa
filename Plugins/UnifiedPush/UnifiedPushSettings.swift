public import Herald

extension UnifiedPushDistributor {
    /// The distributor's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let enabled = ConfigurationSetting(
            "unifiedpush", .boolean, default: .boolean(false), "false", allowed: "true or false",
            help:
                "Be a UnifiedPush distributor: own org.unifiedpush.Distributor.herald on the session bus, and take pushes to its endpoints on the HTTP endpoint (POST /up/{token})."
        )
        public static let endpointURL = ConfigurationSetting(
            "unifiedpush-endpoint-url", .string, default: nil, "http://{http}/up/ (https with TLS)",
            allowed: "an http or https URL ending in /",
            help:
                "What the apps' servers POST pushes to: this URL followed by the endpoint token (Herald's /up/ route as they reach it; in a fleet, the gateway's). A gateway checks VAPID tokens against its origin.",
            valueName: "url", accepts: { ($0.hasPrefix("http://") || $0.hasPrefix("https://")) && $0.hasSuffix("/") })
        public static let callTimeout = ConfigurationSetting(
            "unifiedpush-call-timeout", .integer(1...300), default: .integer(5), "5", allowed: "a whole number of seconds from 1 to 300",
            help:
                "Seconds an app may take to answer a call (Message, NewEndpoint); a push whose Message call is not answered in time is offered again. A stop waits this long at most for the calls in flight.",
            valueName: "seconds")

        /// The section: the distributor on or off, its endpoints' URL and how long an app may take to answer.
        public static let section = ConfigurationSection(
            name: "UnifiedPush", summary: "The UnifiedPush distributor on the session bus and its Web Push endpoints.",
            settings: [enabled, endpointURL, callTimeout])
    }
}
