import Foundation
import HeraldEventLoop
import HeraldTLS
import HeraldTesting
import Testing

@Suite("TLS with several certificates chosen by SNI, with openssl s_client")
struct TLSSNITests {
    /// The default certificate (serial 1001, localhost), A001 for a.example.test and B001 for *.b.example.test,
    /// client certificates required when `clientCA`.
    static func context(in directory: String, clientCA: Bool) async throws -> (TestCertificates, TLSServerContext) {
        let certificates = try await TestCertificates.make(in: directory)
        let (certificate, key) = try await certificates.issue(name: "server", serial: "1001")
        let a = try await certificates.issueServer(name: "sni-a", serial: "A001", dnsNames: ["a.example.test"])
        let b = try await certificates.issueServer(name: "sni-b", serial: "B001", dnsNames: ["*.b.example.test"])
        var configuration = TLSServerContext.Configuration(
            certificateFile: certificate, keyFile: key, clientCAFile: clientCA ? certificates.caFile : nil)
        configuration.sniCertificates = [
            CertificateFiles(certificateFile: a.certificate, keyFile: a.key),
            CertificateFiles(certificateFile: b.certificate, keyFile: b.key),
        ]
        return (certificates, try TLSServerContext(configuration: configuration))
    }

    @Test(
        "each name gets its certificate (the default for no name or another), with the same ALPN on every certificate; the certificates list their names"
    )
    func certificateByName() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await Self.context(in: directory, clientCA: false)
            #expect(context.certificates.map(\.serial) == ["1001", "A001", "B001"])
            #expect(context.certificates.map(\.names) == [["localhost"], ["a.example.test"], ["*.b.example.test"]])
            #expect(context.certificate.serial == "1001")
            try await withRunningLoop(name: "tls-sni") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                for (name, serial) in [
                    ("a.example.test", "A001"), ("x.b.example.test", "B001"), ("b.example.test", "1001"), ("y.x.b.example.test", "1001"),
                    ("localhost", "1001"), ("other.test", "1001"),
                ] {
                    for version in ["-tls1_2", "-tls1_3"] {
                        let result = try await sClient(
                            port: server.port, [version, "-CAfile", certificates.caFile, "-servername", name, "-alpn", "h2"])
                        #expect(result.status == 0, "\(name) \(version): \(result.output)")
                        #expect(result.output.contains("hello alpn=h2 sni=\(name) version=TLSv1."), "\(name) \(version): \(result.output)")
                        #expect(result.output.contains("serial=\(serial)\n"), "\(name) \(version): \(result.output)")
                    }
                }
                let none = try await sClient(port: server.port, ["-CAfile", certificates.caFile, "-noservername"])
                #expect(none.output.contains("hello alpn=none sni=none") && none.output.contains("serial=1001\n"), "\(none.output)")
                #expect(context.handshakeFailures.all == 0)
                try await server.close()
            }
        }
    }

    @Test(
        "on a certificate chosen by SNI, client certificates are required as on the default, and sessions resume (TLS 1.2 by ID and ticket, 1.3)"
    )
    func sameSettingsOnEveryCertificate() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await Self.context(in: directory, clientCA: true)
            let client = try await certificates.issue(name: "client", serial: "2001", client: true)
            let certificate = ["-CAfile", certificates.caFile, "-cert", client.certificate, "-key", client.key]
            try await withRunningLoop(name: "tls-sni") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                for version in ["-tls1_2", "-tls1_3"] {
                    let without = try await sClient(
                        port: server.port, [version, "-CAfile", certificates.caFile, "-servername", "a.example.test"])
                    #expect(!without.output.contains("alpn="), "\(version) without a certificate got through: \(without.output)")
                    let with = try await sClient(port: server.port, [version, "-servername", "a.example.test"] + certificate)
                    #expect(with.status == 0 && with.output.contains("peer=yes serial=A001\n"), "\(version): \(with.output)")
                }
                for variant in [["-tls1_2"], ["-tls1_2", "-no_ticket"], ["-tls1_3"]] {
                    let session = "\(directory)/session\(variant.joined())"
                    let name = ["-servername", "x.b.example.test"]
                    let first = try await sClient(port: server.port, variant + name + certificate + ["-sess_out", session])
                    #expect(first.output.contains("\nNew, TLSv1.") && first.output.contains("serial=B001\n"), "\(variant): \(first.output)")
                    let again = try await sClient(port: server.port, variant + name + certificate + ["-sess_in", session])
                    #expect(
                        again.status == 0 && again.output.contains("\nReused, TLSv1.") && again.output.contains("serial=B001\n"),
                        "\(variant): \(again.output)")
                }
                #expect(await eventually { context.handshakeFailures.refused == 2 })
                try await server.close()
            }
        }
    }

    @Test("reload reads every pair: a replaced second certificate is served to new handshakes; one that fails keeps all")
    func reload() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await Self.context(in: directory, clientCA: false)
            try await certificates.issueServer(name: "sni-b", serial: "B002", dnsNames: ["*.b.example.test"])
            try context.reload()
            #expect(context.certificates.map(\.serial) == ["1001", "A001", "B002"])
            try FileManager.default.removeItem(atPath: "\(directory)/sni-a-key.pem")
            try FileManager.default.copyItem(atPath: "\(directory)/sni-b-key.pem", toPath: "\(directory)/sni-a-key.pem")
            #expect(throws: TLSConfigurationError.keyMismatch(certificate: "\(directory)/sni-a.pem", key: "\(directory)/sni-a-key.pem")) {
                try context.reload()
            }
            #expect(context.certificates.map(\.serial) == ["1001", "A001", "B002"])
            try await withRunningLoop(name: "tls-sni") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                let b = try await sClient(port: server.port, ["-CAfile", certificates.caFile, "-servername", "x.b.example.test"])
                #expect(b.output.contains("serial=B002\n"), "\(b.output)")
                try await server.close()
            }
        }
    }
}
