import HeraldTesting
import Testing

@testable import Herald

/// An app that, like one integrating the reference SDK by hand, calls appDidReceiveMessage from every
/// handler — twice, to show a second call records nothing more.
final class WiringApp: NotificationHandler, MessageHandler, BackgroundFetchWorker, Sendable {
    let herald = Locked<Herald?>(nil)

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        await report(message)
        return [.banner]
    }
    func didReceive(_ response: NotificationResponse) async { await report(response.message) }
    func didReceive(_ message: RemoteMessage) async throws { await report(message) }
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        await report(message)
        return .newData
    }

    private func report(_ message: RemoteMessage) async {
        guard let herald = herald.withLock({ $0 }) else { return }
        _ = try? await herald.appDidReceiveMessage(message)
        _ = try? await herald.appDidReceiveMessage(message)
    }
}

@Suite("Analytics wiring: every event once per message, automatic or manual")
struct AnalyticsWiringTests {
    @Test(
        "receive, foreground, open, dismiss and background_fetch fire exactly once per message (per response), with the app calling appDidReceiveMessage twice everywhere",
        arguments: [Herald.AnalyticsWiring.automatic, .manual])
    func onceEach(wiring: Herald.AnalyticsWiring) async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.analyticsWiring = wiring
        let app = WiringApp()
        try await withHerald(configuration: configuration, plugins: [app]) { herald, receiver, sink in
            app.herald.withLock { $0 = herald }
            let token = try await herald.token()
            let display = try await receiver.sendFCM(fcmBody(token: token, notification: ("Hi", "there")), to: herald).get()
            _ = try await receiver.sendFCM(fcmBody(token: token, data: ["k": "v"]), to: herald).get()
            _ = try await receiver.sendFCM(
                fcmBody(token: token, apns: #"{"payload": {"aps": {"content-available": 1}}, "headers": {"apns-priority": "5"}}"#),
                to: herald
            ).get()
            try await herald.waitUntilIdle()
            try await herald.respond(to: display)
            try await herald.respond(to: display, action: NotificationResponse.dismissActionIdentifier)
            try await herald.waitUntilIdle()
            app.herald.withLock { $0 = nil }
            await herald.shutdown()

            #expect(sink.events(named: .notificationReceive).count == 3, "one per message")
            #expect(Set(sink.events(named: .notificationReceive).compactMap(\.messageID)).count == 3)
            #expect(sink.events(named: .notificationForeground).map(\.messageID) == [display])
            #expect(sink.events(named: .notificationOpen).map(\.messageID) == [display])
            #expect(sink.events(named: .notificationDismiss).map(\.messageID) == [display])
            #expect(sink.events(named: .backgroundFetch).count == 1)
            let ids = sink.recorded.map(\.id)
            #expect(Set(ids).count == ids.count && !ids.contains(0), "every event has an ID of its own")
        }
    }
}
