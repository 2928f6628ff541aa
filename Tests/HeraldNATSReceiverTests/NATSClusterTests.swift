import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// Three nats-servers with JetStream in one cluster (`herald`), each on loopback ports of its own (client, route,
/// monitoring) with a store of its own, routed to the others: a fleet's broker as an operator runs it.
final class NATSCluster: TestNATSServer, @unchecked Sendable {
    // @unchecked Sendable: the nodes are started and stopped by the test's task only, one call at a time.
    let nodes: [NATSServerProcess]
    let monitorPorts: [Int]

    /// Every node's client URL, as an instance's `servers` lists them.
    var urls: [String] { nodes.map(\.url) }
    var url: String { urls.joined(separator: ",") }

    init(size: Int = 3) throws {
        let clientPorts = try (0..<size).map { _ in try freeLoopbackPort() }
        let routePorts = try (0..<size).map { _ in try freeLoopbackPort() }
        let monitorPorts = try (0..<size).map { _ in try freeLoopbackPort() }
        self.monitorPorts = monitorPorts
        let routes = routePorts.map { "nats://127.0.0.1:\($0)" }.joined(separator: ",")
        nodes = try (0..<size).map { index in
            try NATSServerProcess(
                port: clientPorts[index],
                extraArguments: [
                    "-n", "node\(index)", "--cluster_name", "herald", "--cluster", "nats://127.0.0.1:\(routePorts[index])",
                    "--routes", routes, "-m", "\(monitorPorts[index])",
                ], start: false)
        }
        for node in nodes { try node.start() }
    }

    /// Node `index`'s monitoring of JetStream (`/jsz`, its streams), with curl (the server answers chunked). Curl runs
    /// on a thread of its own: the test polls this while the instances' tasks need the cooperative pool.
    func monitoring(node index: Int) async throws -> JSONValue {
        let result = try await runExecutable(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-sf", "--max-time", "5", "http://127.0.0.1:\(monitorPorts[index])/jsz?streams=true"])
        return try JSONParser.parse(Array(result.output.utf8))
    }

    /// Node `index`'s `/healthz` answer (its body): with JetStream, `{"status":"ok"}` only once its replicas of every
    /// stream and consumer are current, what an operator waits for before taking down another node.
    func health(node index: Int) async -> String {
        let result = try? await runExecutable(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "--max-time", "5", "http://127.0.0.1:\(monitorPorts[index])/healthz"])
        return result?.output.trimmingCharacters(in: .whitespacesAndNewlines) ?? "no answer"
    }

    /// What node `index`'s monitoring says of its copy of `stream`: (last sequence, messages), or `nil` when it has none.
    func streamState(node index: Int, stream: String) async throws -> (lastSequence: Int, messages: Int)? {
        let json = try await monitoring(node: index)
        for account in json["account_details"]?.arrayValue ?? [] {
            for detail in account["stream_detail"]?.arrayValue ?? [] where detail["name"]?.stringValue == stream {
                guard let state = detail["state"] else { return nil }
                return (Int(state["last_seq"]?.intValue ?? -1), Int(state["messages"]?.intValue ?? -1))
            }
        }
        return nil
    }

    /// What node `index`'s monitoring says of `stream`'s consumers, one line each (name, pending, waiting for an ack,
    /// redelivered, delivered and ack-floor stream sequences, leader): what a failed check of the stream's state shows.
    func consumerStates(node index: Int, stream: String) -> String {
        guard
            let result = try? runExecutable(
                URL(fileURLWithPath: "/usr/bin/curl"),
                ["-sf", "--max-time", "5", "http://127.0.0.1:\(monitorPorts[index])/jsz?streams=true&consumers=true"]),
            let json = try? JSONParser.parse(Array(result.output.utf8))
        else { return "node \(index): no monitoring answer" }
        var lines: [String] = []
        for account in json["account_details"]?.arrayValue ?? [] {
            for detail in account["stream_detail"]?.arrayValue ?? [] where detail["name"]?.stringValue == stream {
                for consumer in detail["consumer_detail"]?.arrayValue ?? [] {
                    let name = consumer["name"]?.stringValue ?? "?"
                    let number = { (key: String) in consumer[key]?.intValue.map(String.init) ?? "?" }
                    let sequence = { (key: String) in consumer[key]?["stream_seq"]?.intValue.map(String.init) ?? "?" }
                    lines.append(
                        "\(name): pending \(number("num_pending")), ack pending \(number("num_ack_pending")), "
                            + "redelivered \(number("num_redelivered")), delivered \(sequence("delivered")), "
                            + "ack floor \(sequence("ack_floor")), leader \(consumer["cluster"]?["leader"]?.stringValue ?? "?")")
                }
            }
        }
        return "node \(index) consumers of \(stream): " + (lines.isEmpty ? "none" : lines.joined(separator: "; "))
    }

