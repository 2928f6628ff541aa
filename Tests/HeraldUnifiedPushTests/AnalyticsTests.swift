import Foundation
import Herald
import HeraldReport
import HeraldSQLite
import HeraldTesting
import Testing

/// UnifiedPush pushes in the analytics: accepted, delivered and dropped pushes recorded by the real distributor (the
/// Python app on a private bus), read back from the analytics store as `herald report` reads it and from the
/// delivery-metrics export.
@Suite("UnifiedPush analytics")
struct UnifiedPushAnalyticsTests {
    @Test("accepted, delivered, replaced by Topic, expired and unregistered pushes are counted apart from FCM messages")
    func pushesInTheAnalytics() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        var token = ""
        try await world.withHerald(analytics: true) { base, _ in
            let app = try world.app("org.example.Counted", version: 2, register: "counted")
            token = try endpointToken(try await app.next("endpoint")["endpoint"])
            let url = "\(base)/up/\(token)"
            #expect(try await post(url, Array("one".utf8), headers: ["TTL: 60", "Urgency: high"], in: world.directory).status == 201)
            #expect(try await app.next("message")["body"] == Array("one".utf8).hex)
            // The app answered Message once the distributor counts the push as delivered.
            let delivered = await eventually { world.deliveryMetricLines().contains { $0["event"] == "MESSAGE_DELIVERED" } }
            try #require(delivered, "no MESSAGE_DELIVERED line: \(world.deliveryMetricLines())")

            try await app.stopped()
            for (body, headers) in [
                ("a1", ["TTL: 600", "Topic: t"]), ("a2", ["TTL: 600", "Topic: t"]), ("zero", ["TTL: 0"]), ("kept", ["TTL: 600"]),
            ] {
                #expect(try await post(url, Array(body.utf8), headers: headers, in: world.directory).status == 201)
            }
            // TTL 0 and the app away: dropped after the one attempt.
            let expired = await eventually { world.deliveryMetricLines().contains { $0["event"] == "message_dropped:expired" } }
            #expect(expired, "\(world.deliveryMetricLines())")
            // Prometheus: the five pushes received by type, the one delivered.
            let metricsURL = try #require(world.metricsURL)
            let scraped = await eventually {
                let page =
                    (try? await runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), ["-s", metricsURL]))?.output ?? ""
                return page.contains(#"herald_messages_received_total{type="UNIFIEDPUSH"} 5"#)
                    && page.contains("herald_unifiedpush_delivered_total 1")
            }
            #expect(scraped)
        }

        // As `herald up unregister` does while the daemon is stopped: the pushes still waiting are dropped at the next start.
        #expect(try SQLiteStore(directory: world.dataDirectory).dropUnifiedPushRegistration(endpointToken: token))
        try await world.withHerald(analytics: true) { base, _ in
            let late = try await post("\(base)/up/\(token)", Array("late".utf8), in: world.directory)
            #expect(late.status == 404)
        }

        let report = try AnalyticsReport.read(directory: world.dataDirectory)
        #expect(report.unifiedPushTotal.accepted == 5)
        #expect(report.unifiedPushTotal.delivered == 1)
        #expect(report.unifiedPushTotal.drops == ["collapsed": 1, "expired": 1, "unregistered": 3])
        #expect(report.unifiedPush.count == 1)
        #expect(report.total.isEmpty, "UnifiedPush pushes counted as FCM messages: \(report.total)")
        #expect(report.labels.isEmpty)
        let table = report.table()
        #expect(table.contains("UnifiedPush pushes"), "\(table)")
        #expect(table.contains("collapsed 1, unregistered 3"), "\(table)")

        let lines = world.deliveryMetricLines()
        #expect(lines.allSatisfy { $0["message_type"] == AnalyticsEvent.unifiedPush }, "\(lines)")
        let events = lines.compactMap { $0["event"] }
        #expect(events.filter { $0 == "MESSAGE_ACCEPTED" }.count == 5, "\(events)")
        #expect(events.filter { $0 == "MESSAGE_DELIVERED" }.count == 1, "\(events)")
        #expect(events.filter { $0 == "message_dropped:collapsed" }.count == 1, "\(events)")
        #expect(events.filter { $0 == "message_dropped:unregistered" }.count == 3, "\(events)")
        let accepted = try #require(lines.first { $0["event"] == "MESSAGE_ACCEPTED" })
        #expect(accepted["priority"] == "10" && accepted["ttl"] == "60", "\(accepted)")
    }
}
