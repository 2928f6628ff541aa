import Foundation
import Glibc
import Herald
import HeraldTesting
import Testing

/// `herald senders` against a running `herald serve`: real curl requests, the senders added, limited and revoked
/// while the daemon runs.
@Suite("herald senders: credentials with scopes and rate limits on a single instance")
struct SendersTests {
    private let send = "/v1/projects/demo/messages:send"

    private func tokenBody(_ token: String, _ check: String) -> String {
        #"{"message":{"token":"\#(token)","data":{"check":"\#(check)"}}}"#
    }

    /// Adds a sender with `herald senders add` and returns its secret (printed once).
    private func addSender(_ name: String, scopes: String, directory: String, extra: [String] = []) async throws -> String {
        let added = try await runHerald(["senders", "add", name, "--scopes", scopes, "--data-dir", directory] + extra)
        #expect(added.status == 0, "\(added.error)")
        return added.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Expects FCM's 403 shape naming `scope`.
    private func expectDenied(_ answer: CurlAnswer, scope: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(answer.status == 403, "\(answer.body)", sourceLocation: sourceLocation)
        let error = try JSONParser.parse(Array(answer.body.utf8))["error"]
        #expect(error?["status"] == "PERMISSION_DENIED", "\(answer.body)", sourceLocation: sourceLocation)
        #expect(error?["code"] == 403, sourceLocation: sourceLocation)
        #expect(
            error?["message"]?.stringValue?.contains("lacks the scope \(scope) ") == true, "\(answer.body)", sourceLocation: sourceLocation)
    }

