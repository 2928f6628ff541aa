import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTesting
import Testing

/// Records every message handlers are given: data-only ones (`MessageHandler`) and display ones
/// (`NotificationHandler.willPresent`).
final class Recorder: MessageHandler, NotificationHandler, Sendable {
    let messages = Locked<[RemoteMessage]>([])
    func didReceive(_ message: RemoteMessage) async throws { messages.withLock { $0.append(message) } }
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        messages.withLock { $0.append(message) }
        return []
    }
}

/// A child process run to its end without blocking a thread: its exit status and what it printed (stdout and
/// stderr together, through a file, so a chatty child never fills a pipe). It runs under timeout(1), which
/// terminates it after `limit` (exit status 124), so a hung child fails the test instead of hanging it. `environment`
/// is added to this process's.
func runChild(
    _ executable: URL, _ arguments: [String], environment added: [String: String] = [:], limit: Duration = .seconds(180)
) async throws -> (status: Int32, output: String) {
    let outputFile = FileManager.default.temporaryDirectory.appendingPathComponent("herald-child-\(UUID().uuidString).log")
    _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: outputFile) }
    let output = try FileHandle(forWritingTo: outputFile)
    defer { try? output.close() }

    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
    process.arguments = ["--signal=TERM", "--kill-after=10s", "\(limit.components.seconds)s", executable.path] + arguments
    process.standardOutput = output
    process.standardError = output
    process.standardInput = FileHandle.nullDevice
    var environment = ProcessInfo.processInfo.environment
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    environment["PYTHONUNBUFFERED"] = "1"
    environment.merge(added) { _, new in new }
    process.environment = environment
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do {
            try runWithNoSignalsBlocked(process)
        } catch {
            process.terminationHandler = nil
            continuation.resume(throwing: error)
        }
    }
    return (status, (try? String(contentsOf: outputFile, encoding: .utf8)) ?? "")
}

@Suite("HTTPReceiver: the real Firebase Admin SDK for Python against the receiver", .serialized)
struct AdminSDKTests {
    @Test(
        "firebase-admin: send (token, fid), send_each, multicast, topics (FCM v1 and IID), error classes; over TLS the async calls speak HTTP/2",
        arguments: Transport.allCases)
    func firebaseAdminPython(transport: Transport) async throws {
        let python = try pythonEnvironment(with: "firebase-admin")
        let script = repositoryRoot.appendingPathComponent("Tests/AdminSDK/admin_sdk_check.py")
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "admin-sdk-secret")
        options.idleTimeout = .seconds(30)
        let recorder = Recorder()
        try await withHTTPHerald(transport, options: options, plugins: [recorder]) { herald, _, endpoint in
            let token = try await herald.token()
            let fid = try await herald.installationID()
            let child = try await runChild(
                python,
                [
                    script.path, "--url", endpoint.baseURL, "--secret", "admin-sdk-secret",
                    "--token", token, "--fid", fid, "--project", "demo",
                ],
                // The test CA trusted as an operator trusts a private one: httpx reads SSL_CERT_FILE, requests
                // REQUESTS_CA_BUNDLE.
                environment: endpoint.caFile.map { ["SSL_CERT_FILE": $0, "REQUESTS_CA_BUNDLE": $0] } ?? [:])
            #expect(child.status == 0, "admin_sdk_check.py failed (exit \(child.status)):\n\(child.output)")

            // What the script says it delivered, and what this test expects, and what the handlers got: the same.
            let expected = [
                "condition", "multicast", "send-each-async", "send-each-fid", "send-each-token", "send-everything", "send-fid",
                "send-token", "topic-sports", "topic-weather",
            ]
            // httpx offers h2 by ALPN and speaks HTTP/1.1 in clear (it has no prior knowledge).
            let versions = transport == .tls ? "HTTP/2" : "HTTP/1.1"
            #expect(child.output.contains("async HTTP versions: [\"\(versions)\"]\n"), "\(child.output)")
            let line = child.output.split(separator: "\n").last { $0.hasPrefix("delivered: ") }
            let claimed = try line.map { try JSONParser.parse(Array($0.dropFirst("delivered: ".count).utf8)) }
            #expect(claimed?.arrayValue?.compactMap(\.stringValue) == expected, "the script's delivered line: \(line ?? "missing")")
            try await herald.waitUntilIdle()
            let received = recorder.messages.withLock { $0 }
            #expect(received.compactMap { $0.data["check"] }.sorted() == expected)
            #expect(try await herald.subscribedTopics() == ["kept"])

            // The message with every section arrives as an Apple app would see it.
            let everything = try #require(received.first { $0.data["check"] == "send-everything" })
            #expect(everything.userInfo["aps"]?["alert"]?["title"] == "Build finished")
            #expect(everything.userInfo["aps"]?["badge"] == 3)
            #expect(everything.userInfo["custom"] == "value")
            #expect(everything.userInfo["build"] == "8121")
            #expect(everything.analyticsLabel != nil)
            #expect(received.first { $0.data["check"] == "topic-weather" }?.from == "/topics/weather")
        }
    }
}
