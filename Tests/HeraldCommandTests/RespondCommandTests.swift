import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald respond")
struct RespondCommandTests {
    @Test("a response reaches a running daemon's handlers; an unknown message or action is named, exit 1")
    func respond() async throws {
        try await withTemporaryDirectory(prefix: "herald-respond") { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, notification: ("Hi", "there"))
            )
            let id = try #require(try JSONParser.parse(sent.body)["name"]?.stringValue?.split(separator: "/").last.map(String.init))
            var presented = false
            while !presented, let event = await daemon.event() { presented = event["event"] == "willPresent" }
            #expect(presented, "\(daemon.log)")

            let opened = try await runBuiltExecutable("herald", ["respond", "--data-dir", directory, id, "--text", "ok"])
            #expect(opened.status == 0, "\(opened.error)")
            #expect(opened.output.contains(#""responded""#))
            let echoed = try #require(await daemon.event())
            #expect(echoed["event"] == "didReceiveResponse")
            #expect(echoed["action"] == .string(NotificationResponse.defaultActionIdentifier))
            #expect(echoed["userText"] == "ok")

            let unknown = try await runBuiltExecutable("herald", ["respond", "--data-dir", directory, "no-such-message"])
            #expect(unknown.status == 1)
            #expect(unknown.output.contains("NOT_FOUND") && unknown.output.contains("no-such-message"))
            let badAction = try await runBuiltExecutable("herald", ["respond", "--data-dir", directory, id, "--action", "archive"])
            #expect(badAction.status == 1)
            #expect(badAction.output.contains("'archive'"))
            #expect(await daemon.terminate() == 0)
        }
    }
}
