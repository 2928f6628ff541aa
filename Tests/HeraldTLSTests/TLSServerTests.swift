import Foundation
import HeraldEventLoop
import HeraldTesting
import Testing

@testable import HeraldTLS

@Suite("TLS on a listener, with openssl s_client")
struct TLSServerTests {
    @Test("TLS 1.2 and 1.3 are accepted; the server's certificate verifies against the CA; SNI is accepted")
    func modernVersions() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            for version in ["-tls1_2", "-tls1_3"] {
                let result = try await sClient(
                    port: server.port, [version, "-CAfile", certificates.caFile, "-verify_return_error", "-servername", "localhost"])
                #expect(result.status == 0, "\(version): \(result.output)")
                #expect(result.output.contains("Verify return code: 0 (ok)"))
                let expected = version == "-tls1_2" ? "TLSv1.2" : "TLSv1.3"
                #expect(
                    result.output.contains("hello alpn=none sni=localhost version=\(expected) peer=no serial=1001"), "\(result.output)")
            }
            #expect(context.handshakeFailures.all == 0)
        }
    }

    @Test("sessions resume: a client back with the ticket it was given (TLS 1.2 and 1.3) skips the full handshake")
    func resumption() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            for version in ["-tls1_2", "-tls1_3"] {
                let session = "\(directory)/session\(version)"
                let first = try await sClient(port: server.port, [version, "-CAfile", certificates.caFile, "-sess_out", session])
                #expect(first.output.contains("\nNew, TLSv1."), "\(version): \(first.output)")
                let again = try await sClient(port: server.port, [version, "-CAfile", certificates.caFile, "-sess_in", session])
                #expect(again.status == 0 && again.output.contains("\nReused, TLSv1."), "\(version): \(again.output)")
                #expect(again.output.contains("hello alpn=none"), "\(version): \(again.output)")
            }
        }
    }

    @Test(
        "TLS 1.2 sessions resume by session ID (a client without tickets, from the server's cache), also when the server closed without close_notify",
        arguments: [true, false])
    func resumptionBySessionID(closeNotify: Bool) async throws {
        try await withTLSTestServer(closeNotify: closeNotify) { directory, certificates, context, loop, server in
            let session = "\(directory)/session"
            let first = try await sClient(
                port: server.port, ["-tls1_2", "-no_ticket", "-CAfile", certificates.caFile, "-sess_out", session])
            #expect(first.output.contains("\nNew, TLSv1.2"), "\(first.output)")
            for _ in 0..<2 {
                let again = try await sClient(
                    port: server.port, ["-tls1_2", "-no_ticket", "-CAfile", certificates.caFile, "-sess_in", session])
                #expect(again.output.contains("\nReused, TLSv1.2"), "\(again.output)")
            }
        }
    }

    @Test(
        "a 100 KB line and its answer, then short lines on the same connection: the buffers the large records grew are replaced, nothing is lost"
    )
    func largeRecordsThenSmall() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            let long = String(repeating: "0123456789", count: 10_000)
            for version in ["-tls1_2", "-tls1_3"] {
                let result = try await sClient(
                    port: server.port, [version, "-CAfile", certificates.caFile, "-quiet"], input: "\(long)\nhello\n\(long)\nend\n")
                #expect(result.status == 0, "\(version): \(result.output.suffix(2_000))")
                let lines = result.output.split(separator: "\n").filter { $0.contains(" alpn=") }  // the answers
                #expect(
                    lines.map { $0.split(separator: " ").first.map(String.init) ?? "" } == [long, "hello", long, "end"], "\(version)")
            }
            // Paced: the long line, its answer read; then what the connection's memory BIOs keep.
            for version in ["TLSv1_2", "TLSv1_3"] {
                let result = try await runExecutable(
                    URL(fileURLWithPath: "/usr/bin/timeout"),
                    ["20", "python3", "-c", Self.pacedClient, String(server.port), certificates.caFile, version])
                #expect(result.status == 0, "\(version): \(result.error)")
                let answers = result.output.split(separator: "\n")
                #expect(answers.count == 3, "\(version): \(result.error)")
                guard answers.count == 3 else { continue }
                #expect(answers[0].hasPrefix(long + " alpn="))
                // Both grew past 100 KB for the long line and its answer; replaced, they hold a line's room.
                let room = answers[1].split(separator: " ").compactMap { field -> (String, Int)? in
                    let parts = field.split(separator: "=")
                    guard parts.count == 2, let value = Int(parts[1]), ["input", "output"].contains(parts[0]) else { return nil }
                    return (String(parts[0]), value)
                }
                #expect(room.count == 2, "\(answers[1])")
                #expect(room.allSatisfy { $0.1 <= TLSStream.keptBufferCapacity }, "\(version): \(answers[1])")
                #expect(answers[2].hasPrefix("end alpn="))
            }
        }
    }

    /// A Python client for `largeRecordsThenSmall`: over TLS (the version given) to 127.0.0.1:PORT, verifying with CA,
    /// a 100,000-byte line, then `buffers`, then `end`, each after the answer to the one before; prints the answers.
    static let pacedClient = """
        import socket, ssl, sys
        port, ca, version = int(sys.argv[1]), sys.argv[2], getattr(ssl.TLSVersion, sys.argv[3])
        context = ssl.create_default_context(cafile=ca)
        context.minimum_version = context.maximum_version = version
        connection = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
        pending = b""
        def answer():
            global pending
            while b"\\n" not in pending:
                chunk = connection.recv(65536)
                if not chunk:
                    sys.exit("closed before an answer")
                pending += chunk
            line, pending = pending.split(b"\\n", 1)
            return line.decode()
        for line in ["0123456789" * 10000, "buffers", "end"]:
            connection.sendall(line.encode() + b"\\n")
            print(answer())
        """

    @Test("a write completion that writes again and closes, run while the records it waited for are sent, sends each record once")
    func completionWritesAgain() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            for version in ["-tls1_2", "-tls1_3"] {
                let result = try await sClient(
                    port: server.port, [version, "-CAfile", certificates.caFile, "-quiet"], input: "chain\n")
                // Standard error is mixed in (the chain's verification); the two lines come in order, nothing fails.
                let lines = result.output.split(separator: "\n")
                let answer = lines.firstIndex { $0.hasPrefix("chain alpn=") }
                #expect(result.status == 0, "\(version): \(result.output)")
                #expect(answer != nil && lines.firstIndex(of: "chained").map { $0 > answer! } == true, "\(version): \(result.output)")
                #expect(!result.output.contains("error:"), "\(version): \(result.output)")
            }
        }
    }

    @Test("TLS 1.0 and 1.1 are refused (the client allowed to offer them), and the refusals counted")
    func oldVersionsRefused() async throws {
        try await withTLSTestServer { directory, certificates, context, loop, server in
            for version in ["-tls1", "-tls1_1"] {
                // Security level 0: OpenSSL's client would refuse to offer these versions itself otherwise.
                let result = try await sClient(
                    port: server.port, [version, "-cipher", "DEFAULT@SECLEVEL=0", "-CAfile", certificates.caFile])
                #expect(result.status != 0, "\(version): \(result.output)")
                #expect(!result.output.contains("alpn="), "\(version) got through: \(result.output)")
            }
            #expect(await eventually { context.handshakeFailures.refused == 2 })
        }
    }

    @Test("ALPN: the listener's protocols offered, the client's choice reported to the session")
    func alpn() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory)
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                for (offer, chosen) in [
                    ("h2", "h2"), ("http/1.1", "http/1.1"), ("h2,http/1.1", "h2"), ("http/1.1,h2", "h2"), ("spdy/1", "none"),
                ] {
                    let result = try await sClient(port: server.port, ["-alpn", offer, "-CAfile", certificates.caFile])
                    #expect(result.status == 0, "\(offer): \(result.output)")
                    #expect(result.output.contains("hello alpn=\(chosen) "), "\(offer): \(result.output)")
                    if chosen != "none" { #expect(result.output.contains("ALPN protocol: \(chosen)"), "\(result.output)") }
                }
                try await server.close()
                // A listener that speaks HTTP/1.1 only never agrees to h2.
                let http1 = try await TLSTestServer.start(on: loop, context: context, protocols: ["http/1.1"])
                let result = try await sClient(port: http1.port, ["-alpn", "h2,http/1.1", "-CAfile", certificates.caFile])
                #expect(result.output.contains("hello alpn=http/1.1 "), "\(result.output)")
                try await http1.close()
            }
        }
    }

    @Test("mutual TLS: a client without a certificate or with one of another CA is refused; one the CA signed gets through")
    func clientCertificates() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory, clientCA: true)
            let client = try await certificates.issue(name: "client", serial: "2001", client: true)
            try FileManager.default.createDirectory(atPath: "\(directory)/other", withIntermediateDirectories: true)
            let other = try await TestCertificates.make(in: "\(directory)/other")
            let stranger = try await other.issue(name: "stranger", serial: "3001", client: true)
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                for version in ["-tls1_2", "-tls1_3"] {
                    let without = try await sClient(port: server.port, [version, "-CAfile", certificates.caFile])
                    #expect(!without.output.contains("alpn="), "\(version) without a certificate got through: \(without.output)")
                    let foreign = try await sClient(
                        port: server.port, [version, "-CAfile", certificates.caFile, "-cert", stranger.certificate, "-key", stranger.key])
                    #expect(!foreign.output.contains("alpn="), "\(version) with another CA's certificate got through: \(foreign.output)")
                    let with = try await sClient(
                        port: server.port, [version, "-CAfile", certificates.caFile, "-cert", client.certificate, "-key", client.key])
                    #expect(with.status == 0, "\(with.output)")
                    #expect(
                        with.output.contains("hello alpn=none sni=none version=TLSv1.") && with.output.contains("peer=yes"),
                        "\(with.output)")
                }
                #expect(await eventually { context.handshakeFailures.refused == 4 })
                try await server.close()
            }
        }
    }

    @Test("reload: new handshakes get the new certificate, a connection opened before goes on with its own")
    func reload() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory, serial: "AA01")
            #expect(context.certificate.serial == "AA01")
            try await withRunningLoop(name: "tls-test") { loop in
                let server = try await TLSTestServer.start(on: loop, context: context)
                // A TLS connection held open across the reload: Python's ssl module, told when to go on.
                let script = """
                    import socket, ssl, sys
                    context = ssl.create_default_context(cafile=sys.argv[1])
                    stream = context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[2]))), server_hostname="localhost")
                    lines = stream.makefile("rwb")
                    for word in ("before", "after"):
                        lines.write(word.encode() + b"\\n"); lines.flush()
                        print(lines.readline().decode().strip(), flush=True)
                        sys.stdin.readline()
                    """
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
                process.arguments = ["-c", script, certificates.caFile, "\(server.port)"]
                let input = Pipe()
                let output = Pipe()
                process.standardInput = input
                process.standardOutput = output
                try runWithNoSignalsBlocked(process)
                let lines = LineReader(output.fileHandleForReading.fileDescriptor)
                let before = await lines.line()
                #expect(before?.hasPrefix("before alpn=none") == true && before?.hasSuffix("serial=AA01") == true, "\(before ?? "nothing")")

                // The files replaced by a certificate of another serial, then reloaded.
                try await certificates.issue(name: "server", serial: "BB02")
                try context.reload()
                #expect(context.certificate.serial == "BB02")
                let fresh = try await sClient(port: server.port, ["-CAfile", certificates.caFile])
                #expect(fresh.output.contains("serial=BB02"), "\(fresh.output)")

                // The old connection still works, on the certificate it began with.
                input.fileHandleForWriting.write(Data("go\n".utf8))
                let after = await lines.line()
                #expect(after?.hasPrefix("after alpn=none") == true && after?.hasSuffix("serial=AA01") == true, "\(after ?? "nothing")")
                try input.fileHandleForWriting.close()
                await waitUntilExitWithoutSpinning(process)
                try await server.close()
            }
        }
    }

    @Test("a reload that fails (a key of another certificate) keeps the certificate in use and says why")
    func failedReload() async throws {
        try await withTemporaryDirectory { directory in
            let (certificates, context) = try await makeContext(in: directory, serial: "CC01")
            let other = try await certificates.issue(name: "other", serial: "CC02")
            try FileManager.default.removeItem(atPath: "\(directory)/server-key.pem")
            try FileManager.default.copyItem(atPath: other.key, toPath: "\(directory)/server-key.pem")
            #expect(throws: TLSConfigurationError.keyMismatch(certificate: "\(directory)/server.pem", key: "\(directory)/server-key.pem")) {
                try context.reload()
            }
            #expect(context.certificate.serial == "CC01")
        }
    }

    @Test("files that cannot be used are refused with the file named")
    func badFiles() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, key) = try await certificates.issue(name: "server", serial: "1")
            #expect(throws: TLSConfigurationError.self) {
                try TLSServerContext(configuration: .init(certificateFile: "\(directory)/missing.pem", keyFile: key))
            }
            do {
                _ = try TLSServerContext(configuration: .init(certificateFile: "\(directory)/missing.pem", keyFile: key))
            } catch {
                #expect("\(error)".contains("cannot read the TLS certificate file \(directory)/missing.pem: No such file or directory"))
            }
            do {
                _ = try TLSServerContext(configuration: .init(certificateFile: key, keyFile: key))
                Issue.record("a key file taken for a certificate")
            } catch {
                #expect("\(error)".contains("the TLS certificate file \(key) cannot be used"), "\(error)")
            }
            do {
                _ = try TLSServerContext(configuration: .init(certificateFile: certificate, keyFile: key, clientCAFile: key))
                Issue.record("a key file taken for a CA file")
            } catch {
                #expect("\(error)".contains("the TLS client CA file \(key) cannot be used"), "\(error)")
            }
        }
    }
}
