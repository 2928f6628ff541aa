import Foundation
import HeraldTesting
import Testing

@Suite("herald serve --tls-client-ca: APNs certificate-based authentication, with httpx and curl as the provider")
struct APNsCertificateTests {
    @Test(
        "a provider certificate authorizes its topics (TopicDisallowed, MissingTopic otherwise); without one and without a token, MissingProviderToken"
    )
    func providerCertificates() async throws {
        let python = try pythonEnvironment(with: "httpx")
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let topic = "com.example.weather"
            let multi = try await certificates.issueAPNsProvider(
                name: "multi", serial: "2001", topics: [topic, "\(topic).voip", "\(topic).complication"])
            let single = try await certificates.issueAPNsProvider(name: "single", serial: "2002", topics: [topic])
            let plain = try await certificates.issue(name: "plain", serial: "2003", client: true)
            let secretFile = "\(directory)/secret"
            try "s3cret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                arguments: [
                    "--auth-token-file", secretFile, "--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile,
                    "--tls-client-ca", certificates.caFile,
                ])
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let url = "https://127.0.0.1:\(daemon.httpPort)"

            let script = repositoryRoot.appendingPathComponent("Tests/APNsPy/apns_certificate_check.py").path
            let result = try await runExecutable(
                python,
                [
                    script, "--url", url, "--ca-file", certificates.caFile, "--device-token", token, "--secret", "s3cret",
                    "--multi", multi.certificate, multi.key, "--single", single.certificate, single.key,
                    "--plain", plain.certificate, plain.key,
                ])
            #expect(result.status == 0, "apns_certificate_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)")
            // Each accepted alert is presented; the push to another device is an analytics "dropped" event, which
            // comes in its batch, before or after them.
            #expect(await Self.presented(6, by: daemon), "each accepted alert is presented")

            // curl as the provider: the one-topic certificate, no apns-topic, no authorization.
            let curl = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http2", "--cacert", certificates.caFile,
                    "--cert", single.certificate, "--key", single.key, "-H", "apns-push-type: alert",
                    "--data-binary", #"{"aps":{"alert":"curl"}}"#, "\(url)/3/device/\(token)",
                ])
            #expect(curl.output == "2 200", "curl: \(curl.output) \(curl.error)")
            #expect(await Self.presented(1, by: daemon))
            #expect(await daemon.terminate() == 0)
        }
    }

    /// Whether `count` more `willPresent` events come from `daemon` (other events passed over).
    static func presented(_ count: Int, by daemon: DaemonProcess) async -> Bool {
        var seen = 0
        while seen < count, let event = await daemon.event() {
            if event["event"] == "willPresent" { seen += 1 }
        }
        return seen == count
    }
}
