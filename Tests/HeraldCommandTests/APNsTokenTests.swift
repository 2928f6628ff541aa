import Foundation
import HeraldTesting
import Testing

@Suite("herald serve --apns-key: APNs token-based authentication, with httpx and PyJWT as the provider")
struct APNsTokenTests {
    /// In clear the provider speaks HTTP/1.1; over TLS, as APNs providers do, HTTP/2 negotiated by ALPN.
    @Test(
        "a provider's ES256 tokens are accepted; missing, expired and invalid ones get APNs' 403 reasons",
        arguments: [false, true])
    func providerTokens(overTLS: Bool) async throws {
        let python = try pythonEnvironment(with: "httpx and PyJWT")
        try await withTemporaryDirectory { directory in
            let key = "\(directory)/AuthKey_KEY1234567.p8"
            let made = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/env"),
                ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
            try #require(made.status == 0, "\(made.error)")
            let secretFile = "\(directory)/secret"
            try "s3cret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let certificates = try await TestCertificates.make(in: directory)
            let tls = overTLS ? ["--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile] : []
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                arguments: ["--auth-token-file", secretFile, "--apns-key", "KEY1234567:TEAM123456:\(key)"] + tls)
            let token = try #require(await daemon.event()?["token"]?.stringValue)

            let script = repositoryRoot.appendingPathComponent("Tests/APNsPy/apns_token_check.py").path
            let result = try await runExecutable(
                python,
                [
                    script, "--url", "\(overTLS ? "https" : "http")://127.0.0.1:\(daemon.httpPort)", "--device-token", token, "--key", key,
                    "--key-id", "KEY1234567", "--team-id", "TEAM123456", "--secret", "s3cret",
                ] + (overTLS ? ["--ca-file", certificates.caFile] : []))
            #expect(result.status == 0, "apns_token_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)")
            for _ in 0..<4 { #expect(await daemon.event()?["event"] == "willPresent", "each accepted alert is presented") }
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("--apns-key and apns-keys: a bad form or an unreadable or unusable key file stops the start, naming it")
    func badKeys() async throws {
        try await withTemporaryDirectory { directory in
            let badForm = try await runHerald(["serve", "--data-dir", directory, "--apns-key", "KEY1234567:/etc/key.p8"])
            #expect(badForm.status == 64)
            #expect(badForm.error.contains("KEYID:TEAMID:PATH"), "\(badForm.error)")
            let missing = try await runHerald(
                [
                    "serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none", "--apns-key",
                    "KEY1234567:TEAM123456:\(directory)/none.p8",
                ])
            #expect(missing.status == 1)
            #expect(missing.error.contains("APNs provider key KEY1234567: cannot read \(directory)/none.p8"), "\(missing.error)")
            try "not a key\n".write(toFile: "\(directory)/bad.p8", atomically: true, encoding: .utf8)
            try "apns-keys: [KEY1234567:TEAM123456:\(directory)/bad.p8]\nhttp: 127.0.0.1:0\nsocket: none\n"
                .write(toFile: "\(directory)/herald.yaml", atomically: true, encoding: .utf8)
            let unusable = try await runHerald(["serve", "--data-dir", directory, "--config", "\(directory)/herald.yaml"])
            #expect(unusable.status == 1)
            #expect(unusable.error.contains("not a P-256 (ES256) public key or .p8 private key"), "\(unusable.error)")
        }
    }
}
