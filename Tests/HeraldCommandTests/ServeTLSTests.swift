import Foundation
import Herald
import HeraldTesting
import Testing

/// Keeps a connection open across certificate reloads while clients load the daemon: one keep-alive connection made
/// before, fresh connections (a full handshake each) in four threads meanwhile, SIGHUP three times. Prints the
/// serials seen, how many requests were made and how many failed.
private let reloadUnderLoad = #"""
    import http.client, os, signal, socket, ssl, sys, threading, time
    ca, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    context = ssl.create_default_context(cafile=ca)

    def serial():
        # A full handshake each time; the serial in hex, as openssl x509 -serial prints it.
        with context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as stream:
            return stream.getpeercert()["serialNumber"]

    def get(connection):
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        return response.status

    keep = http.client.HTTPSConnection("localhost", port, context=context)
    assert get(keep) == 200
    before = serial()
    stop = threading.Event()
    counts = {"requests": 0, "failures": 0}
    lock = threading.Condition()

    def load():
        while not stop.is_set():
            try:
                connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
                ok = get(connection) == 200 and get(connection) == 200
                connection.close()
            except Exception as error:
                print("failed:", error, flush=True)
                ok = False
            with lock:
                counts["requests"] += 2
                counts["failures"] += 0 if ok else 1
                lock.notify_all()

    def answered(more):
        # Until the load has made `more` requests from now (20 s at most): it runs across each reload.
        with lock:
            target = counts["requests"] + more
            lock.wait_for(lambda: counts["requests"] >= target, timeout=20)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    answered(16)
    after = before
    for _ in range(3):
        os.kill(pid, signal.SIGHUP)
        deadline = time.time() + 20
        # Each new connection asks: the reload is seen by the first handshake after it, without a pause between.
        while after == before and time.time() < deadline:
            after = serial()
        answered(16)
    stop.set()
    for thread in threads:
        thread.join()
    print(f"before={before} after={after} keep={get(keep)} requests={counts['requests']} failures={counts['failures']}", flush=True)
    """#

@Suite("herald serve over TLS")
struct ServeTLSTests {
    @Test(
        "curl sends an FCM v1 message over https; SIGHUP reloads the certificate: the next client sees the new serial, a keep-alive connection opened before goes on, no request under load fails"
    )
    func httpsAndReload() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, key) = try await certificates.issue(name: "server", serial: "5001")
            let daemon = try await DaemonProcess.start(
                directory: directory + "/data", arguments: ["--socket", "none", "--tls-cert", certificate, "--tls-key", key])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let url = "https://localhost:\(daemon.httpPort)/v1/projects/demo/messages:send"
            let body = #"{"message": {"token": "\#(token)", "data": {"over": "tls"}}}"#
            let curl = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-sS", "--cacert", certificates.caFile, "-H", "Content-Type: application/json", "-d", body, "-w",
                    "\n%{http_code} %{http_version}", url,
                ])
            #expect(curl.status == 0 && curl.output.contains("projects/demo/messages/"), "\(curl.output) \(curl.error)")
            // curl offers h2 and http/1.1 by ALPN; the daemon picks HTTP/2.
            #expect(curl.output.hasSuffix("200 2"), "\(curl.output)")
            #expect(await daemon.event()?["event"]?.stringValue != nil, "\(daemon.log)")
            // Plain HTTP on the TLS port is refused.
            let plain = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"), ["-sS", "-m", "10", "http://127.0.0.1:\(daemon.httpPort)/healthz"])
            #expect(plain.status != 0, "\(plain.output)")

            try await certificates.issue(name: "server", serial: "5002")
            let script = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/python3"),
                ["-c", reloadUnderLoad, certificates.caFile, "\(daemon.httpPort)", "\(daemon.process.processIdentifier)"])
            #expect(script.status == 0, "\(script.output) \(script.error)")
            #expect(script.output.contains("before=5001 after=5002 keep=200"), "\(script.output) \(script.error)")
            #expect(script.output.contains("failures=0"), "\(script.output)")
            #expect(daemon.log.contains("TLS certificate reloaded"), "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "herald send and herald topics to an https daemon: with --ca-file a send and a topic change get through, without it the certificate is not trusted"
    )
    func sendAndTopics() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let data = directory + "/data"
            let daemon = try await DaemonProcess.start(
                directory: data, arguments: ["--tls-cert", certificates.certificateFile, "--tls-key", certificates.keyFile])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let http = ["--http", "https://localhost:\(daemon.httpPort)", "--ca-file", certificates.caFile]

            let sent = try await runHerald(["send"] + http + ["--project-id", "demo", "--token", token, "--data", "over=https"])
            #expect(sent.status == 0 && sent.output.contains("projects/demo/messages/"), "\(sent.output) \(sent.error)")
            #expect(await daemon.event()?["userInfo"]?["over"] == "https", "\(daemon.log)")

            // No --http: the daemon's lock names its https address.
            let subscribed = try await runHerald(["topics", "subscribe", "--data-dir", data, "--ca-file", certificates.caFile, "storms"])
            #expect(subscribed.status == 0, "\(subscribed.error)")
            #expect(
                subscribed.output == "subscribed to storms (through the running daemon at https://127.0.0.1:\(daemon.httpPort))\n",
                "\(subscribed.output)")
            let toTopic = try await runHerald(["send"] + http + ["--project-id", "demo", "--topic", "storms", "--data", "n=1"])
            #expect(toTopic.status == 0, "\(toTopic.output) \(toTopic.error)")
            #expect(await daemon.event()?["userInfo"]?["n"] == "1", "\(daemon.log)")

            let untrusted = try await runHerald([
                "send", "--http", "https://localhost:\(daemon.httpPort)", "--token", token, "--data", "a=b",
            ])
            #expect(untrusted.status != 0 && untrusted.error.contains("is not trusted"), "\(untrusted.error)")
            let untrustedTopics = try await runHerald(
                ["topics", "subscribe", "--data-dir", data, "--http", "https://localhost:\(daemon.httpPort)", "--project-id", "demo", "x"])
            #expect(untrustedTopics.status != 0 && untrustedTopics.error.contains("is not trusted"), "\(untrustedTopics.error)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("mutual TLS: curl without a client certificate is refused, with one the CA signed it is served")
    func clientCertificates() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, key) = try await certificates.issue(name: "server", serial: "6001")
            let client = try await certificates.issue(name: "client", serial: "6002", client: true)
            let daemon = try await DaemonProcess.start(
                directory: directory + "/data",
                arguments: ["--socket", "none", "--tls-cert", certificate, "--tls-key", key, "--tls-client-ca", certificates.caFile])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            let url = "https://localhost:\(daemon.httpPort)/healthz"
            let curl = URL(fileURLWithPath: "/usr/bin/curl")
            let without = try await runExecutable(curl, ["-sS", "-m", "10", "--cacert", certificates.caFile, url])
            #expect(without.status != 0 && !without.output.contains("ready"), "\(without.output)")
            let with = try await runExecutable(
                curl, ["-sS", "-m", "10", "--cacert", certificates.caFile, "--cert", client.certificate, "--key", client.key, url])
            #expect(with.status == 0 && with.output.contains("ready"), "\(with.output) \(with.error)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("TLS settings: a certificate without its key, and a missing file, stop the start with what is wrong")
    func badSettings() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, _) = try await certificates.issue(name: "server", serial: "7001")
            let half = try await runHerald(["serve", "--data-dir", directory + "/data", "--tls-cert", certificate])
            #expect(half.status == 64 && half.error.contains("both a certificate and its key"), "\(half.error)")
            let missing = try await runHerald(
                ["serve", "--data-dir", directory + "/data", "--tls-cert", certificate, "--tls-key", directory + "/nothing.key"])
            #expect(
                missing.status == 1 && missing.error.contains("cannot read the TLS key file \(directory)/nothing.key"), "\(missing.error)")
            let beyond = try await runHerald(
                ["serve", "--data-dir", directory + "/data", "--http", "0.0.0.0:0", "--socket", "none"],
                environment: ["HERALD_AUTH_TOKEN": "s3cret"])
            #expect(beyond.status == 1 && beyond.error.contains("without TLS"), "\(beyond.error)")
        }
    }
}

@Suite("herald serve: TLS on the socket receiver's TCP address and on /metrics")
struct ServeTLSListenersTests {
    @Test("a JSON line over TLS to the socket receiver is answered; /metrics over https shows the failed handshakes")
    func socketAndMetrics() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, key) = try await certificates.issue(name: "server", serial: "8001")
            let socketPort = try freeLoopbackPort()
            let metricsPort = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: directory + "/data",
                arguments: [
                    "--socket", "127.0.0.1:\(socketPort)", "--metrics", "127.0.0.1:\(metricsPort)", "--tls-cert", certificate,
                    "--tls-key", key,
                ])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let line = #"{"message": {"token": "\#(token)", "data": {"over": "tls"}}}"#
            let script = """
                import socket, ssl, sys
                context = ssl.create_default_context(cafile=sys.argv[1])
                stream = context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[2]))), server_hostname="localhost")
                stream.sendall(sys.argv[3].encode() + b"\\n")
                print(stream.makefile("rb").readline().decode().strip(), flush=True)
                """
            let answer = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/python3"), ["-c", script, certificates.caFile, "\(socketPort)", line])
            #expect(answer.output.contains("projects/demo/messages/"), "\(answer.output) \(answer.error)")

            // Plain HTTP to the TLS port of /metrics: a refused handshake, counted on the page.
            let curl = URL(fileURLWithPath: "/usr/bin/curl")
            _ = try await runExecutable(curl, ["-sS", "-m", "10", "http://127.0.0.1:\(metricsPort)/metrics"])
            let page = await eventuallyValue { () -> String? in
                let scrape = try? await runExecutable(
                    curl, ["-sS", "-m", "10", "--cacert", certificates.caFile, "https://localhost:\(metricsPort)/metrics"])
                guard let output = scrape?.output, output.contains(#"herald_tls_handshake_failures_total{reason="refused"} 1"#) else {
                    return nil
                }
                return output
            }
            #expect(page != nil, "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "openssl s_time's clients, which end TCP without close_notify, leave no connection open on the daemon (TLS 1.3, and 1.2 reusing sessions)"
    )
    func sTimeLeavesNothingOpen() async throws {
        try await withTemporaryDirectory(prefix: "herald-tls") { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let (certificate, key) = try await certificates.issue(name: "server", serial: "8002")
            let metricsPort = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: directory + "/data",
                arguments: ["--socket", "none", "--metrics", "127.0.0.1:\(metricsPort)", "--tls-cert", certificate, "--tls-key", key])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            let port = daemon.httpPort
            let openssl = URL(fileURLWithPath: "/usr/bin/openssl")
            for variant in [["-new"], ["-reuse", "-tls1_2"]] {
                let run = try await onOwnThread {
                    try runExecutable(
                        openssl,
                        ["s_time", "-connect", "127.0.0.1:\(port)", "-CAfile", certificates.caFile, "-time", "2"] + variant)
                }
                #expect(run.status == 0, "\(run.output) \(run.error)")
                #expect(run.output.contains("connections in"), "\(run.output)")
            }
            let curl = URL(fileURLWithPath: "/usr/bin/curl")
            let metrics = "https://localhost:\(metricsPort)/metrics"
            let caFile = certificates.caFile
            let closed = await eventually {
                let scrape = try? await runExecutable(curl, ["-sS", "-m", "10", "--cacert", caFile, metrics])
                return scrape?.output.contains(#"herald_receiver_connections{receiver="http"} 0"#) == true
            }
            #expect(closed, "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }
}
