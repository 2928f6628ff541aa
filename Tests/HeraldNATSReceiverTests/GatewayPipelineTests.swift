import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// `herald serve --gateway` answering many sends at once without a blocking round trip each: JetStream's
/// acknowledgements pipelined on one connection, core publishes answered after a flush they share.
@Suite("Gateway pipelining: many sends in flight at once, each answered only once stored", .serialized)
struct GatewayPipelineTests {
    static let send = "/v1/projects/demo/messages:send"

    /// Sends `body(n)` for every `n` in `numbers` from `connections` threads at once (a connection each per send), and
    /// records each answer's status and body (status 0: no answer).
    static func burst(
        port: Int, numbers: Range<Int>, connections: Int, answers: Locked<[Int: (status: Int, body: String)]>,
        body: @escaping @Sendable (Int) -> String
    ) async {
        await onThreads(connections) { sender in
            for n in stride(from: numbers.lowerBound + sender, to: numbers.upperBound, by: connections) {
                let answer = (try? httpRequest(port: port, "POST", send, body: body(n), secret: "s3cret")) ?? (0, "no answer")
                answers.withLock { $0[n] = answer }
            }
        }
    }

    /// The message ID a send was answered with (`projects/demo/messages/<id>`).
    static func messageID(_ body: String) -> String? {
        guard let range = body.range(of: #""name":"projects/demo/messages/"#) else { return nil }
        return String(body[range.upperBound...].prefix { $0 != "\"" })
    }

    @Test("2,000 token sends over 32 connections at once: each answered 200 with its stored ID, each handled once by the instance")
    func tokenBurst() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await withTemporaryDirectory(prefix: "herald-gateway-burst") { directory in
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
                let token = try await instance.token()
                let total = 2000
                let answers = Locked<[Int: (status: Int, body: String)]>([:])
                await Self.burst(port: gateway.httpPort, numbers: 0..<total, connections: 32, answers: answers) {
                    body(token: token, n: $0)
                }
                let all = answers.withLock { $0 }
                #expect(all.count == total)
                let refused = all.filter { $0.value.status != 200 }
                #expect(refused.isEmpty, "\(refused.prefix(3))")
                // Each ID is the stored message's: the stream, a sequence of its own, the send's Nats-Msg-Id.
                let ids = all.values.compactMap { Self.messageID($0.body) }
                #expect(ids.count == total)
                #expect(ids.allSatisfy { $0.hasPrefix("nats-HERALD_DEMO-") })
                let sequences = Set(ids.compactMap { $0.split(separator: "-").dropFirst(2).first.flatMap { UInt64($0) } })
                #expect(sequences.count == total, "every send stored as a message of its own")
                #expect(await eventually { instance.collector.numbers.count >= total })
                try await instance.herald.waitUntilIdle()
                let numbers = instance.collector.numbers
                #expect(numbers.count == total, "each send handled once")
                #expect(Set(numbers) == Set((0..<total).map(String.init)))
                let handledIDs = Set(instance.collector.messages.withLock { $0.compactMap(\.messageID) })
                #expect(handledIDs == Set(ids), "the instance gives each message the ID its sender was answered with")
                #expect(await gateway.terminate() == 0)
            }
        }
    }

    @Test(
        "nats-server SIGKILLed mid-burst and restarted on its store: each send is answered 200 (and handled once the server is back) or 503, never 200 and lost"
    )
    func serverKilledMidBurst() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await withTemporaryDirectory(prefix: "herald-gateway-kill") { directory in
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
                let token = try await instance.token()
                let total = 4000
                let answers = Locked<[Int: (status: Int, body: String)]>([:])
                let port = gateway.httpPort
                // The server is killed by the sender that finds 400 sends answered, before its next send: mid-burst
                // however the machine's load paces the senders (a test task polling for it could be late enough to
                // see the whole burst answered first).
                let killed = Locked(false)
                await Self.burst(port: port, numbers: 0..<total, connections: 32, answers: answers) { n in
                    let killNow =
                        answers.withLock { $0.count } >= 400
                        && killed.withLock { done in
                            defer { done = true }
                            return !done
                        }
                    if killNow { server.kill() }
                    return body(token: token, n: n)
                }
                #expect(killed.withLock { $0 })
                try server.start()
                // Sends once the gateway is back: 200 again.
                #expect(
                    try await eventually(timeout: .seconds(30)) {
                        try httpRequest(port: port, "POST", Self.send, body: body(token: token, n: total), secret: "s3cret").status == 200
                    })
                let all = answers.withLock { $0 }
                let stored = Set(all.filter { $0.value.status == 200 }.keys)
                let refused = Set(all.filter { $0.value.status == 503 }.keys)
                #expect(stored.count + refused.count == total, "every send answered 200 or 503")
                #expect(stored.count >= 400)
                #expect(!refused.isEmpty, "the sends while the server was away were refused")
                // Every send answered 200 reaches the instance once the server is back (from its store).
                @Sendable func handled() -> Set<Int> { Set(instance.collector.numbers.compactMap { Int($0) }) }
                #expect(
                    await eventually(timeout: .seconds(60)) { stored.isSubset(of: handled()) },
                    "\(stored.subtracting(handled()).count) lost")
                try await instance.herald.waitUntilIdle()
                let numbers = instance.collector.numbers
                #expect(numbers.count == Set(numbers).count, "no send handled twice")
                #expect(handled().isSubset(of: Set(0...total)))
                print(
                    "nats-server SIGKILLed mid-burst: \(stored.count) sends answered 200, \(refused.count) 503; \(handled().subtracting(stored).count) of the 503s were stored all the same"
                )
                #expect(await gateway.terminate() == 0)
            }
        }
    }

    @Test(
        "500 topic sends over 16 connections at once, on core NATS: each answered 200 after a flush, and the subscribed instance gets each")
    func topicBurst() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            try await withTemporaryDirectory(prefix: "herald-gateway-topics") { directory in
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
                let total = 500
                let answers = Locked<[Int: (status: Int, body: String)]>([:])
                await Self.burst(port: gateway.httpPort, numbers: 0..<total, connections: 16, answers: answers) {
                    body(topic: "news", n: $0)
                }
                let all = answers.withLock { $0 }
                #expect(all.count == total)
                #expect(all.values.allSatisfy { $0.status == 200 }, "\(all.values.filter { $0.status != 200 }.prefix(3))")
                #expect(await eventually { instance.collector.numbers.count >= total })
                try await instance.herald.waitUntilIdle()
                #expect(instance.collector.numbers.sorted() == (0..<total).map(String.init).sorted())
                #expect(await gateway.terminate() == 0)
            }
        }
    }

    @Test(
        "nats-server frozen (SIGSTOP): token sends in flight get no acknowledgement, topic sends no marker back; each answered 503 at the request timeout, not before; the server back, both are answered 200"
    )
    func noAcknowledgement() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            try await withTemporaryDirectory(prefix: "herald-gateway-frozen") { directory in
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
                let token = try await instance.token()
                let port = gateway.httpPort
                #expect(try httpRequest(port: port, "POST", Self.send, body: body(token: token, n: 0), secret: "s3cret").status == 200)
                // A topic send first: the gateway then knows for 5 s that no stream takes topics (so the frozen
                // server below is not asked), and the sends below are core publishes answered by a marker.
                #expect(try httpRequest(port: port, "POST", Self.send, body: body(topic: "news", n: 0), secret: "s3cret").status == 200)
                server.pause()
                let answers = Locked<[Int: (status: Int, body: String)]>([:])
                let start = ContinuousClock.now
                await Self.burst(port: port, numbers: 1..<9, connections: 8, answers: answers) {
                    $0 % 2 == 0 ? body(token: token, n: $0) : body(topic: "news", n: $0)
                }
                let waited = ContinuousClock.now - start
                server.resume()
                let all = answers.withLock { $0 }
                #expect(all.count == 8)
                #expect(all.values.allSatisfy { $0.status == 503 && $0.body.contains("UNAVAILABLE") }, "\(all.values.map(\.body))")
                #expect(waited >= .seconds(4), "answered at the request timeout (5 s), not before: \(waited)")
                // The markers published while frozen come back now and settle nothing; a new send gets its own.
                #expect(try httpRequest(port: port, "POST", Self.send, body: body(topic: "news", n: 9), secret: "s3cret").status == 200)
                #expect(try httpRequest(port: port, "POST", Self.send, body: body(token: token, n: 10), secret: "s3cret").status == 200)
                #expect(await gateway.terminate() == 0)
            }
        }
    }

    @Test(
        "a gateway stopped with sends in flight (the server frozen) answers each UNAVAILABLE at once; none is left waiting; its connection ran on the loop and let go of it"
    )
    func stopWithSendsInFlight() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            let token = try await instance.token()
            var configuration = Herald.Configuration(senderID: "1234567890")
            configuration.projectID = "demo"
            let herald = Herald(configuration: patientShutdown(configuration), store: InMemoryStore())
            var options = NATSReceiver.Options(servers: [server.url])
            // Longer than the test can take: the sends stay in flight until the stop, however slowly a loaded
            // machine starts their tasks (the default 5 s would answer the first ones UNAVAILABLE before the last
            // are sent, and the count below would never reach 8).
            options.requestTimeout = .seconds(300)
            let gateway = NATSGateway(options: options)
            let decoding = DecodingContext(senderID: "1234567890", makeMessageID: { "local" })
            @Sendable func send(_ n: Int) async throws -> Result<String, MessageError> {
                let body = Array(body(token: token, n: n).utf8)
                return await gateway.forward(try FCMSendRequest.decode(body, context: decoding), body: body)
            }
            try await withStarted(herald, plugins: [gateway]) { _ in
                // Once the gateway's copy of the registrations has the token, a send is stored. (A send before that
                // reads the bucket instead, which the frozen server below would leave waiting for the request
                // timeout: the test waits for the copy.)
                #expect(await eventually { (gateway.watchedRegistration(token: token) ?? nil) != nil })
                #expect(await eventually { (try? await send(0).get()) != nil })
                // The connection runs on the gateway's loop: its socket polled there, beside the adapter's wake-up.
                // (Stopped, it lets go of them before Herald's loop stops: a handle left would crash that stop.)
                #expect(await gateway.connectionHandlesOnLoop() == 2)
                server.pause()  // returns once every thread of the server is stopped: none acknowledges a send after it
                let sends = (1...8).map { n in Task { try await send(n) } }
                #expect(await eventually { gateway.sendsInFlight == 8 })
                await gateway.stop()
                var results: [Result<String, MessageError>] = []
                for task in sends { results.append(try await task.value) }
                server.resume()
                #expect(results.count == 8)
                for result in results {
                    guard case .failure(let error) = result else {
                        Issue.record("a send in flight was answered \(result) after stop")
                        continue
                    }
                    #expect(error.status == .unavailable, "\(error)")
                    // Answered by the stop, not by the request timeout (nor after a stop that waited for the
                    // frozen server, as stopping the registrations' watch did).
                    #expect("\(error)".contains("the gateway is stopping"), "\(error)")
                }
                #expect(gateway.sendsInFlight == 0)
                #expect(await gateway.connectionHandlesOnLoop() == 0)
            }
        }
    }
}
