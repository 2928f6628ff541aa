import Foundation
import Glibc
import Herald
import HeraldTesting
import Testing

/// The real Firebase Admin SDK for Python, unchanged, against `herald serve --fcm-proxy`: only HTTPS_PROXY, the CA
/// in REQUESTS_CA_BUNDLE and SSL_CERT_FILE, and the service-account file `herald credentials create` wrote.
@Suite("herald credentials and --fcm-proxy: an unmodified Admin SDK app server sends through Herald", .serialized)
struct AdminSDKProxyTests {
    /// Runs Tests/AdminSDK/proxy_check.py through the daemon's proxy; its exit status and output. With `hosts`, the
    /// set-up without a proxy: no HTTPS_PROXY, and the script runs in a private mount namespace of its own where
    /// the file `hosts` is bind-mounted over /etc/hosts (as an operator's /etc/hosts would point Google's names at
    /// Herald); nothing outside the namespace sees it.
    private func runCheck(
        port: Int, caFile: String, credentials: String, token: String, extra: [String] = [], hosts: String? = nil
    ) async throws -> (status: Int32, output: String) {
        let python = try pythonEnvironment(with: "firebase-admin")
        let script = repositoryRoot.appendingPathComponent("Tests/AdminSDK/proxy_check.py").path
        let proxyURL = hosts == nil ? "http://127.0.0.1:\(port)" : ""
        let environment = [
            "HTTPS_PROXY": proxyURL, "https_proxy": proxyURL, "NO_PROXY": "", "no_proxy": "",
            "REQUESTS_CA_BUNDLE": caFile, "SSL_CERT_FILE": caFile, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        ]
        let command = [python.path, script, "--credentials", credentials, "--token", token] + extra
        let namespace =
            hosts.map {
                [
                    "/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                    #"mount --bind "$1" /etc/hosts && shift && exec "$@""#, "sh", $0,
                ]
            } ?? []
        let result = try await onOwnThread {
            try runExecutable(
                URL(fileURLWithPath: "/usr/bin/timeout"), ["--kill-after=10s", "180s"] + namespace + command, environment: environment)
        }
        return (result.status, result.output + result.error)
    }