    /// The node that leads `stream`'s replicas now (by its monitoring), or `nil` when none says.
    func streamLeader(_ stream: String) async throws -> Int? {
        for index in nodes.indices {
            guard let json = try? await monitoring(node: index) else { continue }
            for account in json["account_details"]?.arrayValue ?? [] {
                for detail in account["stream_detail"]?.arrayValue ?? [] where detail["name"]?.stringValue == stream {
                    if let leader = detail["cluster"]?["leader"]?.stringValue, leader.hasPrefix("node") {
                        return Int(leader.dropFirst(4))
                    }
                }
            }
        }
        return nil
    }
}

/// Runs `body(index)` on `count` threads of their own (blocking NATS calls stay off Swift's cooperative pool, which
/// the instances' tasks need), and returns once all have finished.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            Thread {
                body(index)
                group.leave()
            }.start()
        }
        group.notify(queue: .global()) { continuation.resume() }
    }
}

@Suite("A 3-node nats-server cluster: replicated streams survive a node's loss", .serialized)
struct NATSClusterTests {
    @Test(
        "a gateway sends 10,000 token and 1,000 stored topic messages to 3 instances while the stream's leader is SIGKILLed: every acknowledged message handled exactly once; the node restarted catches up",
        // Under Address Sanitizer (scripts/test sets ASAN_OPTIONS for that run) the instances run several times slower
        // while three nats-servers do not, and the restarted node's catch-up has missed the test's bound; the test
        // runs in the plain parallel suite and under Thread Sanitizer.
        .disabled(if: ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil, "timing-bound failover under Address Sanitizer")
    )
    func nodeLostUnderLoad() async throws {
        let cluster = try NATSCluster()
        let project = "demo"
        var senderOptions = NATSReceiver.Options(servers: cluster.urls)
        senderOptions.reconnectWait = .milliseconds(50)
        #expect(senderOptions.effectiveReplicas == 3)
        let options = senderOptions
        // The cluster elects its JetStream leader a moment after the nodes are ready.
        let ready = await eventually(timeout: .seconds(30)) {
            // On a thread of its own: each try waits for JetStream's answer, up to the client's timeout.
            (try? await onOwnThread {
                try NATSPublisher(options: options, reconnect: true).ensureStream(project: project, options: options)
            }) != nil
        }
        try #require(ready)
        let instances = try (0..<3).map { _ in
            try FleetInstance(server: cluster) {
                $0.servers = cluster.urls
                $0.topicDelivery = .stored
            }
        }
        try await withFleet(instances) {
            try await withTemporaryDirectory(prefix: "herald-cluster") { directory in
                // The app server's way in: `herald serve --gateway` with every node in its list, as an operator runs it.
                let gateway = try await startGateway(server: cluster, directory: directory, secret: "s3cret")
                defer { _ = gateway.terminate() }
                let tokens = try await instances.asyncMap { try await $0.token() }
                for instance in instances { try await instance.subscribe("news") }
                // Every node holds a replica (R3) of the token stream, the stored topics' stream and the registrations
                // bucket (a key-value bucket is the stream `KV_<bucket>`).
                for stream in ["HERALD_DEMO", "HERALD_DEMO_TOPICS", "KV_HERALD_DEMO_REGISTRATIONS"] {
                    for node in 0..<3 {
                        let replicated = await eventually(timeout: .seconds(30)) {
                            (try? await cluster.streamState(node: node, stream: stream)) != nil
                        }
                        #expect(replicated, "node\(node) holds no replica of \(stream)")
                    }
                }

                let total = 10_000
                let senders = 4
                let acknowledged = Locked<[Int: String]>([:])
                let topics = 1_000
                let topicBase = 100_000
                let acknowledgedTopics = Locked<[Int: String]>([:])
                let retries = Locked(0)
                let killedAt = Locked<ContinuousClock.Instant?>(nil)
                let acknowledgedAt = Locked<[ContinuousClock.Instant]>([])
                // One send through the gateway: the message's ID when it was answered 200 (stored), else nil. A sender
                // retries what was not answered 200 with the same body: the gateway gives a send the same Nats-Msg-Id
                // each time (a hash of it), so JetStream stores it once.
                let port = gateway.httpPort
                // A gateway that exited ends the sending at once (its log is in the failure), instead of every send
                // being retried for its whole allowance.
                let process = gateway.process
                let gatewayExited: @Sendable () -> Bool = { !process.isRunning }
                let send: @Sendable (String) -> String? = { body in
                    guard
                        let answer = try? httpRequest(
                            port: port, "POST", "/v1/projects/\(project)/messages:send", body: body, secret: "s3cret"),
                        answer.status == 200,
                        let name = (try? JSONParser.parse(Array(answer.body.utf8)))?["name"]?.stringValue
                    else { return nil }
                    return name.split(separator: "/").last.map(String.init)
                }
                let sending = Task {
                    await onThreads(senders) { sender in
                        for n in stride(from: sender, to: total, by: senders) {
                            if n % (total / topics) == 0 {
                                // One topic message per ten token messages, to all three instances.
                                let k = topicBase + n / (total / topics)
                                for _ in 0..<3000 where !gatewayExited() {
                                    if let id = send(topicBody("news", n: k)) {
                                        acknowledgedTopics.withLock { $0[k] = id }
                                        break
                                    }
                                    retries.withLock { $0 += 1 }
                                    usleep(20_000)
                                }
                            }
                            let token = tokens[n % 3]
                            let deadline = ContinuousClock.now + .seconds(60)
                            while ContinuousClock.now < deadline, !gatewayExited() {
                                if let id = send(body(token: token, n: n)) {
                                    acknowledged.withLock { $0[n] = id }
                                    acknowledgedAt.withLock { $0.append(.now) }
                                    break
                                }
                                retries.withLock { $0 += 1 }
                                // A failed send (no leader yet: 503) fails fast: wait a little before the next attempt.
                                usleep(20_000)
                            }
                        }
                    }
                }
                #expect(await eventually(timeout: .seconds(120)) { acknowledged.withLock { $0.count } >= 3_000 })
                let victim = try await cluster.streamLeader("HERALD_DEMO") ?? 0
                killedAt.withLock { $0 = .now }
                let leader = cluster.nodes[victim]
                try await onOwnThread { leader.kill() }
                #expect(await eventually(timeout: .seconds(120)) { acknowledged.withLock { $0.count } >= 7_000 })
                try await onOwnThread { try leader.start() }
                let restartedAt = ContinuousClock.now
                await sending.value
                try #require(!gatewayExited(), "the gateway exited: \(gateway.log)")
                let answered = acknowledged.withLock { $0 }
                #expect(answered.count == total)
                let answeredTopics = acknowledgedTopics.withLock { $0 }
                #expect(answeredTopics.count == topics)

                let handled = await eventually(timeout: .seconds(120)) {
                    instances.map { $0.collector.numbers.count }.reduce(0, +) >= total + 3 * topics
                }
                #expect(handled)
                for instance in instances { try await instance.herald.waitUntilIdle() }
                for (index, instance) in instances.enumerated() {
                    let all = instance.collector.numbers
                    let numbers = all.filter { Int($0)! < topicBase }
                    let topicNumbers = all.filter { Int($0)! >= topicBase }
                    #expect(
                        topicNumbers.count == topics, "instance \(index) handled \(topicNumbers.count) topic messages, \(topics) expected")
                    #expect(Set(topicNumbers) == Set((topicBase..<(topicBase + topics)).map(String.init)))
                    let expected = Set(stride(from: index, to: total, by: 3).map(String.init))
                    #expect(numbers.count == expected.count, "instance \(index) handled \(numbers.count), \(expected.count) expected")
                    #expect(Set(numbers) == expected)
                    // Exactly the IDs the sender was answered with.
                    let ids = Set(instance.collector.messages.withLock { $0.compactMap(\.messageID) })
                    #expect(ids == Set(stride(from: index, to: total, by: 3).compactMap { answered[$0] }).union(answeredTopics.values))
                }
                // The restarted node caught up: its copy of the stream ends where the others' do. Judged by the last
                // sequence, not by the messages each copy still counts: nats-server 2.9 does not always remove an
                // acknowledged message from every replica of a work-queue stream across a failover (the restarted node
                // kept thousands; once, under Thread Sanitizer, the survivor kept 2 whose consumers had nothing pending
                // or waiting for an ack). What was delivered is checked above, exactly once; removal is the server's.
                let survivor = (victim + 1) % 3
                let seen = Locked("")
                // Two minutes at most: with the whole suite running beside it, catching up took more than one.
                let caughtUp = await eventually(timeout: .seconds(120)) {
                    let mine = try? await cluster.streamState(node: victim, stream: "HERALD_DEMO")
                    let theirs = try? await cluster.streamState(node: survivor, stream: "HERALD_DEMO")
                    seen.withLock { $0 = "restarted node: \(String(describing: mine)), survivor: \(String(describing: theirs))" }
                    guard let mine, let theirs else { return false }
                    // At or past the survivor's: once (under Thread Sanitizer) the restarted node, the old leader, counted
                    // one sequence more than the others (10,001 against 10,000) for good, a publish nats-server 2.9 kept
                    // in its copy that the cluster never confirmed (every message was still handled exactly once).
                    return mine.lastSequence >= theirs.lastSequence && theirs.lastSequence >= total
                }
                // And its replicas of the stream's consumers are current too: its `/healthz` says ok only then. Killing the
                // survivor before that once left the instances without the 300 messages below for two minutes (under Thread
                // Sanitizer, beside the whole suite): an operator's rolling restart waits for it too (docs/operators/fleet.md).
                let health = Locked("")
                let healthStart = ContinuousClock.now
                let healthy = await eventually(timeout: .seconds(120)) {
                    let answer = await cluster.health(node: victim)
                    health.withLock { $0 = answer }
                    return answer.contains("\"ok\"")
                }
                let healthWait = ContinuousClock.now - healthStart
                let caughtUpAfter = ContinuousClock.now - restartedAt
                // Then, as before, the survivor's removal of what was acknowledged settles (30 s at most, not asserted):
                // the next step kills the survivor, and one suite run that killed it as soon as the last sequences
                // matched missed the bound of the 300 messages after it.
                _ = await eventually(timeout: .seconds(30)) {
                    (try? await cluster.streamState(node: survivor, stream: "HERALD_DEMO"))?.messages == 0
                }
                #expect(healthy, "node\(victim)'s /healthz after its restart: \(health.withLock { $0 })")
                #expect(
                    caughtUp,
                    "\(seen.withLock { $0 }); \(cluster.consumerStates(node: survivor, stream: "HERALD_DEMO")); instances' statistics: \(instances.map { String(describing: $0.receiver.statistics) })"
                )
                // And it serves: with another node lost now, the stream's majority needs it. 300 more, each handled once.
                let lost = cluster.nodes[survivor]
                try await onOwnThread { lost.kill() }
                await onThreads(1) { _ in
                    for n in total..<(total + 300) {
                        let token = tokens[n % 3]
                        for _ in 0..<3000 where !gatewayExited() {
                            if let id = send(body(token: token, n: n)) {
                                acknowledged.withLock { $0[n] = id }
                                break
                            }
                            usleep(20_000)
                        }
                    }
                }
                try #require(!gatewayExited(), "the gateway exited: \(gateway.log)")
                #expect(acknowledged.withLock { $0.count } == total + 300)
                let handledAfter = await allHandled(total + 3 * topics + 300, by: instances)
                let leaderAfter = try? await cluster.streamLeader("HERALD_DEMO")
                // When they are not all handled, what each instance misses of the 300, and what the two nodes left say.
                let third = 3 - victim - survivor
                let misses = instances.enumerated().map { index, instance in
                    let seen = Set(instance.collector.numbers)
                    let missing = stride(from: total + index - total % 3, to: total + 300, by: 3).filter {
                        $0 >= total && !seen.contains(String($0))
                    }
                    return
                        "instance \(index) misses \(missing.count) of the 300 (first \(missing.prefix(5))), statistics \(instance.receiver.statistics)"
                }
                #expect(
                    handledAfter,
                    "after node\(survivor) was SIGKILLed: \(misses.joined(separator: "; ")); stream leader \(String(describing: leaderAfter)); \(cluster.consumerStates(node: victim, stream: "HERALD_DEMO")); \(cluster.consumerStates(node: third, stream: "HERALD_DEMO"))"
                )
                for instance in instances { try await instance.herald.waitUntilIdle() }
                // Each handled once. (Seen once before: a message handled twice after the killed leader's node rejoined —
                // a sender's retry with the same Nats-Msg-Id stored a second time by a new leader, under another stream
                // sequence. The receiver now takes a second stored copy of one publish within the duplicate window as
                // the same message: `secondStoredCopy` in NATSReceiverTests.)
                for instance in instances {
                    #expect(instance.collector.numbers.count == Set(instance.collector.numbers).count)
                }
                // The longest wait between two acknowledged publishes once the leader was killed: the sender's outage.
                let times = acknowledgedAt.withLock { $0 }.sorted()
                let killed = try #require(killedAt.withLock { $0 })
                let outage = zip(times, times.dropFirst()).filter { $0.1 > killed }.map { $0.1 - $0.0 }.max() ?? .zero
                print(
                    "cluster: node\(victim) (stream leader) SIGKILLed after 3,000 of \(total): longest pause in sends answered 200 by the gateway \(outage), \(retries.withLock { $0 }) failed attempts retried; the restarted node's copy after catching up: \(seen.withLock { $0 }); its /healthz ok \(healthWait) after that, \(caughtUpAfter) after its restart"
                )
                #expect(await gateway.terminate() == 0, "\(gateway.log)")
            }
        }
    }
}

/// Whether `instances` handle `count` messages between them within two minutes.
private func allHandled(_ count: Int, by instances: [FleetInstance]) async -> Bool {
    await eventually(timeout: .seconds(120)) { instances.reduce(0) { $0 + $1.collector.numbers.count } >= count }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
