import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldNATSReceiver
import HeraldSQLite
import HeraldTLS
import HeraldTesting
import HeraldUnifiedPush
import Testing

/// UnifiedPush through the fleet: a real nats-server, a gateway taking `POST /up/{token}`, an instance behind it with
/// the distributor on a private bus, and the Python app registered with that instance.
@Suite("UnifiedPush through the gateway")
struct FleetTests {
    /// The endpoint URL prefix the gateway is reached at (the audience of VAPID tokens).
    static let gatewayEndpointURL = "https://push.example.org/up/"

    /// Runs a gateway and an instance on `nats`; `body` gets the gateway's base URL.
    static func withFleet(_ world: UnifiedPushWorld, nats: NATSServerProcess, _ body: (String) async throws -> Void) async throws {
        let natsOptions = NATSReceiver.Options(servers: [nats.url])
        let gatewayStore = try SQLiteStore(directory: world.directory + "/gateway")
        let gateway = NATSGateway(options: natsOptions, webPushEndpointURL: gatewayEndpointURL)
        var receiverOptions = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        receiverOptions.forwarder = gateway
        receiverOptions.webPush = gateway
        let receiver = HTTPReceiver(options: receiverOptions)
        let gatewayHerald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: gatewayStore)

        let store = try SQLiteStore(directory: world.dataDirectory)
        var distributorOptions = UnifiedPushDistributor.Options(endpointURL: gatewayEndpointURL, busAddress: world.bus.address)
        distributorOptions.reconnectDelay = .milliseconds(50)
        let distributor = UnifiedPushDistributor(options: distributorOptions, store: store)
        let relay = NATSWebPushRelay(options: natsOptions, endpoint: distributor)
        let instance = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store)

        try await withStarted(gatewayHerald, plugins: [gateway, receiver]) { _ in
            try await withStarted(instance, plugins: [distributor, relay]) { instance in
                let owned = try await eventually { try await instance.loop.submit { distributor.ownsName } }
                try #require(owned, "the distributor did not get its name on the bus")
                let port = try #require(try await receiver.listeningAddress()?.port)
                try await body("http://127.0.0.1:\(port)")
            }
        }
    }

    @Test(
        "register with the instance, POST to the gateway, the app gets the Message; bad input refused at the gateway; unregister, then 404")
    func pushThroughGateway() async throws {
        let nats = try NATSServerProcess()
        let world = try UnifiedPushWorld()
        try await world.startBus()
        try await Self.withFleet(world, nats: nats) { base in
            let app = try world.app("org.example.FleetApp", version: 2, register: "fleet")
            let endpoint = try #require(try await app.next("endpoint")["endpoint"])
            #expect(endpoint.hasPrefix(Self.gatewayEndpointURL))
            let url = "\(base)/up/\(try endpointToken(endpoint))"

            // The instance writes the endpoint to the bucket once registered: until then the gateway answers 404.
            let location = Locked<String?>(nil)
            let accepted = try await eventually {
                let answer = try await post(url, Array("hello".utf8), in: world.directory)
                location.withLock { $0 = answer.headers["location"] }
                return answer.status == 201
            }
            try #require(accepted, "the gateway never took a push to the endpoint")
            let message = try await app.next("message")
            #expect(message["body"] == Array("hello".utf8).hex)
            #expect(location.withLock { $0 }?.hasSuffix("/" + (message["id"] ?? "?")) == true, "Location names the message the app got")
            // The instance acknowledged it to JetStream (work-queue retention: the stream forgets it), and one it cannot
            // read is acknowledged and dropped, not offered forever.
            let client = try NATSPublisher(options: NATSReceiver.Options(servers: [nats.url]), timeout: .seconds(30))
            let stream = NATSSubjects.webPushStreamName(project: "herald")
            let bucket = NATSSubjects.webPushBucket(project: "herald")
            let instanceID = try #require(await eventuallyValue { try client.value(key: try endpointToken(endpoint), bucket: bucket) })
            _ = try client.publishStored(
                NATSSubjects.webPush(project: "herald", instance: instanceID, endpoint: try endpointToken(endpoint)),
                body: Array("junk".utf8))
            let drained = try await eventually { try client.storedMessages(stream: stream) == 0 }
            #expect(drained, "the instance left pushes unacknowledged in \(stream)")

            // Bad input, refused by the gateway itself.
            @Sendable func status(_ body: [UInt8], _ headers: [String], to target: String = url) async throws -> Int {
                try await post(target, body, headers: headers, in: world.directory).status
            }
            #expect(try await status([UInt8](repeating: 1, count: 4097), ["TTL: 60"]) == 413)
            #expect(try await status(Array("x".utf8), ["TTL: soon"]) == 400)
            #expect(try await status(Array("x".utf8), ["TTL: 60", "Urgency: urgent"]) == 400)
            #expect(try await status(Array("x".utf8), ["TTL: 60", "Topic: not a topic!"]) == 400)
            #expect(try await status(Array("x".utf8), ["TTL: 60"], to: "\(base)/up/0123456789abcdef0123456789abcdef") == 404)
            #expect(try await status(Array("x".utf8), ["TTL: 60"], to: "\(base)/up/a.b") == 404)

            // Urgency and Topic pass through the fleet too.
            #expect(try await status(Array("second".utf8), ["TTL: 60", "Urgency: high", "Topic: news"]) == 201)
            #expect(try await app.next("message")["body"] == Array("second".utf8).hex)
            #expect(app.messages.count == 2)

            app.send("unregister fleet")
            #expect(try await app.next("unregistered")["token"] == "fleet")
            let gone = try await eventually { try await status(Array("late".utf8), ["TTL: 60"]) == 404 }
            #expect(gone, "the gateway still takes pushes to an unregistered endpoint")
        }
    }

    @Test(
        "a push JetStream offers again after the instance handed it over (its acknowledgement lost) reaches the app once")
    func redeliveredOnce() async throws {
        let nats = try NATSServerProcess()
        let world = try UnifiedPushWorld()
        try await world.startBus()
        try await Self.withFleet(world, nats: nats) { _ in
            let app = try world.app("org.example.FleetApp", version: 2, register: "again")
            let endpoint = try #require(try await app.next("endpoint")["endpoint"])
            let token = try endpointToken(endpoint)
            let client = try NATSPublisher(options: NATSReceiver.Options(servers: [nats.url]), timeout: .seconds(30))
            let bucket = NATSSubjects.webPushBucket(project: "herald")
            let written = try await eventuallyValue { try client.value(key: token, bucket: bucket) }
            let instanceID = try #require(written, "the instance never wrote its endpoint to \(bucket)").split(separator: " ")[0]
            let subject = NATSSubjects.webPush(project: "herald", instance: String(instanceID), endpoint: token)
            let stream = NATSSubjects.webPushStreamName(project: "herald")
            // As the gateway publishes a push (a new JetStream message ID each time, so that the stream keeps both):
            // the same push twice, the second after the first was handed over and acknowledged.
            func push(_ id: String, _ body: String) throws {
                let sent = Int64(Date().timeIntervalSince1970 * 1000)
                _ = try client.publishStored(subject, body: Array("id \(id)\nttl 600\nurgency normal\nsent \(sent)\n\n\(body)".utf8))
            }
            try push("offered-twice", "first")
            #expect(try await app.next("message")["id"] == "offered-twice")
            let acknowledged = try await eventually { try client.storedMessages(stream: stream) == 0 }
            try #require(acknowledged)
            try push("offered-twice", "first")
            let drained = try await eventually { try client.storedMessages(stream: stream) == 0 }
            #expect(drained, "the push offered again was not acknowledged")
            try push("after", "second")
            #expect(try await app.next("message")["id"] == "after")
            #expect(app.messages.map { $0["id"] ?? "?" } == ["offered-twice", "after"])
        }
    }

    @Test("a VAPID-restricted endpoint: the gateway answers 401 without a token, 403 with a wrong one, 201 with a valid one")
    func vapidAtGateway() async throws {
        let nats = try NATSServerProcess()
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let server = try P256PrivateKey()
        let other = try P256PrivateKey()
        try await Self.withFleet(world, nats: nats) { base in
            let app = try world.app(
                "org.example.FleetVapid", version: 2, register: "v", options: ["--vapid", server.publicKey.x963Representation.base64URL])
            let url = "\(base)/up/\(try endpointToken(try await app.next("endpoint")["endpoint"]))"
            let audience = "https://push.example.org"
            @Sendable func status(_ headers: [String]) async throws -> Int {
                try await post(url, Array("push".utf8), headers: ["TTL: 60"] + headers, in: world.directory).status
            }
            let known = try await eventually { try await status([]) == 401 }
            try #require(known, "the gateway never learned the endpoint")
            #expect(try await status([try VAPIDTests.authorization(signer: other, audience: audience)]) == 403)
            #expect(try await status([try VAPIDTests.authorization(signer: server, audience: "http://127.0.0.1:8080")]) == 403)
            #expect(app.messages.isEmpty)
            #expect(try await status([try VAPIDTests.authorization(signer: server, audience: audience)]) == 201)
            #expect(try await app.next("message")["body"] == Array("push".utf8).hex)
        }
    }

    @Test(
        "herald serve --gateway and herald serve --unifiedpush with NATS: pushes POSTed to the gateway reach the app; unregistered offline, 404 once the instance is back"
    )
    func serveGatewayAndInstance() async throws {
        let fleet = try await ServedFleet.start()
        let (world, gateway, endpointURL) = (fleet.world, fleet.gateway, fleet.endpointURL)
        func serveInstance() async throws -> DaemonProcess { try await fleet.serveInstance() }
        let instance = try await serveInstance()
        let owned = try await eventually { try await world.distributorOwnsName() }
        try #require(owned, "the instance did not own the distributor's name: \(instance.log)")

        let app = try world.app("org.example.FleetServed", version: 1, register: "served")
        let endpoint = try #require(try await app.next("endpoint")["endpoint"])
        #expect(endpoint.hasPrefix(endpointURL))
        let accepted = try await eventually { try await post(endpoint, Array("first".utf8), in: world.directory).status == 201 }
        try #require(accepted, "gateway: \(gateway.log)\ninstance: \(instance.log)")
        #expect(try await app.next("message")["body"] == Array("first".utf8).hex)

        // POST-to-Message through the gateway, one push at a time (printed, not asserted).
        var latencies: [Duration] = []
        for index in 0..<40 {
            let started = ContinuousClock.now
            #expect(try await post(endpoint, Array("push \(index)".utf8), in: world.directory).status == 201)
            #expect(try await app.next("message")["body"] == Array("push \(index)".utf8).hex)
            latencies.append(ContinuousClock.now - started)
        }
        latencies.sort()
        print("UnifiedPush through the gateway, POST to Message (curl included): p50 \(latencies[20]), max \(latencies[39])")

        let stoppedInstance = Sendably(instance)
        #expect(try await onOwnThread { stoppedInstance.value.terminate() } == 0)

        // Unregistered offline, the endpoint leaves the bucket when the instance is back (no push needed to find out),
        // and the gateway answers 404.
        let token = try endpointToken(endpoint)
        let dropped = try await onOwnThread {
            try runExecutable(heraldExecutable, ["up", "unregister", "--data-dir", world.dataDirectory, token])
        }
        #expect(dropped.status == 0, "\(dropped.error)")
        let again = try await serveInstance()
        #expect(try await app.next("unregistered")["token"] == "served", "\(again.log)")
        let client = try NATSPublisher(options: NATSReceiver.Options(servers: [fleet.nats.url]), timeout: .seconds(30))
        let left = try await eventually { try client.value(key: token, bucket: NATSSubjects.webPushBucket(project: "herald")) == nil }
        #expect(left, "the endpoint unregistered offline is still in the bucket: \(again.log)")
        #expect(try await post(endpoint, Array("late".utf8), in: world.directory).status == 404)
        #expect(app.messages.count == 41)
        let stoppedAgain = Sendably(again)
        #expect(try await onOwnThread { stoppedAgain.value.terminate() } == 0)
        let stoppedGateway = Sendably(gateway)
        #expect(try await onOwnThread { stoppedGateway.value.terminate() } == 0)
    }

    @Test(
        "through the fleet: a push the instance took while the app was away survives the instance's SIGKILL and is handed over once after restart"
    )
    func fleetKillRestart() async throws {
        let fleet = try await ServedFleet.start()
        let (world, gateway) = (fleet.world, fleet.gateway)
        func serveInstance() async throws -> DaemonProcess {
            let instance = try await fleet.serveInstance()
            let owned = try await eventually { try await world.distributorOwnsName() }
            try #require(owned, "the instance did not own the distributor's name: \(instance.log)")
            return instance
        }
        var instance = try await serveInstance()
        // Connector1: a push counts as handed over once sent (a Connector2 app stopped between taking a push and
        // answering would be offered it again, with the same ID).
        let app = try world.app("org.example.FleetKilled", version: 1, register: "killed")
        let endpoint = try #require(try await app.next("endpoint")["endpoint"])
        let accepted = try await eventually { try await post(endpoint, Array("first".utf8), in: world.directory).status == 201 }
        try #require(accepted, "gateway: \(gateway.log)\ninstance: \(instance.log)")
        #expect(try await app.next("message")["body"] == Array("first".utf8).hex)

        try await app.stopped()
        #expect(try await post(endpoint, Array("while away".utf8), in: world.directory).status == 201)
        // The instance took it from JetStream (its work queue is empty again): it is in the instance's store only.
        let client = try NATSPublisher(options: NATSReceiver.Options(servers: [fleet.nats.url]), timeout: .seconds(30))
        let stream = NATSSubjects.webPushStreamName(project: "herald")
        let taken = try await eventually { try client.storedMessages(stream: stream) == 0 }
        try #require(taken, "the instance never took the push from \(stream): \(instance.log)")
        kill(instance.process.processIdentifier, SIGKILL)
        let killed = Sendably(instance)
        try await onOwnThread { waitForExit(killed.value.process) }

        instance = try await serveInstance()
        let back = try world.app("org.example.FleetKilled", version: 1)
        #expect(try await back.next("message")["body"] == Array("while away".utf8).hex, "\(instance.log)")
        let marked = try await eventually { try await post(endpoint, Array("marker".utf8), in: world.directory).status == 201 }
        #expect(marked, "gateway: \(gateway.log)")
        #expect(try await back.next("message")["body"] == Array("marker".utf8).hex)
        #expect(back.messages.count == 2, "handed over more than once")
        let stopped = Sendably(instance)
        #expect(try await onOwnThread { stopped.value.terminate() } == 0)
        let stoppedGateway = Sendably(gateway)
        #expect(try await onOwnThread { stoppedGateway.value.terminate() } == 0)
    }
}

