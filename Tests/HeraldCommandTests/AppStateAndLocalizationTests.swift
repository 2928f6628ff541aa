import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald app-state, and localized alerts in herald serve")
struct AppStateAndLocalizationTests {
    @Test("herald app-state background: notifications are presented without willPresent and reach the handlers when opened")
    func appState() async throws {
        try await withTemporaryDirectory(prefix: "herald-app-state") { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let background = try await runBuiltExecutable("herald", ["app-state", "--data-dir", directory, "background"])
            #expect(background.status == 0, "\(background.error)")
            #expect(background.output.contains(#"{"app_state":"background"}"#), "\(background.output)")
            let sent = try httpRequest(
                port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, notification: ("Hi", "there"))
            )
            let id = try #require(try JSONParser.parse(sent.body)["name"]?.stringValue?.split(separator: "/").last.map(String.init))
            // The log presenter shows it with the payload's options; the echo handler is not asked.
            let logFile = "\(directory)/stderr.log"
            #expect(
                await eventually {
                    let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
                    return log.contains("message_id=\(id)") && log.contains("options=[.list, .banner]")
                }, "\(daemon.log)")
            let opened = try await runBuiltExecutable("herald", ["respond", "--data-dir", directory, id])
            #expect(opened.status == 0, "\(opened.error)")
            let event = try #require(await daemon.event())
            #expect(event["event"] == "didReceiveResponse", "the first event after the token is the response, not willPresent: \(event)")
            #expect(event["messageID"]?.stringValue == id)

            let bad = try await runBuiltExecutable("herald", ["app-state", "--data-dir", directory, "asleep"])
            #expect(bad.status == 64)
            #expect(bad.error.contains("active or background, not 'asleep'"), "\(bad.error)")
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("loc-key and title-loc-key are resolved from DATA-DIR/Localizable by the daemon's locale")
    func localizedAlert() async throws {
        try await withTemporaryDirectory(prefix: "herald-l10n") { directory in
            try FileManager.default.createDirectory(atPath: "\(directory)/Localizable", withIntermediateDirectories: true)
            try #""NEW_MESSAGE_TITLE" = "Nouveau message"; "NEW_MESSAGE" = "%@ vous écrit";"#
                .write(toFile: "\(directory)/Localizable/fr.strings", atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: directory, environment: ["LANG": "fr_FR.UTF-8", "LC_ALL": "", "LC_MESSAGES": ""])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let apns =
                #"{"payload": {"aps": {"alert": {"title-loc-key": "NEW_MESSAGE_TITLE", "loc-key": "NEW_MESSAGE", "loc-args": ["Ana"]}}}}"#
            _ = try httpRequest(port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, apns: apns))
            let event = try #require(await daemon.event())
            #expect(event["event"] == "willPresent")
            #expect(event["userInfo"]?["aps"]?["alert"]?["title"]?.stringValue == "Nouveau message", "\(event)")
            #expect(event["userInfo"]?["aps"]?["alert"]?["body"]?.stringValue == "Ana vous écrit", "\(event)")
            // The log presenter's line shows the alert as presented: resolved, not the keys the sender wrote.
            let line = await eventuallyValue { daemon.log.split(separator: "\n").first { $0.hasSuffix("] notification") } }
            #expect(line?.contains("body=Ana vous écrit") == true && line?.contains("title=Nouveau message") == true, "\(daemon.log)")
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("a malformed string catalog stops the start with the file and line (exit status 64)")
    func badCatalog() async throws {
        try await withTemporaryDirectory(prefix: "herald-l10n") { directory in
            try FileManager.default.createDirectory(atPath: "\(directory)/Localizable", withIntermediateDirectories: true)
            try "\"A\" = \"1\";\n\"B\" = \"2\"\n".write(toFile: "\(directory)/Localizable/de.strings", atomically: true, encoding: .utf8)
            let result = try await runHerald(["serve", "--data-dir", directory, "--http", "none", "--socket", "none"])
            #expect(result.status == 64)
            #expect(
                result.error.contains("herald: string catalog \(directory)/Localizable/de.strings, line 3: expected ';' after the value"),
                "\(result.error)")
        }
    }
}