    /// An access token for the key of the service-account file `credentials` from the daemon's /token (on its own
    /// address), got with the JWT-bearer grant as google-auth asks for one (Tests/AdminSDK/access_token.py).
    private func accessToken(port: Int, credentials: String) async throws -> String {
        let python = try pythonEnvironment(with: "PyJWT")
        let script = repositoryRoot.appendingPathComponent("Tests/AdminSDK/access_token.py").path
        let result = try await onOwnThread {
            try runExecutable(
                URL(fileURLWithPath: "/usr/bin/timeout"),
                ["--kill-after=10s", "120s", python.path, script, "--credentials", credentials, "--url", "http://127.0.0.1:\(port)/token"])
        }
        try #require(result.status == 0, "access_token.py failed (exit \(result.status)): \(result.error)")
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The HTTP status of an FCM v1 send to `token` on the daemon's own address with `accessToken` as the bearer.
    private func sendStatus(port: Int, accessToken: String, token: String) async throws -> String {
        let body = #"{"message":{"token":"\#(token)","data":{"check":"access-token"}}}"#
        let result = try await onOwnThread {
            try runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-sS", "--noproxy", "*", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                    "Authorization: Bearer \(accessToken)", "-H", "Content-Type: application/json", "--data", body,
                    "http://127.0.0.1:\(port)/v1/projects/demo/messages:send",
                ])
        }
        return result.output
    }

    @Test(
        "credentials create (0600 file, CA key 0600), the SDK's calls through the proxy each handled as sent, CONNECT elsewhere 403, revoke: no new token, an issued one 401"
    )
    func unmodifiedAdminSDK() async throws {
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "e2e-secret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let account = "\(directory)/service-account.json"
            let created = try await runHerald([
                "credentials", "create", "--data-dir", directory, "--out", account, "--name", "app-server", "--project-id", "demo",
            ])
            #expect(created.status == 0, "\(created.error)")
            let mode = try FileManager.default.attributesOfItem(atPath: account)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let file = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: account))))
            #expect(file["type"] == "service_account")
            #expect(file["project_id"] == "demo")
            #expect(file["client_email"] == "app-server@demo.iam.gserviceaccount.com")
            #expect(file["token_uri"] == "https://oauth2.googleapis.com/token")
            #expect(file["private_key"]?.stringValue?.hasPrefix("-----BEGIN PRIVATE KEY-----\n") == true)
            let keyID = try #require(file["private_key_id"]?.stringValue)
            // The store keeps the public key only.
            let store = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/herald.sqlite"))
            #expect(store.range(of: Data("PRIVATE KEY".utf8)) == nil)

            let ca = try await runHerald(["credentials", "ca", "--data-dir", directory])
            let caFile = ca.output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(ca.status == 0 && FileManager.default.fileExists(atPath: caFile), "\(ca.error)")
            let caKeyMode = try FileManager.default.attributesOfItem(atPath: "\(directory)/fcm-proxy/ca-key.pem")[.posixPermissions] as? Int
            #expect(caKeyMode == 0o600)

            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--fcm-proxy", "--auth-token-file", secretFile, "--socket", "none"])
            let token = try #require(await daemon.event()?["token"]?.stringValue, "\(daemon.log)")
            // While the daemon runs, a file is for its project without --project-id.
            let second = "\(directory)/second.json"
            #expect(
                try await runHerald(["credentials", "create", "--data-dir", directory, "--out", second, "--name", "second"]).status == 0)
            #expect(try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: second))))["project_id"] == "demo")
            let check = try await runCheck(port: daemon.httpPort, caFile: caFile, credentials: account, token: token)
            #expect(check.status == 0, "proxy_check.py failed (exit \(check.status)):\n\(check.output)")
            let expected = [
                "multicast", "send", "send-each-1", "send-each-2", "send-notification", "topic-news",
            ]
            #expect(check.output.contains("delivered: [\"" + expected.joined(separator: "\", \"") + "\"]"), "\(check.output)")
            // What the daemon handled: each message, as sent.
            var handled: [String] = []
            while handled.count < expected.count {
                // Written before the SDK's calls were answered: read at once.
                guard let event = await daemon.event() else { break }
                if let name = event["userInfo"]?["check"]?.stringValue { handled.append(name) }
                if event["userInfo"]?["check"] == "send-notification" {
                    #expect(event["userInfo"]?["aps"]?["alert"]?["title"] == "Build finished")
                }
            }
            #expect(handled.sorted() == expected, "\(daemon.log)")

            // Nothing but Google's three hosts on 443 is tunnelled.
            let port = daemon.httpPort
            let elsewhere = try await onOwnThread {
                try runExecutable(
                    URL(fileURLWithPath: "/usr/bin/curl"),
                    ["-sS", "-o", "/dev/null", "-w", "%{http_connect}", "--proxy", "http://127.0.0.1:\(port)", "https://example.com/"])
            }
            #expect(elsewhere.output == "403")

            // An access token the issued key got is accepted on a send beside the static secret...
            let issued = try await accessToken(port: port, credentials: account)
            #expect(try await sendStatus(port: port, accessToken: issued, token: token) == "200")

            let listed = try await runHerald(["credentials", "list", "--data-dir", directory])
            #expect(listed.output.contains(keyID) && listed.output.contains("\"revokedAt\":null"), "\(listed.output)")
            let revoked = try await runHerald(["credentials", "revoke", "--data-dir", directory, "app-server"])
            #expect(revoked.status == 0 && revoked.output.contains(keyID), "\(revoked.error)")
            // ...and stops working once the daemon has read the keys again (every 2 seconds).
            let stopped = await eventually(timeout: .seconds(60)) {
                (try? await sendStatus(port: port, accessToken: issued, token: token)) == "401"
            }
            #expect(stopped, "\(daemon.log)")
            // A new app server with the revoked file gets no token.
            let refused = await eventually(timeout: .seconds(90)) {
                (try? await runCheck(port: port, caFile: caFile, credentials: account, token: token, extra: ["--expect-refused"]))?
                    .status == 0
            }
            #expect(refused)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "without a proxy: Google's names resolving to Herald on 443 (a private /etc/hosts) with the CA's certificate for them; send_each_async over HTTP/2 too",
        .enabled(if: geteuid() == 0 && PrivateMount.available, "listens on port 443 and mounts in a private namespace (root)"))
    func namesPointingAtHerald() async throws {
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "e2e-secret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let account = "\(directory)/service-account.json"
            let created = try await runHerald(["credentials", "create", "--data-dir", directory, "--out", account, "--project-id", "demo"])
            #expect(created.status == 0, "\(created.error)")
            let ca = try await runHerald(["credentials", "ca", "--data-dir", directory])
            let caFile = ca.output.trimmingCharacters(in: .whitespacesAndNewlines)
            // Port 443 on an address of 127.0.0.0/8 of this test's own, so that tests running at once do not meet.
            let address = "127.\(Int.random(in: 1...254)).\(Int.random(in: 1...254)).\(Int.random(in: 1...254))"
            let daemon = try await DaemonProcess.start(
                directory: directory, httpPort: 443,
                arguments: [
                    "serve", "--http", "\(address):443", "--data-dir", directory, "--project-id", "demo", "--echo",
                    "--auth-token-file", secretFile, "--socket", "none", "--tls-cert", "\(directory)/fcm-proxy/server.pem",
                    "--tls-key", "\(directory)/fcm-proxy/server-key.pem",
                ])
            let token = try #require(await daemon.event()?["token"]?.stringValue, "\(daemon.log)")
            // The hosts file an operator writes: Google's three names are Herald's address.
            let hosts = "\(directory)/hosts"
            try """
            127.0.0.1 localhost
            ::1 localhost
            \(address) fcm.googleapis.com iid.googleapis.com oauth2.googleapis.com

            """.write(toFile: hosts, atomically: true, encoding: .utf8)
            let check = try await runCheck(
                port: daemon.httpPort, caFile: caFile, credentials: account, token: token, extra: ["--no-proxy"], hosts: hosts)
            #expect(check.status == 0, "proxy_check.py --no-proxy failed (exit \(check.status)):\n\(check.output)")
            // The asynchronous calls' answers came over HTTP/2 (ALPN), and only over it.
            #expect(check.output.contains("async HTTP versions: [\"HTTP/2\"]\n"), "\(check.output)")
            // The bind mount stayed in the script's namespace.
            #expect(!(try String(contentsOfFile: "/etc/hosts", encoding: .utf8)).contains("\(address) fcm.googleapis.com"))
            let expected = [
                "multicast", "send", "send-each-1", "send-each-2", "send-each-async", "send-notification", "topic-news",
            ]
            #expect(check.output.contains("delivered: [\"" + expected.joined(separator: "\", \"") + "\"]"), "\(check.output)")
            var handled: [String] = []
            while handled.count < expected.count {
                guard let event = await daemon.event() else { break }
                if let name = event["userInfo"]?["check"]?.stringValue { handled.append(name) }
            }
            #expect(handled.sorted() == expected, "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "refused: fcm-proxy with TLS on the endpoint or without it (64); credentials create over an existing file, a bad name; revoke of no key"
    )
    func refusals() async throws {
        try await withTemporaryDirectory { directory in
            let withTLS = try await runHerald([
                "serve", "--data-dir", directory, "--fcm-proxy", "--tls-cert", "c.pem", "--tls-key", "k.pem",
            ])
            #expect(withTLS.status == 64)
            #expect(withTLS.error.contains("FCM proxy needs the HTTP endpoint"), "\(withTLS.error)")
            let withoutHTTP = try await runHerald(["serve", "--data-dir", directory, "--fcm-proxy", "--http", "none"])
            #expect(withoutHTTP.status == 64)
            let file = "\(directory)/taken.json"
            try "{}".write(toFile: file, atomically: true, encoding: .utf8)
            let over = try await runHerald(["credentials", "create", "--data-dir", directory, "--out", file])
            #expect(over.status == 1 && over.error.contains("cannot create \(file)"), "\(over.error)")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == "{}")
            #expect(try await runHerald(["credentials", "list", "--data-dir", directory]).output.isEmpty)
            let badName = try await runHerald([
                "credentials", "create", "--data-dir", directory, "--out", "\(directory)/x.json", "--name", "Bad Name",
            ])
            #expect(badName.status == 64)
            let none = try await runHerald(["credentials", "revoke", "--data-dir", directory, "nobody"])
            #expect(none.status == 1 && none.error.contains("no valid key nobody"), "\(none.error)")
        }
    }
}
