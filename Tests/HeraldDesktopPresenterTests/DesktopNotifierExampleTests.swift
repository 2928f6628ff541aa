import Foundation
import Herald
import HeraldTesting
import Testing

/// Examples/DesktopNotifier as a child process on a private bus, with python-dbusmock's notification server (which
/// emits the named action and the inline reply dunst cannot be driven to).
@Suite("The DesktopNotifier example")
struct DesktopNotifierExampleTests {
    @Test("it shows a message with its category's actions and prints each response, the reply with its text; SIGTERM stops it")
    func showsAndPrintsResponses() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startMockServer(capabilities: ["actions", "body", "inline-reply"])
        try await withTemporaryDirectory(prefix: "herald-desktop-notifier") { directory in
            let socket = "\(directory)/notifier.sock"
            let process = Process()
            process.executableURL = buildProductsDirectory.appendingPathComponent("DesktopNotifier")
            process.arguments = [socket]
            var environment = ProcessInfo.processInfo.environment
            environment["DBUS_SESSION_BUS_ADDRESS"] = session.address
            process.environment = environment
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try runWithNoSignalsBlocked(process)
            defer { if process.isRunning { process.terminate() } }
            let lines = LineReader(output.fileHandleForReading.fileDescriptor)
            let token = try #require(await lines.line().flatMap { $0.hasPrefix("token: ") ? String($0.dropFirst(7)) : nil })
            #expect(await lines.line() == "listening on \(socket); SIGINT or SIGTERM stops")

            let client = try TestSocketClient(.unix(path: socket))
            client.send(
                #"{"message": {"token": "\#(token)", "notification": {"title": "Ana", "body": "Lunch?"}, "apns": {"payload": {"aps": {"category": "message"}}}}}"#
                    + "\n")
            let answer = try JSONParser.parse(Array((client.readLines(1).first ?? "").utf8))
            let id = try #require(answer["name"]?.stringValue?.split(separator: "/").last.map(String.init), "\(answer)")
            #expect(await lines.line() == "presenting \(id): Ana")
            let calls: @Sendable () async -> String = {
                (try? await session.run(
                    "/usr/bin/gdbus", "call", "--address", session.address, "--dest", "org.freedesktop.Notifications", "--object-path",
                    "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.GetCalls")) ?? ""
            }
            #expect(await eventually { await calls().contains("Notify") })
            let called = await calls()
            #expect(called.contains("['default', 'Open', 'archive', 'Archive', 'open', 'Open', 'inline-reply', 'Reply']"), "\(called)")

            try await session.emitFromMock("ActionInvoked", signature: "us", "[<uint32 1>, <'archive'>]")
            #expect(await lines.line() == "response \(id) archive")
            try await session.emitFromMock("NotificationReplied", signature: "us", "[<uint32 1>, <'at one'>]")
            #expect(await lines.line() == "response \(id) reply \"at one\"")

            process.terminate()
            await waitUntilExitWithoutSpinning(process)
            #expect(process.terminationStatus == 0)
        }
    }
}
