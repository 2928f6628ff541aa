import Foundation
import Herald
import HeraldPrometheusMetrics
import HeraldSocketReceiver
import HeraldTesting
import Testing

/// Presents every notification as a banner and answers silent messages with new data.
final class BannerApp: NotificationHandler, BackgroundFetchWorker, Sendable {
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions { [.banner] }
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult { .newData }
}

/// One sample of a parsed page.
struct Sample: Equatable {
    var name: String
    var labels: [String: String]
    var value: Double
}

/// Parses `page` with prometheus-client's text-format parser (the venv scripts/python-env makes). The parser is
/// waited for on a thread of its own (`runExecutable`'s async form), not on one of the cooperative pool's.
func parseWithPrometheusClient(_ page: String) async throws -> [Sample] {
    let python = try pythonEnvironment(with: "prometheus-client")
    let result = try await runExecutable(
        python, [repositoryRoot.appendingPathComponent("Tests/PrometheusParse/parse_metrics.py").path], input: page)
    #expect(result.status == 0, "prometheus-client refused the page: \(result.error)")
    return result.output.split(separator: "\n").compactMap { line in
        guard let object = try? JSONParser.parse(Array(line.utf8)), let name = object["name"]?.stringValue,
            let value = object["value"]?.doubleValue
        else { return nil }
        var labels: [String: String] = [:]
        for (key, label) in object["labels"]?.objectValue ?? [:] { labels[key] = label.stringValue }
        return Sample(name: name, labels: labels, value: value)
    }
}