    @Test("each scope refused with FCM's 403 PERMISSION_DENIED naming it; the bearer secret keeps every scope; list; revoke within seconds")
    func scopesAndRevocation() async throws {
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "static-secret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--auth-token-file", secretFile, "--socket", "none"])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let port = daemon.httpPort
            // Added while the daemon runs: it reads them within seconds.
            let tokensOnly = try await addSender("tokens-only", scopes: "send", directory: directory)
            let topicsOnly = try await addSender("topics-only", scopes: "send-topics", directory: directory)
            let manager = try await addSender("manager", scopes: "manage-topics", directory: directory)
            #expect(tokensOnly.hasPrefix("hsk_") && tokensOnly != topicsOnly)
            let known = await eventually(timeout: .seconds(30)) {
                (try? await curlRequest(port: port, "POST", send, body: tokenBody(token, "tokens-only"), bearer: tokensOnly))?.status == 200
            }
            try #require(known, "the daemon never took the new sender: \(daemon.log)")
            let batchAdd = #"{"to":"/topics/news","registration_tokens":["\#(token)"]}"#
            // manage-topics: the instance subscribed to news (the sends to it below are handled).
            let subscribed = await eventually(timeout: .seconds(30)) {
                (try? await curlRequest(port: port, "POST", "/iid/v1:batchAdd", body: batchAdd, bearer: manager))?.status == 200
            }
            #expect(subscribed)

            let topic = #"{"message":{"topic":"news","data":{"check":"topic"}}}"#
            let condition = #"{"message":{"condition":"'news' in topics","data":{"check":"condition"}}}"#
            // send: tokens only.
            try expectDenied(try await curlRequest(port: port, "POST", send, body: topic, bearer: tokensOnly), scope: "send-topics")
            try expectDenied(try await curlRequest(port: port, "POST", send, body: condition, bearer: tokensOnly), scope: "send-topics")
            try expectDenied(
                try await curlRequest(port: port, "POST", "/iid/v1:batchAdd", body: batchAdd, bearer: tokensOnly), scope: "manage-topics")
            // send-topics: topics and conditions only.
            try expectDenied(
                try await curlRequest(port: port, "POST", send, body: tokenBody(token, "denied"), bearer: topicsOnly), scope: "send")
            #expect(try await curlRequest(port: port, "POST", send, body: topic, bearer: topicsOnly).status == 200)
            #expect(try await curlRequest(port: port, "POST", send, body: condition, bearer: topicsOnly).status == 200)
            try expectDenied(try await curlRequest(port: port, "GET", "/iid/info/\(token)", bearer: topicsOnly), scope: "manage-topics")
            // manage-topics: topic management only (Instance ID and FCM v1's topicSubscriptions).
            #expect(try await curlRequest(port: port, "POST", "/iid/v1:batchAdd", body: batchAdd, bearer: manager).status == 200)
            let subscription = "/v1/projects/demo/registrations/\(token)/topicSubscriptions?topic_name=sport"
            #expect(try await curlRequest(port: port, "POST", subscription, bearer: manager).status == 200)
            try expectDenied(try await curlRequest(port: port, "POST", subscription, bearer: tokensOnly), scope: "manage-topics")
            try expectDenied(
                try await curlRequest(port: port, "POST", send, body: tokenBody(token, "denied"), bearer: manager), scope: "send")
            // APNs provider style pushes are sends to a token: refused as APNs refuses them.
            let apns = try await curlRequest(port: port, "POST", "/3/device/\(token)", body: #"{"aps":{"alert":"x"}}"#, bearer: topicsOnly)
            #expect(apns.status == 403 && apns.body == #"{"reason":"Forbidden"}"#, "\(apns.body)")
            #expect(
                try await curlRequest(port: port, "POST", "/3/device/\(token)", body: #"{"check":"apns"}"#, bearer: tokensOnly).status
                    == 200)
            // The bearer secret can do everything, as before.
            #expect(
                try await curlRequest(port: port, "POST", send, body: tokenBody(token, "static"), bearer: "static-secret").status == 200)
            #expect(try await curlRequest(port: port, "POST", "/iid/v1:batchRemove", body: batchAdd, bearer: "static-secret").status == 200)
            // A secret nobody has: 401, as before.
            #expect(try await curlRequest(port: port, "POST", send, body: tokenBody(token, "x"), bearer: "hsk_unknown").status == 401)

            // What was accepted was handled; nothing refused was.
            var handled: Set<String> = []
            let expected: Set = ["tokens-only", "topic", "condition", "static", "apns"]
            while !handled.isSuperset(of: expected), let event = await daemon.event() {
                if let check = event["userInfo"]?["check"]?.stringValue { handled.insert(check) }
            }
            #expect(handled.isSuperset(of: expected), "\(handled)")
            #expect(!handled.contains("denied"))

            // list: names, scopes, never the secret.
            let listed = try await runHerald(["senders", "list", "--data-dir", directory])
            #expect(listed.status == 0, "\(listed.error)")
            let lines = try listed.output.split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
            #expect(Set(lines.compactMap { $0["name"]?.stringValue }) == ["manager", "tokens-only", "topics-only"] && lines.count == 3)
            #expect(lines.first { $0["name"] == "topics-only" }?["scopes"] == ["send-topics"])
            #expect(!listed.output.contains(tokensOnly) && !listed.output.contains("secret"), "\(listed.output)")
            let store = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/herald.sqlite"))
            #expect(store.range(of: Data(tokensOnly.utf8)) == nil)

            // Revoked while the daemon runs: refused within seconds; the others go on.
            let revoked = try await runHerald(["senders", "revoke", "tokens-only", "--data-dir", directory])
            #expect(revoked.status == 0, "\(revoked.error)")
            let refused = await eventually(timeout: .seconds(30)) {
                (try? await curlRequest(port: port, "POST", send, body: tokenBody(token, "after-revoke"), bearer: tokensOnly))?.status
                    == 401
            }
            #expect(refused, "the revoked sender is still accepted")
            #expect(try await curlRequest(port: port, "POST", send, body: topic, bearer: topicsOnly).status == 200)
            let relisted = try await runHerald(["senders", "list", "--data-dir", directory]).output
            let entry = try relisted.split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }.first {
                $0["name"] == "tokens-only"
            }
            #expect(entry?["revokedAt"]?.intValue != nil, "\(relisted)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("a rate-limited sender: 429 RESOURCE_EXHAUSTED (QUOTA_EXCEEDED) with Retry-After past its burst, accepted again after that time")
    func rateLimit() async throws {
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "static-secret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            // Known from the start: the daemon reads the senders as it starts.
            let secretOut = "\(directory)/limited.secret"
            let added = try await runHerald([
                "senders", "add", "limited", "--scopes", "all", "--rate", "0.5", "--burst", "3", "--data-dir", directory, "--out",
                secretOut,
            ])
            #expect(added.status == 0, "\(added.error)")
            let mode = try FileManager.default.attributesOfItem(atPath: secretOut)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let limited = try String(contentsOfFile: secretOut, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--auth-token-file", secretFile, "--socket", "none"])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let port = daemon.httpPort
            let body = #"{"message":{"token":"\#(token)","data":{"check":"limited"}}}"#
            // A burst of 3, then one every 2 s: the 4th at once is over the limit (a later one on a slow machine).
            var answers: [CurlAnswer] = []
            while answers.count < 10, answers.last?.status != 429 {
                answers.append(try await curlRequest(port: port, "POST", send, body: body, bearer: limited))
            }
            #expect(answers.prefix(3).allSatisfy { $0.status == 200 }, "\(answers.map(\.status))")
            let tooMany = try #require(answers.last)
            #expect(tooMany.status == 429, "\(answers.map(\.status))")
            let error = try JSONParser.parse(Array(tooMany.body.utf8))["error"]
            #expect(error?["code"] == 429)
            #expect(error?["status"] == "RESOURCE_EXHAUSTED", "\(tooMany.body)")
            #expect(error?["details"]?.arrayValue?.first?["errorCode"] == "QUOTA_EXCEEDED", "\(tooMany.body)")
            let retryAfter = try #require(tooMany.headers["retry-after"].flatMap { Int($0) }, "\(tooMany.headers)")
            #expect((1...2).contains(retryAfter))
            // Other senders are not limited by it.
            #expect(try await curlRequest(port: port, "POST", send, body: body, bearer: "static-secret").status == 200)
            // As a client does: wait what Retry-After said, then it is accepted.
            try await Task.sleep(for: .seconds(retryAfter))
            #expect(try await curlRequest(port: port, "POST", send, body: body, bearer: limited).status == 200)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "an Admin SDK credential without manage-topics: subscribe_to_topic fails PERMISSION_DENIED, its legacy form raises PermissionDeniedError; send works"
    )
    func adminSDKCredentialScopes() async throws {
        let python = try pythonEnvironment(with: "firebase-admin")
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "static-secret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let account = "\(directory)/service-account.json"
            let created = try await runHerald([
                "credentials", "create", "--data-dir", directory, "--out", account, "--project-id", "demo", "--scopes", "send,send-topics",
            ])
            #expect(created.status == 0, "\(created.error)")
            let listed = try await runHerald(["credentials", "list", "--data-dir", directory]).output
            #expect(listed.contains(#""scopes":["send","send-topics"]"#), "\(listed)")
            let caFile = try await runHerald(["credentials", "ca", "--data-dir", directory]).output.trimmingCharacters(
                in: .whitespacesAndNewlines)
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--fcm-proxy", "--auth-token-file", secretFile, "--socket", "none"])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let proxy = "http://127.0.0.1:\(daemon.httpPort)"
            let environment = [
                "HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": "", "no_proxy": "", "REQUESTS_CA_BUNDLE": caFile,
                "SSL_CERT_FILE": caFile,
                "PYTHONDONTWRITEBYTECODE": "1",
            ]
            let script = repositoryRoot.appendingPathComponent("Tests/AdminSDK/scopes_check.py").path
            let result = try await onOwnThread {
                try runExecutable(
                    URL(fileURLWithPath: "/usr/bin/timeout"),
                    ["--kill-after=10s", "120s", python.path, script, "--credentials", account, "--token", token],
                    environment: environment)
            }
            #expect(result.status == 0, "scopes_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)\n\(daemon.log)")
            #expect(result.output.contains(#"subscribe: 0 subscribed, failed: ['PERMISSION_DENIED']"#), "\(result.output)")
            #expect(result.output.contains("legacy subscribe refused: PermissionDeniedError"), "\(result.output)")
            var handled: [String] = []
            while handled.isEmpty, let event = await daemon.event() {
                if let check = event["userInfo"]?["check"]?.stringValue { handled.append(check) }
            }
            #expect(handled == ["scoped-send"])
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "refused input: unknown scope, bad name, --burst without --rate, a rate or burst out of range (64); a name taken, revoke of no sender (1)",
        argumentCheckingOnly)
    func refusals() async throws {
        try await withTemporaryDirectory { directory in
            for arguments in [
                ["senders", "add", "a", "--scopes", "send,everything"], ["senders", "add", "Bad Name", "--scopes", "send"],
                ["senders", "add", "a", "--scopes", "send", "--burst", "3"], ["senders", "add", "a", "--scopes", "send", "--rate", "0"],
                ["senders", "add", "a", "--scopes", "send", "--rate", "1e-20"],
                ["senders", "add", "a", "--scopes", "send", "--rate", "1e19"],
                ["senders", "add", "a", "--scopes", "send", "--rate", "5", "--burst", "2000000"],
            ] {
                let refused = try await runHerald(arguments + ["--data-dir", directory])
                #expect(refused.status == 64, "\(arguments): \(refused.error)")
            }
            #expect(try await runHerald(["senders", "add", "a", "--scopes", "send", "--data-dir", directory]).status == 0)
            let again = try await runHerald(["senders", "add", "a", "--scopes", "all", "--data-dir", directory])
            #expect(again.status == 1 && again.error.contains("there is a sender a already"), "\(again.error)")
            let none = try await runHerald(["senders", "revoke", "nobody", "--data-dir", directory])
            #expect(none.status == 1 && none.error.contains("no valid sender nobody"), "\(none.error)")
            #expect(try await runHerald(["senders", "revoke", "a", "--data-dir", directory]).status == 0)
            let twice = try await runHerald(["senders", "revoke", "a", "--data-dir", directory])
            #expect(twice.status == 1, "\(twice.error)")
        }
    }
}
