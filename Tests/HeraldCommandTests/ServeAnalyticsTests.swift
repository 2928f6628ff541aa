import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald serve keeps analytics for herald report", .serialized)
struct ServeAnalyticsTests {
    @Test("herald serve writes DATA-DIR/analytics.sqlite by default; herald report then shows what was sent")
    func serveThenReport() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let token = try #require(await daemon.event()?["token"]?.stringValue, "no token line; log: \(daemon.log)")
            let http = ["--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo"]

            let labelled =
                #"{"message": {"token": "\#(token)", "notification": {"title": "Sale"}, "fcm_options": {"analytics_label": "spring_sale"}}}"#
            let sent = try await runHerald(["send"] + http + ["--file", "-"], input: labelled)
            #expect(sent.status == 0, "\(sent.error)")
            #expect(await daemon.event()?["event"] == "willPresent")
            let silent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--content-available"])
            #expect(silent.status == 0, "\(silent.error)")
            #expect(await daemon.event()?["event"] == "backgroundFetch")
            let stranger = try await runHerald(["send"] + http + ["--token", "not-ours", "--data", "a=b"])
            #expect(stranger.status == 1)
            #expect(await daemon.event()?["event"] == "dropped")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")

            let report = try await runHerald(["report", "--data-dir", directory])
            #expect(report.status == 0, "\(report.error)")
            let rows = report.output.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
            #expect(rows.contains("label: spring_sale"))
            #expect(rows.contains("label: (no label)"))
            // spring_sale: received 1, impressions 1, no opens; (no label): the silent message (no data) and the drop.
            #expect(rows.contains { $0.hasPrefix("total 1 1 0 0.0% 0 0 0 0 -") })
            #expect(rows.contains { $0.hasPrefix("total 1 0 0 - 0 1 0 1 not_targeted 1") })
        }
    }

    @Test("--no-analytics-store writes no analytics file; herald report then says there is none")
    func noAnalyticsStore() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--no-analytics-store"])
            let token = try #require(await daemon.event()?["token"]?.stringValue, "no token line; log: \(daemon.log)")
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--title", "Hi"])
            #expect(sent.status == 0, "\(sent.error)")
            #expect(await daemon.event()?["event"] == "willPresent")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/analytics.sqlite"))
            let report = try await runHerald(["report", "--data-dir", directory])
            #expect(report.status == 1)
            #expect(report.error.contains("no analytics store"))
        }
    }
}
