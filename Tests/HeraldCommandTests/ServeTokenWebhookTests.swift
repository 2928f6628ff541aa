import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald serve posts its token to an app server (TokenWebhook)")
struct ServeTokenWebhookTests {
    @Test("at start the daemon POSTs its token with the secret from the file; --print-config shows the file, never the secret")
    func postsTheToken() async throws {
        try await withTemporaryDirectory { directory in
            let record = "\(directory)/requests.jsonl"
            let server = try await PythonHTTPServer.start(record: record)
            defer { server.stop() }
            let secretFile = "\(directory)/webhook-secret"
            try "s3cret-webhook\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let url = "http://127.0.0.1:\(server.port)/hooks/token"
            let arguments = ["--token-webhook-url", url, "--token-webhook-secret-file", secretFile, "--token-webhook-max-attempts", "5"]

            let printed = try await runHerald(["serve", "--data-dir", "\(directory)/data", "--print-config"] + arguments)
            #expect(printed.status == 0, "\(printed.error)")
            #expect(printed.output.contains("token-webhook-url: \(url)  # flag --token-webhook-url"), "\(printed.output)")
            #expect(printed.output.contains("token-webhook-secret-file: \(secretFile)"), "\(printed.output)")
            #expect(!printed.output.contains("s3cret-webhook"))

            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: arguments)
            let (token, installationID) = try #require(await echoedToken(daemon), "\(daemon.log)")
            let request = try #require(
                await eventuallyValue { PythonHTTPServer.recordedRequests(in: record).first }, "no request; log: \(daemon.log)")
            #expect(request["path"] == "/hooks/token")
            #expect(request["headers"]?["authorization"] == "Bearer s3cret-webhook")
            let body = try JSONParser.parse(Array(try #require(request["body"]?.stringValue).utf8))
            #expect(body["token"] == .string(token))
            #expect(body["installationID"] == .string(installationID))
            #expect(body["reason"] == "start")
            #expect(!daemon.log.contains("s3cret-webhook"))
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("a URL that is not http(s), or a missing secret file, stops the start with a message naming it")
    func badSettings() async throws {
        try await withTemporaryDirectory { directory in
            let scheme = try await runHerald(["serve", "--data-dir", directory, "--token-webhook-url", "ftp://example.com/token"])
            #expect(scheme.status == 64)
            #expect(scheme.error.contains("flag --token-webhook-url: 'ftp://example.com/token' is not valid"), "\(scheme.error)")
            let noHost = try await runHerald([
                "serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none", "--token-webhook-url", "http://",
            ])
            #expect(noHost.status != 0)
            #expect(noHost.error.contains("url"), "\(noHost.error)")
            let missing = try await runHerald([
                "serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none",
                "--token-webhook-url", "http://127.0.0.1:1/token", "--token-webhook-secret-file", "/nonexistent/webhook-secret",
            ])
            #expect(missing.status == 1)
            #expect(missing.error.contains("/nonexistent/webhook-secret"), "\(missing.error)")
            #expect(!missing.error.contains("herald: herald:"), "\(missing.error)")
        }
    }
}