@Suite("PrometheusExporter: /metrics in the text format", .serialized)
struct PrometheusExporterTests {
    @Test("/metrics parses with prometheus-client and its counters match what was sent")
    func countersMatch() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        let herald = Herald(configuration: patientShutdown(configuration))
        let path = "/tmp/herald-prom-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var exporterOptions = PrometheusExporter.Options(address: .tcp(host: "127.0.0.1", port: 0))
        exporterOptions.idleTimeout = .seconds(5)
        let exporter = PrometheusExporter(options: exporterOptions)
        try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: path)])))
        try herald.register(BannerApp())
        try herald.register(exporter)
        try await herald.start()
        let token = try await herald.token()
        let client = try TestSocketClient(.unix(path: path))
        var lines: [String] = []
        for n in 0..<3 { lines.append(#"{"message": {"token": "\#(token)", "notification": {"title": "n\#(n)"}}}"#) }
        for n in 0..<2 { lines.append(#"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"#) }
        lines.append(
            #"{"message": {"token": "\#(token)", "apns": {"headers": {"apns-priority": "5", "apns-push-type": "background"}, "payload": {"aps": {"content-available": 1}}}}}"#
        )
        lines.append(#"{"message": {"token": "not-ours", "data": {"a": "b"}}}"#)
        lines.append(#"{"message": "#)
        client.send(lines.joined(separator: "\n") + "\n")
        let answers = client.readLines(lines.count)
        #expect(answers.count == lines.count)
        let ids = answers.prefix(3).compactMap {
            try? JSONParser.parse(Array($0.utf8))["name"]?.stringValue?.split(separator: "/").last.map(String.init)
        }
        try await herald.waitUntilIdle()
        try await herald.respond(to: ids[0])
        try await herald.respond(to: ids[1], action: NotificationResponse.dismissActionIdentifier)
        try await herald.waitUntilIdle()
        #expect(try await eventually { try await herald.analyticsStatistics().sinks["prometheus"]?.queued == 0 })

        let address = try #require(try await exporter.listeningAddress())
        let response = try scrape(address, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(response.head.hasPrefix("HTTP/1.1 200"))
        #expect(response.head.contains("Content-Type: text/plain; version=0.0.4"))
        let samples = try await parseWithPrometheusClient(response.body)
        func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
            samples.first { $0.name == name && $0.labels == labels }?.value
        }
        #expect(value("herald_messages_received_total", ["type": "DISPLAY_NOTIFICATION"]) == 3)
        #expect(value("herald_messages_received_total", ["type": "DATA_MESSAGE"]) == 3)
        #expect(value("herald_notifications_presented_total") == 3)
        #expect(value("herald_notifications_opened_total") == 1)
        #expect(value("herald_notifications_dismissed_total") == 1)
        #expect(value("herald_background_fetch_total", ["result": "newData"]) == 1)
        #expect(value("herald_background_fetch_total", ["result": "failed"]) == 0)
        #expect(value("herald_background_fetch_duration_seconds_count") == 1)
        #expect(value("herald_messages_dropped_total", ["reason": "not_targeted"]) == 1)
        #expect(value("herald_messages_dropped_total", ["reason": "invalid"]) == 1)
        #expect(value("herald_token_refreshes_total") == 1)
        #expect(value("herald_receiver_connections", ["receiver": "socket"]) == 1)
        #expect(value("herald_bus_messages_in_flight") == 0)
        #expect(value("herald_analytics_events_lost_total", ["sink": "prometheus"]) == 0)
        _ = client
        await herald.shutdown()
    }

    @Test("the pipeline's path (counts per batch from the recorded bytes) leaves the registry as the events' path does")
    func recordsPathMatchesEventsPath() async throws {
        var events: [AnalyticsEvent] = []
        for index in 0..<300 {
            let type = ["DISPLAY_NOTIFICATION", "DATA_MESSAGE", nil, "SOMETHING_ELSE", AnalyticsEvent.unifiedPush][index % 5]
            events.append(AnalyticsEvent(name: .notificationReceive, messageID: "m\(index)", priority: .high, messageType: type))
        }
        for name in AnalyticsEvent.Name.allCases {
            events.append(
                AnalyticsEvent(name: name, messageID: "every", parameters: ["result": "noData", "duration_ms": "250", "reason": "expired"]))
            events.append(AnalyticsEvent(name: name, messageID: "bare"))
        }
        for reason in AnalyticsEvent.DropReason.allCases.map(\.rawValue) + ["not a reason", ""] {
            events.append(AnalyticsEvent(name: .messageDropped, parameters: ["reason": reason]))
        }
        for result in ["newData", "failed", "other"] {
            events.append(AnalyticsEvent(name: .backgroundFetch, parameters: ["result": result, "duration_ms": "3"]))
        }
        events.append(AnalyticsEvent(name: .backgroundFetch, parameters: ["duration_ms": "not a number"]))
        for (index, _) in events.enumerated() { events[index].id = UInt64(index + 1) }
        let fromEvents = PrometheusExporter()
        let fromRecords = PrometheusExporter()
        try await fromEvents.record(events)
        try await fromEvents.record(Array(events.prefix(10)))
        try await fromRecords.record(AnalyticsRecords(events))
        try await fromRecords.record(AnalyticsRecords(Array(events.prefix(10))))
        // The registry's own order of metric families may differ between two instances: compare the lines.
        func lines(_ exporter: PrometheusExporter) -> [String] {
            String(decoding: exporter.registry.emitToBuffer(), as: UTF8.self).split(separator: "\n").map(String.init).sorted()
        }
        let expected = lines(fromEvents)
        #expect(expected.contains(#"herald_messages_received_total{type="DATA_MESSAGE"} 126"#), "\(expected)")
        #expect(expected.contains(#"herald_messages_received_total{type="UNIFIEDPUSH"} 62"#), "\(expected)")
        #expect(expected.contains(#"herald_unifiedpush_delivered_total 2"#), "\(expected)")
        #expect(lines(fromRecords) == expected)
    }

    @Test("the endpoint: 404 elsewhere, 405 for other methods, 431 for a huge head, keep-alive and Connection: close")
    func endpoint() async throws {
        let herald = Herald()
        var options = PrometheusExporter.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.maximumRequestBytes = 1024
        let exporter = PrometheusExporter(options: options)
        try herald.register(exporter)
        try await herald.start()
        let address = try #require(try await exporter.listeningAddress())
        #expect(try scrape(address, "GET /other HTTP/1.1\r\nHost: x\r\n\r\n").head.hasPrefix("HTTP/1.1 404"))
        #expect(try scrape(address, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").head.hasPrefix("HTTP/1.1 405"))
        #expect(try scrape(address, "nonsense\r\n\r\n").head.hasPrefix("HTTP/1.1 400"))
        #expect(try scrape(address, "GET /metrics HTTP/1.1\r\nX: " + String(repeating: "a", count: 2000)).head.hasPrefix("HTTP/1.1 431"))
        // HeraldHTTP's strictness, as on the HTTP receiver: an HTTP/1.1 request without Host, whitespace before a colon.
        #expect(try scrape(address, "GET /metrics HTTP/1.1\r\n\r\n").head.hasPrefix("HTTP/1.1 400"))
        #expect(try scrape(address, "GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n").head.hasPrefix("HTTP/1.1 400"))

        // Two scrapes on one connection, the second asking to close.
        let client = try TestSocketClient(address)
        client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let both = String(decoding: client.read { _ in false }, as: UTF8.self)
        #expect(both.components(separatedBy: "HTTP/1.1 200 OK").count == 3)
        #expect(both.contains("herald_token_refreshes_total"))
        await herald.shutdown()
        #expect(herald.loop.statistics.liveHandles == 0)
    }
}

@Suite("PrometheusExporter: what it lets in", .serialized)
struct PrometheusExporterLimitTests {
    @Test("an address beyond loopback is refused at start unless allowUnauthenticatedNetwork")
    func networkAddressNeedsPermission() async throws {
        let refused = Herald()
        try refused.register(PrometheusExporter(options: .init(address: .tcp(host: "0.0.0.0", port: 0))))
        let error = await #expect(throws: HeraldError.self) { try await refused.start() }
        #expect("\(String(describing: error))".contains("no authentication"), "\(String(describing: error))")
        await refused.shutdown()

        var options = PrometheusExporter.Options(address: .tcp(host: "0.0.0.0", port: 0))
        options.allowUnauthenticatedNetwork = true
        options.allowPlaintextNetwork = true
        let herald = Herald()
        let exporter = PrometheusExporter(options: options)
        try herald.register(exporter)
        try await herald.start()
        let address = try #require(try await exporter.listeningAddress())
        #expect(
            try scrape(.tcp(host: "127.0.0.1", port: address.port ?? 0), "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .head
                .hasPrefix("HTTP/1.1 200"))
        await herald.shutdown()
    }

    @Test("connections past maximumConnections are closed at once; the ones open keep working")
    func connectionLimit() async throws {
        var options = PrometheusExporter.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.maximumConnections = 2
        let herald = Herald()
        let exporter = PrometheusExporter(options: options)
        try herald.register(exporter)
        try await herald.start()
        let address = try #require(try await exporter.listeningAddress())
        let first = try TestSocketClient(address)
        let second = try TestSocketClient(address)
        for client in [first, second] {
            client.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(String(decoding: client.read { $0.count >= 12 }, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        }
        let third = try TestSocketClient(address)
        third.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(third.readsClosed())
        first.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(String(decoding: first.read { $0.count >= 12 }, as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        await herald.shutdown()
        #expect(herald.loop.statistics.liveHandles == 0)
    }
}

/// Sends `request` on a connection of its own and reads the answer: its head, and its body by Content-Length.
func scrape(_ address: SocketAddress, _ request: String) throws -> (head: String, body: String) {
    let client = try TestSocketClient(address)
    client.send(request)
    let bytes = client.read { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return false }
        let head = text[..<end.lowerBound]
        let length =
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        return text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length
    }
    let text = String(decoding: bytes, as: UTF8.self)
    guard let end = text.range(of: "\r\n\r\n") else { return (text, "") }
    return (String(text[..<end.lowerBound]), String(text[end.upperBound...]))
}
