import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTLS
import HeraldTesting
import Testing

@Suite("HTTPReceiver with client certificates: APNs provider certificates, and 410 Unregistered for a retired token")
struct APNsProviderCertificateTests {
    @Test(
        "httpx over HTTP/2 with provider certificates: their topics accepted, others TopicDisallowed, MissingTopic, MissingProviderToken; a deleted token 410 Unregistered with its timestamp"
    )
    func providerCertificatesAndRetiredToken() async throws {
        let python = try pythonEnvironment(with: "httpx")
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let topic = "com.example.weather"
            let multi = try await certificates.issueAPNsProvider(name: "multi", serial: "3001", topics: [topic, "\(topic).voip"])
            let single = try await certificates.issueAPNsProvider(name: "single", serial: "3002", topics: [topic])
            let plain = try await certificates.issue(name: "plain", serial: "3003", client: true)
            var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
            options.tls = try TLSServerContext(
                configuration: .init(
                    certificateFile: certificates.certificateFile, keyFile: certificates.keyFile, clientCAFile: certificates.caFile))
            let recorder = Recorder()
            try await withHTTPHerald(options: options, plugins: [recorder]) { herald, _, address in
                guard case .tcp(_, let port) = address else { throw POSIXError(.EINVAL) }
                let retired = try await herald.token()
                let before = WallClock.nowMilliseconds()
                try await herald.deleteToken()
                let after = WallClock.nowMilliseconds()
                let token = try await herald.token()
                #expect(token != retired)

                let script = repositoryRoot.appendingPathComponent("Tests/APNsPy/apns_certificate_check.py").path
                let result = try await runExecutable(
                    python,
                    [
                        script, "--url", "https://127.0.0.1:\(port)", "--ca-file", certificates.caFile, "--device-token", token,
                        "--secret", "s3cret", "--multi", multi.certificate, multi.key, "--single", single.certificate, single.key,
                        "--plain", plain.certificate, plain.key, "--retired-token", retired, "--retired-after", String(before),
                        "--retired-before", String(after),
                    ])
                #expect(result.status == 0, "apns_certificate_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)")
                #expect(await eventually { recorder.messages.withLock { $0.count } == 6 }, "each accepted push is presented")
            }
        }
    }

    @Test("a token of the instance's that it no longer has is FCM's UNREGISTERED and APNs' Unregistered; another one BadDeviceToken")
    func retiredTokenReasons() {
        let retired = MessageError(.tokenRetired("fid:abc", at: 1_700_000_000_000))
        #expect(retired.status == .unregistered)
        #expect(retired.apnsReason == "Unregistered")
        #expect(MessageError(.unregistered(.token("x"))).apnsReason == "BadDeviceToken")
    }
}
