import Foundation
import Herald
import HeraldTesting
import Testing

/// `herald serve --presenter desktop` as a child process, on a private bus with dunst.
@Suite("herald serve --presenter desktop")
struct ServeDesktopTests {
    @Test("a sent notification is shown by dunst, and its default action reaches the daemon's handlers as a response")
    func serveShowsAndResponds() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        try await withTemporaryDirectory(prefix: "herald-serve-desktop") { directory in
            let daemon = try DaemonProcess(
                directory: directory, arguments: ["--presenter", "desktop"], environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
            let token = try #require(echoedToken(daemon)?.token, "\(daemon.log)")
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send",
                body: fcmBody(token: token, notification: ("Hello", "from serve")))
            #expect(sent.status == 200, "\(sent.body)")
            #expect(await eventually { (try? session.displayedCount()) == 1 }, "\(daemon.log)")
            try session.dunstctl("action", "0")
            var response: JSONValue?
            while let event = daemon.event() {
                if event["event"] == "didReceiveResponse" {
                    response = event
                    break
                }
            }
            #expect(response?["action"]?.stringValue == NotificationResponse.defaultActionIdentifier, "\(daemon.log)")
            try session.dunstctl("close-all")
            #expect(try session.history().first?["summary"]?.stringValue == "Hello")
            #expect(daemon.terminate() == 0)
        }
    }
}
