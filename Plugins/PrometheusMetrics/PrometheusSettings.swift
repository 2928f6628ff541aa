public import Herald

extension PrometheusExporter {
    /// The exporter's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let metrics = ConfigurationSetting(
            "metrics", .string, default: .string("none"), "none",
            allowed: "HOST:PORT (a numeric address or localhost), [IPv6]:PORT, or none",
            help:
                "Serve Prometheus metrics (GET /metrics) on HOST:PORT, loopback only unless allow-unauthenticated-network; 'none' turns it off.",
            valueName: "host:port",
            accepts: { $0 == "none" || SocketAddress(parsing: $0)?.port != nil })

        /// The section: the metrics endpoint's address.
        public static let section = ConfigurationSection(
            name: "PrometheusMetrics", summary: "GET /metrics and GET /healthz.", settings: [metrics])
    }
}
