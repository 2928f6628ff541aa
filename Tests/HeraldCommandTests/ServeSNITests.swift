import Foundation
import Glibc
import Herald
import HeraldTesting
import Testing

/// Opens a keep-alive connection asking for `x.b.example.test` and prints `open`; once told `reloaded` on standard
/// input (the test sends SIGHUP and waits for the daemon's log to say the certificate was reloaded), uses the
/// connection opened before. Prints what each saw: the serials of the kept connection before and after, of a new
/// connection for each name, and the kept connection's status after the reload.
private let sniReload = #"""
    import http.client, socket, ssl, subprocess, sys
    ca, port = sys.argv[1], int(sys.argv[2])
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["http/1.1"])

    def serial_of(stream):
        der = stream.getpeercert(binary_form=True)
        out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der, capture_output=True)
        return out.stdout.decode().strip().split("=")[1]

    def connect(name):
        return context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname=name)

    def serial(name):
        with connect(name) as stream:
            return serial_of(stream)

    def get(connection):
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        return response.status

    keep = http.client.HTTPConnection("x.b.example.test", port)
    keep.sock = connect("x.b.example.test")
    assert get(keep) == 200
    before = serial_of(keep.sock)
    print("open", flush=True)
    if sys.stdin.readline().strip() != "reloaded":
        sys.exit("not told the daemon reloaded")
    after = serial("x.b.example.test")
    status = get(keep)
    print(f"kept={before} keptAfter={serial_of(keep.sock)} keptStatus={status} b={after} "
          f"a={serial('a.example.test')} default={serial('localhost')}", flush=True)
    """#

@Suite("herald serve over TLS: SNI chooses among several certificates (tls-sni-certs)")
struct ServeSNITests {
    /// The default (`sni-default`, localhost), `sni-a` (a.example.test) and `sni-b` (*.b.example.test).
    static func pairs(_ certificates: TestCertificates) async throws -> [(certificate: String, key: String)] {
        [
            try await certificates.issue(name: "server", serial: "9000", subject: "/CN=sni-default"),
            try await certificates.issueServer(name: "sni-a", serial: "A001", dnsNames: ["a.example.test"]),
            try await certificates.issueServer(name: "sni-b", serial: "B001", dnsNames: ["*.b.example.test"]),
        ]
    }

    static func arguments(_ pairs: [(certificate: String, key: String)]) -> [String] {
        ["--socket", "none", "--tls-cert", pairs[0].certificate, "--tls-key", pairs[0].key]
            + pairs.dropFirst().flatMap { ["--tls-sni-cert", "\($0.certificate):\($0.key)"] }
    }

    /// A `herald serve` with the three pairs in a new directory, started and answering, for `body`.
    static func withDaemon(
        _ body: (_ daemon: DaemonProcess, _ certificates: TestCertificates, _ pairs: [(certificate: String, key: String)]) async throws ->
            Void
    ) async throws {
        try await withTemporaryDirectory(prefix: "herald-sni") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let pairs = try await Self.pairs(certificates)
            let daemon = try await DaemonProcess.start(directory: directory + "/data", arguments: Self.arguments(pairs))
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            try await body(daemon, certificates, pairs)
        }
    }

    /// The serial and subjectAltName of the certificate `openssl s_client` is served on `port`, asking for `name`
    /// (no SNI when `nil`).
    static func served(port: Int, name: String?, caFile: String) async throws -> String {
        let sni = name.map { "-servername \($0)" } ?? "-noservername"
        let run = try await runExecutable(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c",
                "openssl s_client -connect 127.0.0.1:\(port) \(sni) -CAfile \(caFile) </dev/null 2>/dev/null"
                    + " | openssl x509 -noout -serial -ext subjectAltName",
            ])
        return run.output
    }

    @Test(
        "openssl s_client and curl get the certificate of the name they ask for (a wildcard for one label), the default for another name or none; HTTP/2 by ALPN on a non-default certificate"
    )
    func certificateByName() async throws {
        try await Self.withDaemon { daemon, certificates, pairs in
            let port = daemon.httpPort
            let caFile = certificates.caFile

            for (name, serial, san) in [
                ("a.example.test", "A001", "DNS:a.example.test"), ("x.b.example.test", "B001", "DNS:*.b.example.test"),
                ("X.B.Example.Test", "B001", "DNS:*.b.example.test"),
                // A wildcard stands for one label: neither the bare name nor two labels match it.
                ("b.example.test", "9000", "DNS:localhost"), ("y.x.b.example.test", "9000", "DNS:localhost"),
                ("other.example.test", "9000", "DNS:localhost"), ("localhost", "9000", "DNS:localhost"),
                (nil, "9000", "DNS:localhost"),
            ] as [(String?, String, String)] {
                let seen = try await Self.served(port: port, name: name, caFile: caFile)
                #expect(seen.contains("serial=\(serial)") && seen.contains(san), "\(name ?? "no SNI"): \(seen)")
            }

            let curl = URL(fileURLWithPath: "/usr/bin/curl")
            func get(_ name: String) async throws -> (status: Int32, output: String, error: String) {
                try await runExecutable(
                    curl,
                    [
                        "-sS", "-v", "-m", "10", "--resolve", "\(name):\(port):127.0.0.1", "--cacert", caFile, "-w",
                        "\n%{http_code} %{http_version}", "https://\(name):\(port)/healthz",
                    ])
            }
            for (name, subject) in [("a.example.test", "CN=sni-a"), ("x.b.example.test", "CN=sni-b"), ("localhost", "CN=sni-default")] {
                let answer = try await get(name)
                // curl offers h2 and http/1.1 by ALPN; each certificate's context picks HTTP/2.
                #expect(answer.status == 0 && answer.output.hasSuffix("200 2"), "\(name): \(answer.output) \(answer.error)")
                #expect(answer.error.contains("subject: \(subject)"), "\(name): \(answer.error)")
            }
            // A name no certificate has gets the default, which curl refuses for that name.
            let other = try await get("other.example.test")
            #expect(other.status == 60 && other.error.contains("subject: CN=sni-default"), "\(other.error)")

            // The start names each certificate's file and names.
            for (file, names) in [
                (pairs[0].certificate, "localhost"), (pairs[1].certificate, "a.example.test"), (pairs[2].certificate, "*.b.example.test"),
            ] {
                #expect(
                    daemon.log.split(separator: "\n").contains {
                        $0.contains("TLS certificate loaded") && $0.contains(file) && $0.contains(names)
                    },
                    "\(daemon.log)")
            }
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "SIGHUP with the second certificate replaced: new handshakes for its names get the new one, a connection opened before goes on; a pair that no longer loads keeps every certificate in use"
    )
    func reload() async throws {
        try await Self.withDaemon { daemon, certificates, pairs in
            let port = daemon.httpPort
            // Replaced on disk now; the daemon reads it on SIGHUP, sent once the script's connection is open.
            try await certificates.issueServer(name: "sni-b", serial: "B002", dnsNames: ["*.b.example.test"])
            let pid = daemon.process.processIdentifier
            let script = Process()
            script.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            script.arguments = ["-c", sniReload, certificates.caFile, "\(port)"]
            let (input, output) = (Pipe(), Pipe())
            script.standardInput = input
            script.standardOutput = output
            try script.run()
            let lines = LineReader(output.fileHandleForReading.fileDescriptor)
            #expect(await lines.line(timeout: 30_000) == "open")
            kill(pid, SIGHUP)
            let reloaded = await eventuallyValue {
                daemon.log.contains("TLS certificate reloaded") && daemon.log.contains("B002") ? true : nil
            }
            #expect(reloaded != nil, "\(daemon.log)")
            input.fileHandleForWriting.write(Data("reloaded\n".utf8))
            try input.fileHandleForWriting.close()
            let seen = await lines.line(timeout: 30_000)
            await waitUntilExitWithoutSpinning(script)
            #expect(seen?.contains("kept=B001 keptAfter=B001 keptStatus=200 b=B002 a=A001 default=9000") == true, "\(seen ?? "nothing")")

            // A key that does not belong to its certificate: the reload fails, every certificate in use stays.
            try FileManager.default.removeItem(atPath: pairs[2].key)
            try FileManager.default.copyItem(atPath: pairs[1].key, toPath: pairs[2].key)
            kill(pid, SIGHUP)
            #expect(await eventuallyValue { daemon.log.contains("TLS reload failed") ? true : nil } != nil, "\(daemon.log)")
            #expect(daemon.log.contains("does not belong to the certificate \(pairs[2].certificate)"), "\(daemon.log)")
            let b = try await Self.served(port: port, name: "x.b.example.test", caFile: certificates.caFile)
            #expect(b.contains("serial=B002"), "\(b)")
            let a = try await Self.served(port: port, name: "a.example.test", caFile: certificates.caFile)
            #expect(a.contains("serial=A001"), "\(a)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "tls-sni-certs: a key not its certificate's or a missing file stops the start naming the files; a bad value is refused from the flag, the variable and the file; without tls-cert it is refused"
    )
    func badSettings() async throws {
        try await withTemporaryDirectory(prefix: "herald-sni") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let pairs = try await Self.pairs(certificates)
            let data = ["serve", "--data-dir", directory + "/data", "--socket", "none"]
            let tls = ["--tls-cert", pairs[0].certificate, "--tls-key", pairs[0].key]

            let mismatch = try await runHerald(data + tls + ["--tls-sni-cert", "\(pairs[1].certificate):\(pairs[2].key)"])
            #expect(mismatch.status == 1, "\(mismatch.error)")
            #expect(
                mismatch.error.contains("the TLS key \(pairs[2].key) does not belong to the certificate \(pairs[1].certificate)"),
                "\(mismatch.error)")
            let missing = try await runHerald(data + tls + ["--tls-sni-cert", "\(directory)/none.pem:\(pairs[1].key)"])
            #expect(
                missing.status == 1 && missing.error.contains("cannot read the TLS certificate file \(directory)/none.pem"),
                "\(missing.error)")

            let allowed = "allowed: a list of CERT:KEY"
            let flag = try await runHerald(data + tls + ["--tls-sni-cert", pairs[1].certificate])
            #expect(
                flag.status == 64 && flag.error.contains("flag --tls-sni-cert: '\(pairs[1].certificate)' is not valid; \(allowed)"),
                "\(flag.error)")
            let variable = try await runHerald(data + tls, environment: ["HERALD_TLS_SNI_CERTS": "\(pairs[1].certificate):"])
            #expect(
                variable.status == 64
                    && variable.error.contains("environment HERALD_TLS_SNI_CERTS: '\(pairs[1].certificate):' is not valid; \(allowed)"),
                "\(variable.error)")
            let file = directory + "/herald.yaml"
            try "tls-sni-certs:\n  - \(pairs[1].certificate):\(pairs[1].key)\n  - \":\(pairs[2].key)\"\n"
                .write(toFile: file, atomically: true, encoding: .utf8)
            let fromFile = try await runHerald(data + tls + ["--config", file])
            #expect(
                fromFile.status == 64
                    && fromFile.error.contains("config file \(file), line 1, key tls-sni-certs: a list is not valid; \(allowed)"),
                "\(fromFile.error)")

            let withoutDefault = try await runHerald(data + ["--tls-sni-cert", "\(pairs[1].certificate):\(pairs[1].key)"])
            #expect(withoutDefault.status == 64 && withoutDefault.error.contains("tls-sni-certs need them too"), "\(withoutDefault.error)")
        }
    }
}
