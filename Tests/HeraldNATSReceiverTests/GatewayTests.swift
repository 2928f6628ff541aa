import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// `herald serve --gateway` as a child, on a free port, with the bearer secret `secret`.
func startGateway(
    server: any TestNATSServer, directory: String, secret: String, metricsPort: Int? = nil, extraArguments: [String] = []
) async throws -> DaemonProcess {
    let secretFile = "\(directory)/secret"
    try secret.write(toFile: secretFile, atomically: true, encoding: .utf8)
    var arguments = ["--gateway", "--nats-server", server.url, "--socket", "none", "--auth-token-file", secretFile]
    if let metricsPort { arguments += ["--metrics", "127.0.0.1:\(metricsPort)"] }
    arguments += extraArguments
    let gateway = try await DaemonProcess.start(directory: "\(directory)/gateway", arguments: arguments, echo: false)
    // Ready once it printed its own token (it is not an instance of the fleet, but it is a Herald).
    guard let line = await gateway.line(), line.hasPrefix("registration token: ") else {
        throw NATSTestError.client("the gateway did not start: \(gateway.log)")
    }
    return gateway
}

@Suite("Gateway mode: herald serve --gateway passes FCM v1 sends on to the fleet through NATS", .serialized)
struct GatewayTests {
    @Test(
        "an unmodified Admin SDK app server sends and manages topics through a gateway's FCM proxy, with a service-account file the gateway issued"
    )
    func adminSDKThroughGatewayProxy() async throws {
        let python = try pythonEnvironment(with: "firebase-admin")
        let server = try NATSServerProcess()
        let a = try FleetInstance(server: server)
        try await withFleet([a]) {
            try await withTemporaryDirectory(prefix: "herald-gateway") { directory in
                let account = "\(directory)/service-account.json"
                let created = try await runBuiltExecutable(
                    "herald", ["credentials", "create", "--data-dir", "\(directory)/gateway", "--out", account, "--project-id", "demo"])
                #expect(created.status == 0, "\(created.error)")
                let ca = try await runBuiltExecutable("herald", ["credentials", "ca", "--data-dir", "\(directory)/gateway"])
                let caFile = ca.output.trimmingCharacters(in: .whitespacesAndNewlines)
                let gateway = try await startGateway(
                    server: server, directory: directory, secret: "gateway-secret", extraArguments: ["--fcm-proxy"])
                let token = try await a.token()
                let proxy = "http://127.0.0.1:\(gateway.httpPort)"
                let arguments = [
                    repositoryRoot.appendingPathComponent("Tests/AdminSDK/proxy_check.py").path, "--credentials", account, "--token", token,
                    "--gateway",
                ]
                let environment = [
                    "HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": "", "no_proxy": "", "REQUESTS_CA_BUNDLE": caFile,
                    "SSL_CERT_FILE": caFile,
                ]
                let result = try await runExecutable(python, arguments, environment: environment)
                #expect(
                    result.status == 0, "proxy_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)\n\(gateway.log)")
                #expect(
                    result.output.contains(
                        #"delivered: ["multicast", "send", "send-each-1", "send-each-2", "send-notification", "topic-news"]"#))
                // The collector takes data messages (the notification goes to the presenter).
                let expected = ["multicast", "send", "send-each-1", "send-each-2", "topic-news"]
                @Sendable func checks() -> [String] {
                    a.collector.messages.withLock { $0.compactMap { $0.userInfo["check"]?.stringValue } }.sorted()
                }
                #expect(await eventually { checks() == expected }, "\(checks())")
                #expect(await gateway.terminate() == 0, "\(gateway.log)")
            }
        }
    }

