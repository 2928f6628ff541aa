import Foundation
import HeraldTesting
import Testing

@Suite("herald serve over TLS: HTTP/2 abuse, frame by frame, while a well-behaved client is answered")
struct ServeHTTP2AbuseTests {
    /// What `Tests/HTTP2Clients/h2_abuse.py` printed for one case.
    struct Outcome: Decodable {
        var goaway: Int?
        var closed: Bool
        var resets: [String: Int]
        var statuses: [String: Int]
        var frames: Int
        var neighbourAnswered: Bool
    }

    /// What the well-behaved client met over the whole run.
    struct Neighbour: Decodable {
        var ok: Int
        var other: Int
        var errors: [String]
    }

    static let enhanceYourCalm = 0xB
    static let protocolError = 0x1
    static let refusedStream = 0x7

    @Test(
        "rapid reset, CONTINUATION flood, SETTINGS flood, streams past the limit and an HPACK bomb over TLS (ALPN h2) each end their own connection; httpx on another is answered 200 throughout; the daemon lives on"
    )
    func abuseOverTLS() async throws {
        let python = try pythonEnvironment(with: "h2 and httpx")
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", arguments: ["--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile])
            _ = try #require(await daemon.event()?["token"]?.stringValue)
            let cases = ["rapid-reset", "continuation-flood", "settings-flood", "too-many-streams", "hpack-bomb"]
            let script = repositoryRoot.appendingPathComponent("Tests/HTTP2Clients/h2_abuse.py").path
            let result = try await runExecutable(
                python,
                [
                    script, "--port", String(daemon.httpPort), "--tls", certificates.caFile, "--alongside", "/healthz",
                    // A route that waits for the body, so that the streams stay open.
                    "--stream-path", "/v1/projects/demo/messages:send", "--case",
                ] + cases)
            #expect(result.status == 0, "h2_abuse.py: \(result.error)")
            let lines = result.output.split(separator: "\n")
            try #require(lines.count == cases.count + 1, "\(result.output)\(result.error)")
            for (name, line) in zip(cases, lines) {
                let outcome = try JSONDecoder().decode(Outcome.self, from: Data(line.utf8))
                switch name {
                case "too-many-streams":
                    #expect(outcome.goaway == Self.protocolError || outcome.resets["201"] == Self.refusedStream, "\(name): \(line)")
                case "continuation-flood":
                    #expect(outcome.goaway != nil && outcome.goaway != 0, "\(name): \(line)")
                default:
                    #expect(outcome.goaway == Self.enhanceYourCalm, "\(name): \(line)")
                }
                #expect(outcome.neighbourAnswered, "\(name): the well-behaved client was answered meanwhile")
            }
            let neighbour = try JSONDecoder().decode(Neighbour.self, from: Data(lines[cases.count].utf8))
            #expect(neighbour.ok > 0 && neighbour.other == 0 && neighbour.errors.isEmpty, "\(lines[cases.count])")

            let after = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http2", "--cacert", certificates.caFile,
                    "https://127.0.0.1:\(daemon.httpPort)/healthz",
                ])
            #expect(after.output == "2 200", "the daemon answers after: \(after.output) \(after.error)")
            #expect(await daemon.terminate() == 0)
        }
    }
}
