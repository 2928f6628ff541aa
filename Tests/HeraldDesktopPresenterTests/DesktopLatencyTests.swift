import Foundation
import Glibc
import Herald
import HeraldDesktopPresenter
import HeraldTesting
import Testing

/// Figures for BENCHMARKS.md, not assertions: run with HERALD_DESKTOP_BENCHMARK=1 (and a release build for real
/// numbers). One notification at a time against dunst: the time from `willPresent` (the message accepted and
/// routed) to `Notify` having returned, and the CPU time of this process per notification.
@Suite(
    "DesktopPresenter latency (HERALD_DESKTOP_BENCHMARK=1)", .serialized,
    .enabled(if: ProcessInfo.processInfo.environment["HERALD_DESKTOP_BENCHMARK"] != nil))
struct DesktopLatencyTests {
    static let count = 500

    /// Times each presentation: from its `willPresent` to the inner presenter's return.
    final class TimedPresenter: Presenter, NotificationHandler, Sendable {
        let inner: DesktopPresenter
        let started = Locked<[String: ContinuousClock.Instant]>([:])
        let durations = Locked<[Duration]>([])

        init(_ inner: DesktopPresenter) { self.inner = inner }

        func start(_ context: PluginContext) async throws { try await inner.start(context) }
        func stop() async { await inner.stop() }

        func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
            let now = ContinuousClock.now
            started.withLock { $0[message.messageID ?? ""] = now }
            return [.banner, .list, .sound]
        }

        func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
            await inner.present(message, options: options, actions: actions)
            let end = ContinuousClock.now
            if let start = started.withLock({ $0.removeValue(forKey: message.messageID ?? "") }) {
                durations.withLock { $0.append(end - start) }
            }
        }
    }

    static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    /// `closeEvery`: dunst's stack is emptied (`dunstctl close-all`, outside the timing) every so many notifications;
    /// dunst answers `Notify` more slowly the more it shows.
    @Test("accepted message to Notify returned, one at a time, against dunst", arguments: [1, 50])
    func latency(closeEvery: Int) async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let timed = TimedPresenter(DesktopPresenter(options: .testing(session)))
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1")))
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, timed]) { herald in
            let token = try await herald.token()
            var cpu = 0.0
            for n in 0..<Self.count {
                if n % closeEvery == 0 { try await session.dunstctl("close-all") }
                let before = Self.cpuSeconds()
                _ = try await receiver.sendAPNs(DunstTests.payload(title: "n\(n)", category: nil), deviceToken: token, to: herald).get()
                try await herald.waitUntilIdle()
                cpu += Self.cpuSeconds() - before
            }
            let sorted = timed.durations.withLock { $0 }.sorted()
            #expect(sorted.count == Self.count)
            func percentile(_ p: Double) -> Duration { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
            print(
                "desktop presenter against dunst (stack emptied every \(closeEvery)): \(sorted.count) notifications; accepted to Notify returned p50 \(percentile(0.5)), p99 \(percentile(0.99)); CPU \(Int(cpu / Double(Self.count) * 1e6)) µs per notification"
            )
        }
    }
}

/// The documentation's screenshot: run with HERALD_DESKTOP_SCREENSHOT=docs/operators/desktop-notification.png (it
/// needs Debian's `notification-daemon`, which shows the actions as buttons; the tests use dunst, which does not).
@Suite(
    "DesktopPresenter screenshot (HERALD_DESKTOP_SCREENSHOT=PATH)",
    .enabled(if: ProcessInfo.processInfo.environment["HERALD_DESKTOP_SCREENSHOT"] != nil))
struct DesktopScreenshotTests {
    @Test("a notification with its actions on the Xvfb screen")
    func screenshot() async throws {
        let path = try #require(ProcessInfo.processInfo.environment["HERALD_DESKTOP_SCREENSHOT"])
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startNotificationDaemon()
        // notification-daemon offers no inline reply, so a category of plain buttons.
        let notes = NotificationCategory(
            identifier: "notes",
            actions: [
                NotificationAction(identifier: "send", title: "Send them", options: .foreground),
                NotificationAction(identifier: "later", title: "Later"),
            ])
        try await withPresenter(DesktopPresenter(options: .testing(session)), categories: [notes]) { herald, receiver, _, token in
            let payload =
                #"{"aps": {"alert": {"title": "Ada Lovelace", "subtitle": "Analytical Engine", "body": "The notes are ready; shall I send them?"}, "category": "notes", "sound": "default"}}"#
            _ = try await receiver.sendAPNs(payload, deviceToken: token, to: herald).get()
            // notification-daemon shows it at the screen's top right corner (1024 pixels wide), drawn in a few frames
            // after it answered Notify: captured until two captures in a row are the same.
            let next = path + ".next.png"
            #expect(
                await eventually {
                    guard (try? await session.run("/usr/bin/import", "-window", "root", "-crop", "420x160+604+0", "+repage", next)) != nil,
                        let image = FileManager.default.contents(atPath: next), image.count > 6_000
                    else { return false }
                    if image == FileManager.default.contents(atPath: path) { return unlink(next) == 0 }
                    return rename(next, path) != 0
                })
        }
    }
}
