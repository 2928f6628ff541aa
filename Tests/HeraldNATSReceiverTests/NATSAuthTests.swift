import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// NATS credentials against real nats-servers that ask for them: a user and password, a token, TLS with client
/// certificates (openssl-made). The right ones connect; wrong or missing ones are refused at connect with the
/// server's reason and a hint at the settings.
@Suite("NATS credentials: user and password, token, TLS")
struct NATSAuthTests {
    @Test("user and password: the right ones connect; a wrong password or none is refused, the credentials named, the password never shown")
    func userAndPassword() throws {
        let server = try NATSServerProcess(extraArguments: ["--user", "herald", "--pass", "s3cret-pass"])
        var options = NATSReceiver.Options(servers: [server.url])
        options.login = .init(user: "herald", password: "s3cret-pass")
        let publisher = try NATSPublisher(options: options)
        try publisher.ensureStream(project: "demo", options: options)
        #expect(try publisher.storedMessages(stream: NATSSubjects.streamName(project: "demo")) == 0)

        for login in [NATSReceiver.Login(user: "herald", password: "wrong-pass"), nil] {
            options.login = login
            let error = try #require(throws: NATSReceiverError.self) { try NATSPublisher(options: options) }
            let text = "\(error)"
            #expect(text.contains("Authorization Violation") && text.contains("check the NATS credentials"), "\(text)")
            #expect(!text.contains("wrong-pass"))
        }
        #expect("\(NATSReceiver.Login(user: "herald", password: "s3cret-pass"))" == "herald:***")
    }

    @Test("token: the right one connects; a wrong one is refused")
    func token() throws {
        let server = try NATSServerProcess(extraArguments: ["--auth", "fleet-token"])
        var options = NATSReceiver.Options(servers: [server.url])
        options.authToken = "fleet-token"
        _ = try NATSPublisher(options: options)
        options.authToken = "other-token"
        let error = try #require(throws: NATSReceiverError.self) { try NATSPublisher(options: options) }
        #expect("\(error)".contains("Authorization Violation"), "\(error)")
    }

    @Test("TLS with client certificates: the test CA and a client certificate connect; without the certificate, refused")
    func tls() async throws {
        try await withTemporaryDirectory(prefix: "herald-nats-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let client = try await certificates.issue(name: "client", serial: "2000", client: true)
            let server = try NATSServerProcess(extraArguments: [
                "--tls", "--tlscert", certificates.certificateFile, "--tlskey", certificates.keyFile, "--tlscacert",
                certificates.caFile, "--tlsverify",
            ])
            var options = NATSReceiver.Options(servers: [server.url])
            options.tls = .init(caFile: certificates.caFile, certificateFile: client.certificate, keyFile: client.key)
            let publisher = try NATSPublisher(options: options)
            try publisher.ensureStream(project: "demo", options: options)
            #expect(try publisher.storedMessages(stream: NATSSubjects.streamName(project: "demo")) == 0)

            options.tls = .init(caFile: certificates.caFile)
            #expect(throws: NATSReceiverError.self) { try NATSPublisher(options: options) }
            // A server certificate the CA file does not vouch for: refused too.
            options.tls = .init(caFile: certificates.untrustedCertificateFile, certificateFile: client.certificate, keyFile: client.key)
            #expect(throws: NATSReceiverError.self) { try NATSPublisher(options: options) }
        }
    }

    @Test(
        "herald serve --nats-user --nats-password-file: the right password starts the instance; a wrong one stops the start with the reason; one without the other is refused"
    )
    func serveWithPassword() async throws {
        let server = try NATSServerProcess(extraArguments: ["--user", "herald", "--pass", "s3cret-pass"])
        try await withTemporaryDirectory(prefix: "herald-nats-auth") { directory in
            let right = "\(directory)/right"
            let wrong = "\(directory)/wrong"
            try "s3cret-pass\n".write(toFile: right, atomically: true, encoding: .utf8)
            try "wrong-pass\n".write(toFile: wrong, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                arguments: ["--nats-server", server.url, "--socket", "none", "--nats-user", "herald", "--nats-password-file", right])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            #expect(await daemon.terminate() == 0)

            let serve = ["serve", "--data-dir", "\(directory)/other", "--http", "none", "--socket", "none", "--nats-server", server.url]
            let refused = try await runBuiltExecutable("herald", serve + ["--nats-user", "herald", "--nats-password-file", wrong])
            #expect(refused.status != 0)
            #expect(
                refused.error.contains("Authorization Violation") && refused.error.contains("check the NATS credentials"),
                "\(refused.error)")
            #expect(!refused.error.contains("wrong-pass"))
            let alone = try await runBuiltExecutable("herald", serve + ["--nats-user", "herald"])
            #expect(alone.status != 0)
            #expect(alone.error.contains("nats-user and nats-password-file go together"), "\(alone.error)")
            let missing = try await runBuiltExecutable(
                "herald", serve + ["--nats-user", "herald", "--nats-password-file", "\(directory)/missing"])
            #expect(missing.status != 0)
            #expect(missing.error.contains("cannot read the NATS password file \(directory)/missing"), "\(missing.error)")
        }
    }
}
