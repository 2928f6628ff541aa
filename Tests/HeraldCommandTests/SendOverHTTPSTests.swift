import Foundation
import HeraldTesting
import Testing

@Suite("herald send and topics: https URLs")
struct SendOverHTTPSTests {
    @Test("https URLs: sent when --ca-file trusts the server's certificate, refused with a certificate error otherwise")
    func https() throws {
        try withTemporaryDirectory { directory in
            let certificates = try TestCertificates(in: directory)
            let server = try PythonHTTPServer(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { server.stop() }
            let message = ["--project-id", "demo", "--token", "abc", "--data", "a=b"]

            let sent = try runHerald(
                ["send", "--http", "\(server.baseURL)/", "--ca-file", certificates.caFile] + message,
                environment: ["HERALD_AUTH_TOKEN": "s3cret"])
            #expect(sent.status == 0, "\(sent.output)\(sent.error)")
            #expect(sent.output.contains("projects/demo/messages/42"), "\(sent.output)")
            #expect(sent.output.contains("Bearer s3cret"), "the bearer secret went along: \(sent.output)")

            // The proxy variables curl would read are not used: the request goes straight to the daemon.
            let unproxied = try runHerald(
                ["send", "--http", server.baseURL, "--ca-file", certificates.caFile] + message,
                environment: ["https_proxy": "http://127.0.0.1:1", "HTTPS_PROXY": "http://127.0.0.1:1", "all_proxy": "http://127.0.0.1:1"])
            #expect(unproxied.status == 0, "\(unproxied.output)\(unproxied.error)")

            let untrusted = try runHerald(["send", "--http", server.baseURL] + message)
            #expect(untrusted.status != 0)
            #expect(untrusted.error.contains("is not trusted"), "\(untrusted.error)")

            let badURL = try runHerald(["send", "--http", "ftp://localhost:\(server.port)"] + message)
            #expect(badURL.status == 64)
            #expect(badURL.error.contains("--http must be HOST:PORT or an http:// or https:// URL"), "\(badURL.error)")
            let badTopicsURL = try runHerald(["topics", "subscribe", "--data-dir", directory, "--http", "ftp://localhost:1", "storms"])
            #expect(badTopicsURL.status == 64)
            #expect(badTopicsURL.error.contains("--http must be HOST:PORT or an http:// or https:// URL"), "\(badTopicsURL.error)")
        }
    }
}
