import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

@Suite("herald serve with NATS: the settings, the receiver, /healthz", .serialized)
struct ServeNATSTests {
    @Test(
        "herald serve --nats-server takes token messages from JetStream (one sent after a server restart too); /healthz and the health gauge follow the connection"
    )
    func serveWithNATS() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-serve-nats") { directory in
            let metricsPort = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: directory,
                arguments: [
                    "--nats-server", server.url, "--socket", "none", "--metrics", "127.0.0.1:\(metricsPort)", "--nats-stream", "FLEET",
                ])
            let (token, _) = try #require(await echoedToken(daemon), "no token line: \(daemon.log)")
            let client = try NATSPublisher(url: server.url)
            let id = try client.publishStored(NATSSubjects.token(project: "demo", token: token), body(token: token, n: 1))
            #expect(id.hasPrefix("nats-FLEET-"))
            let event = try #require(await daemon.event(), "no echo: \(daemon.log)")
            #expect(event["event"] == "message")
            #expect(event["messageID"]?.stringValue == id)
            #expect(event["userInfo"]?["n"] == "1")
            // The instance registered its token where a gateway looks.
            #expect(try client.isRegistered(token: token, project: "demo"))

            // /healthz: healthy while connected; 503 reconnecting while the server is away; healthy again after.
            let healthy = try httpRequest(port: metricsPort, "GET", "/healthz")
            #expect(healthy.status == 200)
            #expect(healthy.body.contains(#""nats":{"healthy":true,"state":"connected"}"#), "\(healthy.body)")
            #expect(try httpRequest(port: metricsPort, "GET", "/metrics").body.contains(#"herald_receiver_healthy{receiver="nats"} 1"#))
            server.stop()
            #expect(try await eventually { try httpRequest(port: metricsPort, "GET", "/healthz").status == 503 })
            let away = try httpRequest(port: metricsPort, "GET", "/healthz")
            #expect(away.body.contains(#""status":"unhealthy""#) && away.body.contains(#""state":"reconnecting""#), "\(away.body)")
            try server.start()
            #expect(try await eventually(timeout: .seconds(30)) { try httpRequest(port: metricsPort, "GET", "/healthz").status == 200 })
            // Stored while the instance was away or not: delivered after the reconnect.
            _ = try NATSPublisher(url: server.url).publishStored(
                NATSSubjects.token(project: "demo", token: token), body(token: token, n: 2))
            let after = try #require(await daemon.event(), "no echo after the restart: \(daemon.log)")
            #expect(after["userInfo"]?["n"] == "2")
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test(
        "serve's NATS settings: file keys, HERALD_NATS_* (servers separated by ','), flags, --print-config; bad values and gateway without NATS refused"
    )
    func settings() async throws {
        try await withTemporaryDirectory(prefix: "herald-serve-nats") { directory in
            let file = "\(directory)/herald.yaml"
            try """
            nats-servers: [nats://10.0.0.1:4222, tls://10.0.0.2:4222]
            nats-topic-delivery: shared:workers
            nats-ack-wait: 45
            nats-ping-interval: 5
            nats-token-file: /run/secrets/nats
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let printed = try await runBuiltExecutable(
                "herald", ["serve", "--config", file, "--print-config", "--nats-max-deliver", "5", "--nats-max-pings-out", "3"],
                environment: ["HERALD_NATS_STREAM": "MINE"])
            #expect(printed.status == 0, "\(printed.error)")
            #expect(
                printed.output.contains("nats-servers: [\"nats://10.0.0.1:4222\", \"tls://10.0.0.2:4222\"]")
                    || printed.output.contains("nats-servers: [nats://10.0.0.1:4222, tls://10.0.0.2:4222]"), "\(printed.output)")
            #expect(printed.output.contains("nats-topic-delivery: shared:workers"))
            #expect(printed.output.contains("nats-ack-wait: 45"))
            #expect(printed.output.contains("nats-stream: MINE  # environment HERALD_NATS_STREAM"))
            #expect(printed.output.contains("nats-max-deliver: 5  # flag --nats-max-deliver"))
            #expect(printed.output.contains("nats-ping-interval: 5  # config file"), "\(printed.output)")
            #expect(printed.output.contains("nats-max-pings-out: 3  # flag --nats-max-pings-out"))
            #expect(printed.output.contains("# nats-consumer: not set"))
            let servers = try await runBuiltExecutable(
                "herald", ["serve", "--print-config"], environment: ["HERALD_NATS_SERVERS": "nats://a:1,nats://b:2"])
            #expect(
                servers.output.contains("nats-servers: [nats://a:1, nats://b:2]")
                    || servers.output.contains(#"nats-servers: ["nats://a:1", "nats://b:2"]"#), "\(servers.output)")
            // A password in a server URL is not printed.
            let secret = try await runBuiltExecutable(
                "herald", ["serve", "--print-config", "--nats-server", "nats://fleet:hunter2@10.0.0.1:4222"])
            #expect(secret.status == 0, "\(secret.error)")
            #expect(secret.output.contains("nats://***@10.0.0.1:4222"), "\(secret.output)")
            #expect(!secret.output.contains("hunter2"))

            let badDelivery = try await runBuiltExecutable("herald", ["serve", "--print-config", "--nats-topic-delivery", "everyone"])
            #expect(badDelivery.status == 64)
            #expect(badDelivery.error.contains("flag --nats-topic-delivery: 'everyone' is not valid; allowed: fan-out"))
            let badPing = try await runBuiltExecutable("herald", ["serve", "--print-config", "--nats-ping-interval", "0"])
            #expect(badPing.status == 64)
            #expect(badPing.error.contains("--nats-ping-interval") && badPing.error.contains("1 to 3600"), "\(badPing.error)")
            let badPings = try await runBuiltExecutable(
                "herald", ["serve", "--print-config"], environment: ["HERALD_NATS_MAX_PINGS_OUT": "many"])
            #expect(badPings.status == 64)
            #expect(badPings.error.contains("HERALD_NATS_MAX_PINGS_OUT"), "\(badPings.error)")
            let badURL = try await runBuiltExecutable("herald", ["serve", "--print-config", "--nats-server", "http://x:1"])
            #expect(badURL.status == 64)
            #expect(badURL.error.contains("nats://HOST:PORT"))
            let gatewayAlone = try await runBuiltExecutable("herald", ["serve", "--gateway", "--print-config"])
            #expect(gatewayAlone.status == 64)
            #expect(gatewayAlone.error.contains("gateway mode needs NATS servers"))
            let missingToken = try await runBuiltExecutable(
                "herald",
                [
                    "serve", "--data-dir", "\(directory)/data", "--nats-server", "nats://127.0.0.1:1", "--nats-token-file",
                    "\(directory)/missing",
                ])
            #expect(missingToken.status != 0)
            #expect(missingToken.error.contains("cannot read the NATS token file \(directory)/missing"))
        }
    }
}