    @Test(
        "the Firebase Admin SDK for Python sends through the gateway: tokens reach their instance only, topics the subscribed ones; unknown tokens are UNREGISTERED; subscribe_to_topic and the legacy batch calls change each token's instance"
    )
    func adminSDKThroughGateway() async throws {
        let python = try pythonEnvironment(with: "firebase-admin")
        let server = try NATSServerProcess()
        let a = try FleetInstance(server: server)
        let b = try FleetInstance(server: server)
        try await withFleet([a, b]) {
            try await a.subscribe("news")
            try await a.subscribe("all")
            try await b.subscribe("all")
            try await withTemporaryDirectory(prefix: "herald-gateway") { directory in
                let gateway = try await startGateway(server: server, directory: directory, secret: "gateway-secret")
                let (tokenA, tokenB, fidA) = (try await a.token(), try await b.token(), try await a.herald.installationID())
                let script = repositoryRoot.appendingPathComponent("Tests/AdminSDK/gateway_check.py").path
                let arguments = [
                    script, "--url", "http://127.0.0.1:\(gateway.httpPort)", "--secret", "gateway-secret", "--project", "demo",
                    "--token-a", tokenA, "--token-b", tokenB, "--fid-a", fidA,
                ]
                let result = try await runExecutable(python, arguments)
                #expect(
                    result.status == 0, "gateway_check.py failed (exit \(result.status)):\n\(result.output)\(result.error)\n\(gateway.log)")

                func claimed(_ prefix: String) throws -> [String] {
                    let line = result.output.split(separator: "\n").last { $0.hasPrefix(prefix) }
                    return try line.map { try JSONParser.parse(Array($0.dropFirst(prefix.count).utf8)) }?.arrayValue?.compactMap(
                        \.stringValue) ?? []
                }
                let expectedA = try claimed("delivered-a: ")
                let expectedB = try claimed("delivered-b: ")
                #expect(expectedA == ["each-a", "fid-a", "token-a", "topic-all", "topic-gw", "topic-gw-2", "topic-legacy", "topic-news"])
                #expect(expectedB == ["each-b", "token-b", "topic-all", "topic-gw"])
                @Sendable func checks(_ instance: FleetInstance) -> [String] {
                    instance.collector.messages.withLock { $0.compactMap { $0.userInfo["check"]?.stringValue } }.sorted()
                }
                #expect(await eventually { checks(a) == expectedA && checks(b) == expectedB })
                try await a.herald.waitUntilIdle()
                try await b.herald.waitUntilIdle()
                // Nothing else arrives (the dry run, the refused ones): exactly what was claimed, once each.
                #expect(checks(a) == expectedA)
                #expect(checks(b) == expectedB)
                #expect(await gateway.terminate() == 0, "\(gateway.log)")
            }
        }
    }

    @Test(
        "gateway answers: ID after JetStream storage, 404 UNREGISTERED, 400 for a condition, 501 for the APNs route, 503 UNAVAILABLE while NATS is down, /healthz"
    )
    func answers() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await withTemporaryDirectory(prefix: "herald-gateway") { directory in
                let metricsPort = try freeLoopbackPort()
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret", metricsPort: metricsPort)
                let port = gateway.httpPort
                let token = try await instance.token()
                let send = "/v1/projects/demo/messages:send"

                let stored = try httpRequest(port: port, "POST", send, body: body(token: token, n: 1), secret: "s3cret")
                #expect(stored.status == 200, "\(stored.body)")
                #expect(stored.body.contains(#""name":"projects/demo/messages/nats-HERALD_DEMO-"#), "\(stored.body)")
                #expect(await eventually { instance.collector.numbers == ["1"] })
                let id = try #require(instance.collector.messages.withLock { $0.first?.messageID })
                #expect(stored.body.contains(id))

                let unknown = try httpRequest(port: port, "POST", send, body: body(token: "nobody:x", n: 2), secret: "s3cret")
                #expect(unknown.status == 404)
                #expect(unknown.body.contains(#""status":"NOT_FOUND""#) || unknown.body.contains("UNREGISTERED"), "\(unknown.body)")
                let condition = try httpRequest(
                    port: port, "POST", send, body: #"{"message": {"condition": "'a' in topics"}}"#, secret: "s3cret")
                #expect(condition.status == 400)
                #expect(condition.body.contains("does not evaluate conditions"))
                let invalid = try httpRequest(port: port, "POST", send, body: #"{"message": {"token": "t", "bogus": 1}}"#, secret: "s3cret")
                #expect(invalid.status == 400)
                #expect(try httpRequest(port: port, "POST", send, body: body(token: token, n: 3)).status == 401)
                let apns = try httpRequest(port: port, "POST", "/3/device/\(token)", body: #"{"aps": {}}"#, secret: "s3cret")
                #expect(apns.status == 501)
                #expect(apns.body.contains("UNIMPLEMENTED"))
                let validateOnly = try httpRequest(
                    port: port, "POST", send, body: #"{"validate_only": true, "message": {"token": "\#(token)", "data": {"n": "4"}}}"#,
                    secret: "s3cret")
                #expect(validateOnly.status == 200)
                #expect(
                    try httpRequest(port: metricsPort, "GET", "/healthz").body.contains(
                        #""nats-gateway":{"healthy":true,"state":"connected"}"#))

                // NATS away: 503 UNAVAILABLE at once, /healthz 503; the gateway keeps running and recovers.
                server.stop()
                #expect(try await eventually { try httpRequest(port: metricsPort, "GET", "/healthz").status == 503 })
                let down = try httpRequest(port: port, "POST", send, body: body(token: token, n: 5), secret: "s3cret")
                #expect(down.status == 503, "\(down.body)")
                #expect(down.body.contains("UNAVAILABLE"))
                try server.start()
                #expect(try await eventually(timeout: .seconds(30)) { try httpRequest(port: metricsPort, "GET", "/healthz").status == 200 })
                #expect(await eventually(timeout: .seconds(30)) { instance.receiver.state == .connected })
                let again = try httpRequest(port: port, "POST", send, body: body(token: token, n: 6), secret: "s3cret")
                #expect(again.status == 200, "\(again.body)")
                #expect(await eventually { instance.collector.numbers == ["1", "6"] })
                #expect(await gateway.terminate() == 0, "\(gateway.log)")
            }
        }
    }

    @Test(
        "a gateway started before any instance: UNREGISTERED while the registrations bucket does not exist, then the first instance's token is accepted"
    )
    func gatewayBeforeFleet() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-gateway") { directory in
            let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
            let send = "/v1/projects/demo/messages:send"
            #expect(
                try httpRequest(port: gateway.httpPort, "POST", send, body: body(token: "nobody:x", n: 1), secret: "s3cret").status == 404)
            let instance = try FleetInstance(server: server)
            try await withFleet([instance]) {
                let token = try await instance.token()
                // The gateway's watch of the registrations bucket sees the new instance within moments.
                let port = gateway.httpPort
                #expect(
                    try await eventually {
                        try httpRequest(port: port, "POST", send, body: body(token: token, n: 2), secret: "s3cret").status == 200
                    })
                #expect(await eventually { instance.collector.numbers == ["2"] })
            }
            #expect(await gateway.terminate() == 0, "\(gateway.log)")
        }
    }

    @Test(
        "two gateways are interchangeable: one SIGKILLed mid-campaign, the sender's retries to the other succeed, each message handled once; an unknown token is answered from the watched bucket"
    )
    func twoGateways() async throws {
        let server = try NATSServerProcess()
        let instances = try (0..<3).map { _ in try FleetInstance(server: server) }
        try await withFleet(instances) {
            try await withTemporaryDirectory(prefix: "herald-gateways") { directory in
                for name in ["one", "two"] {
                    try FileManager.default.createDirectory(atPath: "\(directory)/\(name)", withIntermediateDirectories: true)
                }
                let one = try await startGateway(server: server, directory: "\(directory)/one", secret: "s3cret")
                let two = try await startGateway(server: server, directory: "\(directory)/two", secret: "s3cret")
                let ports = [one.httpPort, two.httpPort]
                let tokens = try await instances.asyncMap { try await $0.token() }
                let send = "/v1/projects/demo/messages:send"
                let total = 600
                let answered = Locked<[Int: String]>([:])
                let refused = Locked(0)
                // Four senders behind a round-robin "balancer": a send that fails (connection refused or reset, 503)
                // is retried on the next gateway, with the same body.
                let campaign = Task {
                    await onThreads(4) { sender in
                        for n in stride(from: sender, to: total, by: 4) {
                            for attempt in 0..<20 {
                                let port = ports[(n + attempt) % 2]
                                if let answer = try? httpRequest(
                                    port: port, "POST", send, body: body(token: tokens[n % 3], n: n), secret: "s3cret"),
                                    answer.status == 200
                                {
                                    answered.withLock { $0[n] = answer.body }
                                    break
                                }
                                refused.withLock { $0 += 1 }
                            }
                        }
                    }
                }
                #expect(await eventually { answered.withLock { $0.count } >= 200 })
                kill(one.process.processIdentifier, SIGKILL)
                await campaign.value
                #expect(answered.withLock { $0.count } == total)
                #expect(
                    await eventually {
                        instances.map { $0.collector.numbers.count }.reduce(0, +) >= total
                    })
                for instance in instances { try await instance.herald.waitUntilIdle() }
                for (index, instance) in instances.enumerated() {
                    let numbers = instance.collector.numbers
                    #expect(numbers.count == Set(numbers).count, "instance \(index) handled a message twice")
                    #expect(Set(numbers) == Set(stride(from: index, to: total, by: 3).map(String.init)))
                }
                print("two gateways, one SIGKILLed after 200 of \(total) sends: \(refused.withLock { $0 }) sends retried on the other")

                // The registrations are a watched copy: with the NATS server frozen, an unknown token is still answered.
                server.pause()
                let unknown = try httpRequest(port: two.httpPort, "POST", send, body: body(token: "nobody:x", n: 1), secret: "s3cret")
                server.resume()
                #expect(unknown.status == 404, "\(unknown.body)")
                #expect(await two.terminate() == 0, "\(two.log)")
            }
        }
    }
}