/// A `herald serve --gateway` on a nats-server of its own, and the instance behind it: `herald serve --unifiedpush`,
/// started (and started again) by ``serveInstance()`` with the same port and data directory, on the world's bus.
private struct ServedFleet {
    let nats: NATSServerProcess
    let world: UnifiedPushWorld
    let gateway: DaemonProcess
    /// The endpoints' URL prefix: the gateway's `/up/`.
    let endpointURL: String
    let instancePort: Int

    static func start() async throws -> ServedFleet {
        let nats = try NATSServerProcess()
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let gatewayPort = try freeLoopbackPort()
        let endpointURL = "http://127.0.0.1:\(gatewayPort)/up/"
        let gatewayData = world.directory + "/gateway"
        let gateway = try await DaemonProcess.start(
            directory: gatewayData, httpPort: gatewayPort,
            arguments: [
                "serve", "--gateway", "--nats-server", nats.url, "--http", "127.0.0.1:\(gatewayPort)", "--data-dir", gatewayData,
                "--socket", "none", "--unifiedpush-endpoint-url", endpointURL,
            ])
        return ServedFleet(nats: nats, world: world, gateway: gateway, endpointURL: endpointURL, instancePort: try freeLoopbackPort())
    }

    func serveInstance() async throws -> DaemonProcess {
        try await DaemonProcess.start(
            directory: world.dataDirectory, httpPort: instancePort,
            arguments: [
                "serve", "--unifiedpush", "--nats-server", nats.url, "--http", "127.0.0.1:\(instancePort)", "--data-dir",
                world.dataDirectory, "--socket", "none", "--unifiedpush-endpoint-url", endpointURL,
            ],
            environment: ["DBUS_SESSION_BUS_ADDRESS": world.bus.address])
    }
}
