import CoreMetrics
public import Herald
public import HeraldTLS
public import Prometheus

/// Herald's metrics in the Prometheus text format, served as `GET /metrics` on an address of its own.
///
/// It is an `AnalyticsSink`: every analytics event becomes a swift-metrics counter or timer, backed by a
/// swift-prometheus registry of its own (no process-wide bootstrap, so two instances in one process stay
/// apart). At each scrape it also samples the bus: messages in flight, connections per receiver, and per
/// analytics sink what is queued, lost and failed. A host that wants its own swift-metrics metrics on the same
/// page bootstraps `MetricsSystem` with ``factory``.
///
/// | metric | type | labels |
/// |---|---|---|
/// | `herald_messages_received_total` | counter | `type` (`DISPLAY_NOTIFICATION`, `DATA_MESSAGE`, `UNIFIEDPUSH`: pushes accepted for UnifiedPush apps) |
/// | `herald_unifiedpush_delivered_total` | counter | (pushes UnifiedPush apps took) |
/// | `herald_notifications_presented_total` | counter | |
/// | `herald_notifications_opened_total` / `_dismissed_total` | counter | |
/// | `herald_background_fetch_total` | counter | `result` (`newData`, `noData`, `failed`) |
/// | `herald_background_fetch_duration_seconds` | histogram | |
/// | `herald_messages_dropped_total` | counter | `reason` |
/// | `herald_token_refreshes_total` | counter | |
/// | `herald_topic_changes_total` | counter | `change` (`subscribe`, `unsubscribe`) |
/// | `herald_bus_messages_in_flight` | gauge | |
/// | `herald_receiver_connections` | gauge | `receiver` |
/// | `herald_receiver_healthy` | gauge (1 or 0) | `receiver` (receivers that report health: NATS) |
/// | `herald_analytics_events_queued` | gauge | `sink` |
/// | `herald_analytics_events_lost_total`, `herald_analytics_sink_failures_total` | counter | `sink` |
/// | `herald_tls_handshake_failures_total` | counter | `reason` (`refused`, `timed-out`, `closed`), with ``Options/tls`` |
public final class PrometheusExporter: AnalyticsSink, AnalyticsRecordSink, @unchecked Sendable {
    // @unchecked Sendable: `options`, `registry`, `factory` and the metric handles are immutable and
    // thread-safe; `server` and `context` are set in start() and used on the loop thread; the sampled
    // counters' last values are touched on the loop thread only.

    public struct Options: Sendable {
        /// Where `/metrics` is served. Prometheus' exporters conventionally use a port of their own.
        public var address: SocketAddress = .tcp(host: "127.0.0.1", port: 9464)
        /// The largest request head accepted; a longer one is answered 431 and closed.
        public var maximumRequestBytes: Int = 8 * 1024
        /// How long a scrape connection may stay silent before it is closed.
        public var idleTimeout: Duration = .seconds(10)
        /// The most scrape connections open at once; more are closed as they are accepted.
        public var maximumConnections: Int = 64
        /// `/metrics` and `/healthz` have no authentication, so an address that is not loopback is refused at start
        /// unless this is `true` (for a scraper on another machine, on a network you trust).
        public var allowUnauthenticatedNetwork = false
        /// TLS for `/metrics` (HTTPS, ALPN `http/1.1`); `nil`: plain HTTP. Its failed handshakes — of every listener
        /// that shares the context — are on the page as `herald_tls_handshake_failures_total`.
        public var tls: TLSServerContext?
        /// Plain HTTP beyond loopback shows the metrics to anyone on the path: an address that is not loopback is
        /// refused at start without ``tls`` unless this is `true` too, and the start then says so in the log.
        public var allowPlaintextNetwork = false

        public init(address: SocketAddress = .tcp(host: "127.0.0.1", port: 9464)) {
            self.address = address
        }
    }

    public let options: Options
    /// The registry `/metrics` renders.
    public let registry: PrometheusCollectorRegistry
    /// A swift-metrics factory writing into ``registry``.
    public let factory: PrometheusMetricsFactory

