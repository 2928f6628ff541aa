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
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--presenter", "desktop"], environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send",
                body: fcmBody(token: token, notification: ("Hello", "from serve")))
            #expect(sent.status == 200, "\(sent.body)")
            #expect(await eventually { (try? await session.displayedCount()) == 1 }, "\(daemon.log)")
            try await session.dunstctl("action", "0")
            var response: JSONValue?
            while let event = await daemon.event() {
                if event["event"] == "didReceiveResponse" {
                    response = event
                    break
                }
            }
            #expect(response?["action"]?.stringValue == NotificationResponse.defaultActionIdentifier, "\(daemon.log)")
            try await session.dunstctl("close-all")
            #expect(try await session.history().first?["summary"]?.stringValue == "Hello")
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("categories declared in the config file reach the presenter: their buttons in Notify, a named action echoed as a response")
    func configCategories() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startMockServer(capabilities: ["actions", "body", "inline-reply"])
        try await withTemporaryDirectory(prefix: "herald-serve-categories") { directory in
            let config = "\(directory)/herald.yaml"
            try """
            categories:
              message:
                actions:
                  - {identifier: archive, title: Archive, destructive: true}
                  - identifier: reply
                    title: Reply
                    text-input: {button-title: Send, placeholder: Your answer}
            """.write(toFile: config, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", arguments: ["--presenter", "desktop", "--config", config],
                environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let apns = #"{"payload": {"aps": {"alert": {"title": "Hi", "body": "there"}, "category": "message"}}}"#
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, apns: apns))
            #expect(sent.status == 200, "\(sent.body)")
            let mockCalls: @Sendable () async -> String = {
                (try? await session.run(
                    "/usr/bin/gdbus", "call", "--address", session.address, "--dest", "org.freedesktop.Notifications", "--object-path",
                    "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.GetCalls")) ?? ""
            }
            #expect(await eventually { await mockCalls().contains("Notify") }, "\(daemon.log)")
            let calls = await mockCalls()
            #expect(calls.contains("['default', 'Open', 'archive', 'Archive', 'inline-reply', 'Reply']"), "\(calls)")
            #expect(calls.contains("'x-kde-reply-placeholder-text': <'Your answer'>"), "\(calls)")
            #expect(calls.contains("'x-kde-reply-submit-button-text': <'Send'>"), "\(calls)")
            try await session.emitFromMock("ActionInvoked", signature: "us", "[<uint32 1>, <'archive'>]")
            var response: JSONValue?
            while let event = await daemon.event() {
                if event["event"] == "didReceiveResponse" {
                    response = event
                    break
                }
            }
            #expect(response?["action"]?.stringValue == "archive", "\(daemon.log)")
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("a dynamic plugin's categories (plugin ABI 1.1) reach the presenter through herald serve --plugin")
    func pluginCategories() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startMockServer(capabilities: ["actions", "body", "inline-reply"])
        try await withTemporaryDirectory(prefix: "herald-serve-plugin-categories") { directory in
            let plugin = buildProductsDirectory.appendingPathComponent("libHeraldExamplePlugin.so").path
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--presenter", "desktop", "--plugin", plugin],
                environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let apns = #"{"payload": {"aps": {"alert": {"title": "Storm", "body": "at six"}, "category": "weather"}}}"#
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, apns: apns))
            #expect(sent.status == 200, "\(sent.body)")
            let mockCalls: @Sendable () async -> String = {
                (try? await session.run(
                    "/usr/bin/gdbus", "call", "--address", session.address, "--dest", "org.freedesktop.Notifications", "--object-path",
                    "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.GetCalls")) ?? ""
            }
            #expect(await eventually { await mockCalls().contains("Notify") }, "\(daemon.log)")
            let calls = await mockCalls()
            #expect(calls.contains("['default', 'Open', 'details', 'Details', 'inline-reply', 'Comment']"), "\(calls)")
            #expect(calls.contains("'x-kde-reply-submit-button-text': <'Send'>"), "\(calls)")
            #expect(await daemon.terminate() == 0)
        }
    }
}