    private let received: [String: CoreMetrics.Counter]
    private let delivered: CoreMetrics.Counter
    private let presented: CoreMetrics.Counter
    private let opened: CoreMetrics.Counter
    private let dismissed: CoreMetrics.Counter
    private let fetches: [String: CoreMetrics.Counter]
    private let fetchDuration: CoreMetrics.Timer
    private let tokenRefreshes: CoreMetrics.Counter
    private let topicChanges: [String: CoreMetrics.Counter]
    private let drops: [String: CoreMetrics.Counter]
    private let inFlight: CoreMetrics.Gauge
    private var context: PluginContext?
    private var server: MetricsEndpoint?
    private var sampled: [String: Int] = [:]

    public init(options: Options = Options()) {
        self.options = options
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["herald_background_fetch_duration_seconds"] = [
            .milliseconds(10), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
            .seconds(1), .seconds(2), .seconds(5), .seconds(10), .seconds(30),
        ]
        self.registry = registry
        self.factory = factory
        received = Dictionary(
            uniqueKeysWithValues: ["DISPLAY_NOTIFICATION", "DATA_MESSAGE", AnalyticsEvent.unifiedPush].map {
                ($0, CoreMetrics.Counter(label: "herald_messages_received_total", dimensions: [("type", $0)], factory: factory))
            })
        delivered = CoreMetrics.Counter(label: "herald_unifiedpush_delivered_total", factory: factory)
        presented = CoreMetrics.Counter(label: "herald_notifications_presented_total", factory: factory)
        opened = CoreMetrics.Counter(label: "herald_notifications_opened_total", factory: factory)
        dismissed = CoreMetrics.Counter(label: "herald_notifications_dismissed_total", factory: factory)
        fetches = Dictionary(
            uniqueKeysWithValues: ["newData", "noData", "failed"].map {
                ($0, CoreMetrics.Counter(label: "herald_background_fetch_total", dimensions: [("result", $0)], factory: factory))
            })
        fetchDuration = CoreMetrics.Timer(label: "herald_background_fetch_duration_seconds", factory: factory)
        tokenRefreshes = CoreMetrics.Counter(label: "herald_token_refreshes_total", factory: factory)
        topicChanges = Dictionary(
            uniqueKeysWithValues: ["subscribe", "unsubscribe"].map {
                ($0, CoreMetrics.Counter(label: "herald_topic_changes_total", dimensions: [("change", $0)], factory: factory))
            })
        drops = Dictionary(
            uniqueKeysWithValues: AnalyticsEvent.DropReason.allCases.map {
                (
                    $0.rawValue,
                    CoreMetrics.Counter(label: "herald_messages_dropped_total", dimensions: [("reason", $0.rawValue)], factory: factory)
                )
            })
        inFlight = CoreMetrics.Gauge(label: "herald_bus_messages_in_flight", factory: factory)
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "prometheus", summary: "GET /metrics in the Prometheus text format")
    }

    /// The address `/metrics` is served on (port 0 replaced by the chosen port), once started.
    public func listeningAddress() async throws -> SocketAddress? {
        guard let context else { return nil }
        return try await context.loop.submit { self.server?.localAddress }
    }

    /// Refused configurations.
    public enum ConfigurationError: Error, CustomStringConvertible {
        /// An address beyond loopback without ``Options/allowUnauthenticatedNetwork``.
        case unauthenticatedNetworkAddress(SocketAddress)
        /// An address beyond loopback without TLS and without ``Options/allowPlaintextNetwork``.
        case plaintextNetwork(SocketAddress)
        public var description: String {
            switch self {
            case .unauthenticatedNetworkAddress(let address):
                "refusing to serve /metrics on \(address): it has no authentication, so it listens on loopback addresses only unless allowed to listen beyond them (allowUnauthenticatedNetwork)"
            case .plaintextNetwork(let address):
                "refusing to serve /metrics on \(address) without TLS: set a TLS certificate and key, listen on loopback, or allow plain HTTP there (allowPlaintextNetwork)"
            }
        }
    }

    public func start(_ context: PluginContext) async throws {
        if !options.allowUnauthenticatedNetwork, !options.address.isLoopback {
            throw ConfigurationError.unauthenticatedNetworkAddress(options.address)
        }
        if options.tls == nil, !options.address.isLoopback {
            guard options.allowPlaintextNetwork else { throw ConfigurationError.plaintextNetwork(options.address) }
            context.logger.warning(
                "serving /metrics in plain HTTP beyond loopback, as allowed: the metrics cross the network in clear",
                metadata: ["address": "\(options.address)"])
        }
        self.context = context
        try await context.loop.submit {
            self.server = try MetricsEndpoint(
                context: context, options: self.options, render: { [unowned self] in self.render() },
                health: { [unowned self] in self.health() })
        }
    }

    public func stop() async {
        guard let context else { return }
        try? await context.loop.submit {
            self.server?.close()
            self.server = nil
        }
    }

    public func record(_ events: [AnalyticsEvent]) async throws {
        for event in events {
            switch event.name {
            case .notificationReceive: received[event.messageType ?? "DATA_MESSAGE"]?.increment()
            case .notificationForeground, .notificationBackground: presented.increment()
            case .notificationOpen: opened.increment()
            case .notificationDismiss: dismissed.increment()
            case .backgroundFetch:
                fetches[event.parameters["result"] ?? "failed"]?.increment()
                if let milliseconds = event.parameters["duration_ms"].flatMap(Int64.init) {
                    fetchDuration.recordMilliseconds(milliseconds)
                }
            case .tokenRefresh: tokenRefreshes.increment()
            case .topicSubscribe: topicChanges["subscribe"]?.increment()
            case .topicUnsubscribe: topicChanges["unsubscribe"]?.increment()
            case .messageDropped: drops[event.parameters["reason"] ?? "invalid"]?.increment()
            case .messageDelivered: delivered.increment()
            case .diagnostic: break
            }
        }
    }

    /// The pipeline's path: the batch counted per counter from the recorded bytes (no event built), then one
    /// `increment(by:)` per counter that moved; `/metrics` shows what ``record(_:)-([AnalyticsEvent])`` would.
    package func record(_ records: AnalyticsRecords) async throws {
        var counts = BatchCounts()
        records.forEach { record in
            switch record.name {
            case .notificationReceive:
                switch record.messageTypeKind {
                case .display: counts.receivedDisplay += 1
                case .data, .none: counts.receivedData += 1
                case .other:
                    if let type = record.messageType, String(decoding: type, as: UTF8.self) == AnalyticsEvent.unifiedPush {
                        counts.receivedUnifiedPush += 1
                    }
                }
            case .notificationForeground, .notificationBackground: counts.presented += 1
            case .notificationOpen: counts.opened += 1
            case .notificationDismiss: counts.dismissed += 1
            case .backgroundFetch:
                // Rare (a worker ran): the event is built.
                let event = record.event()
                fetches[event.parameters["result"] ?? "failed"]?.increment()
                if let milliseconds = event.parameters["duration_ms"].flatMap(Int64.init) {
                    fetchDuration.recordMilliseconds(milliseconds)
                }
            case .tokenRefresh: counts.tokenRefreshes += 1
            case .topicSubscribe: counts.subscribes += 1
            case .topicUnsubscribe: counts.unsubscribes += 1
            case .messageDropped:
                let reason = record.parameter("reason").map { String(decoding: $0, as: UTF8.self) } ?? "invalid"
                counts.drops[reason, default: 0] += 1
            case .messageDelivered: counts.delivered += 1
            case .diagnostic: break
            }
        }
        func add(_ count: Int, to counter: CoreMetrics.Counter?) {
            if count > 0 { counter?.increment(by: count) }
        }
        add(counts.receivedDisplay, to: received["DISPLAY_NOTIFICATION"])
        add(counts.receivedData, to: received["DATA_MESSAGE"])
        add(counts.receivedUnifiedPush, to: received[AnalyticsEvent.unifiedPush])
        add(counts.delivered, to: delivered)
        add(counts.presented, to: presented)
        add(counts.opened, to: opened)
        add(counts.dismissed, to: dismissed)
        add(counts.tokenRefreshes, to: tokenRefreshes)
        add(counts.subscribes, to: topicChanges["subscribe"])
        add(counts.unsubscribes, to: topicChanges["unsubscribe"])
        for (reason, count) in counts.drops { add(count, to: drops[reason]) }
    }

    /// One batch's events per counter.
    private struct BatchCounts {
        var receivedDisplay = 0
        var receivedData = 0
        var receivedUnifiedPush = 0
        var delivered = 0
        var presented = 0
        var opened = 0
        var dismissed = 0
        var tokenRefreshes = 0
        var subscribes = 0
        var unsubscribes = 0
        var drops: [String: Int] = [:]
    }

    /// Samples the bus and renders the registry. Loop thread (the endpoint calls it from its read callback).
    func render() -> [UInt8] {
        if let bus = context?.bus {
            inFlight.record(bus.messagesInFlight)
            for (receiver, count) in bus.receiverConnections {
                CoreMetrics.Gauge(label: "herald_receiver_connections", dimensions: [("receiver", receiver)], factory: factory).record(
                    count)
            }
            for (receiver, report) in bus.receiverHealth {
                CoreMetrics.Gauge(label: "herald_receiver_healthy", dimensions: [("receiver", receiver)], factory: factory).record(
                    report.healthy ? 1 : 0)
            }
            let statistics = bus.analyticsStatistics
            for (sink, figures) in statistics.sinks {
                CoreMetrics.Gauge(label: "herald_analytics_events_queued", dimensions: [("sink", sink)], factory: factory).record(
                    figures.queued)
                advance("herald_analytics_events_lost_total", sink: sink, to: figures.lost)
                advance("herald_analytics_sink_failures_total", sink: sink, to: figures.failures)
            }
        }
        if let failures = options.tls?.handshakeFailures {
            for reason in [HandshakeFailureReason.refused, .timedOut, .closed] {
                advance("herald_tls_handshake_failures_total", label: ("reason", reason.rawValue), to: failures[reason])
            }
        }
        return registry.emitToBuffer()
    }

    /// `/healthz`: `{"status": "ok" | "unhealthy", "receivers": {name: {"healthy": Bool, "state": String}}}` for the
    /// receivers that report their health (``Receiver/health``); healthy when every one is. Loop thread.
    func health() -> (healthy: Bool, body: [UInt8]) {
        let reports = context?.bus.receiverHealth ?? [:]
        let healthy = reports.values.allSatisfy(\.healthy)
        let receivers = JSONObject(
            uniqueKeysWithValues: reports.sorted { $0.key < $1.key }.map { name, report -> (String, JSONValue) in
                (name, ["healthy": .bool(report.healthy), "state": .string(report.state)])
            })
        let body: JSONValue = ["status": .string(healthy ? "ok" : "unhealthy"), "receivers": .object(receivers)]
        return (healthy, body.jsonBytes() + [UInt8(ascii: "\n")])
    }

    /// Moves a counter that mirrors one of the pipeline's running totals up to `value`.
    private func advance(_ label: String, sink: String, to value: Int) {
        advance(label, label: ("sink", sink), to: value)
    }

    private func advance(_ label: String, label dimension: (String, String), to value: Int) {
        let key = "\(label)|\(dimension.0)=\(dimension.1)"
        let counter = CoreMetrics.Counter(label: label, dimensions: [dimension], factory: factory)
        let delta = value - sampled[key, default: 0]
        if delta > 0 { counter.increment(by: delta) }
        sampled[key] = value
    }
}
