import Foundation
import Herald
import HeraldNATSReceiver
import HeraldSQLite
import HeraldTesting
import Testing

/// Figures for the README, not assertions: run with HERALD_NATS_BENCHMARK=1 (and a release build for real numbers).
@Suite(
    "NATSReceiver throughput (HERALD_NATS_BENCHMARK=1)", .serialized,
    .enabled(if: ProcessInfo.processInfo.environment["HERALD_NATS_BENCHMARK"] != nil))
struct NATSThroughputTests {
    static let count = 20_000

    @Test("token messages stored in JetStream, drained by one instance", arguments: ["memory", "sqlite"])
    func jetStreamIntoOne(store kind: String) async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-nats-bench") { directory in
            let memory = InMemoryStore()
            func makeStore() throws -> any HeraldStore { kind == "memory" ? memory : try SQLiteStore(directory: directory) }
            // First run: learn the token (kept by the store), then stop, so the stream fills while no one reads.
            let first = try FleetInstance(server: server, store: try makeStore()) { $0.maxAckPending = 4096 }
            try await first.start()
            let token = try await first.token()
            await first.herald.shutdown()
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.token(project: "demo", token: token)
            for n in 0..<Self.count { try client.publishStored(subject, body(token: token, n: n)) }

            let instance = try FleetInstance(server: server, store: try makeStore()) { $0.maxAckPending = 4096 }
            let clock = ContinuousClock()
            let start = clock.now
            try await withFleet([instance]) {
                #expect(await eventually(timeout: .seconds(120)) { instance.collector.messages.withLock { $0.count } >= Self.count })
            }
            let elapsed = clock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            print(
                "NATS JetStream -> one instance (\(kind) store): \(Self.count) messages in \(elapsed): \(Int(Double(Self.count) / seconds)) messages/s"
            )
        }
    }

    @Test("topic messages on core NATS into one instance, and into three in a queue group", arguments: [1, 3])
    func coreIntoGroup(instances size: Int) async throws {
        let server = try NATSServerProcess()
        let instances = try (0..<size).map { _ in try FleetInstance(server: server) { $0.topicDelivery = .shared(group: "bench") } }
        try await withFleet(instances) {
            for instance in instances { try await instance.subscribe("load") }
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.topic(project: "demo", topic: "load")
            let clock = ContinuousClock()
            let start = clock.now
            for n in 0..<Self.count { try client.publish(subject, body(topic: "load", n: n), flush: false) }
            #expect(
                await eventually(timeout: .seconds(120)) {
                    instances.map { $0.collector.messages.withLock { $0.count } }.reduce(0, +) >= Self.count
                })
            let elapsed = clock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            print("NATS core queue group of \(size): \(Self.count) messages in \(elapsed): \(Int(Double(Self.count) / seconds)) messages/s")
        }
    }

    @Test("topic fan-out to 3 instances: core NATS against stored (JetStream, a durable consumer per instance), same run")
    func fanOutCost() async throws {
        let count = 5_000
        var figures: [String: (wall: Duration, herald: Duration, server: Duration)] = [:]
        for delivery in [NATSReceiver.TopicDelivery.fanOut, .stored] {
            let server = try NATSServerProcess()
            let instances = try (0..<3).map { _ in try FleetInstance(server: server) { $0.topicDelivery = delivery } }
            try await withFleet(instances) {
                for instance in instances { try await instance.subscribe("load") }
                let client = try NATSPublisher(url: server.url)
                let subject = NATSSubjects.topic(project: "demo", topic: "load")
                let clock = ContinuousClock()
                let (startCPU, startServerCPU, start) = (processCPUTime(), server.cpuTime, clock.now)
                // Plain publishes in both cases: the stream stores them; what differs is the path to the instances.
                for n in 0..<count { try client.publish(subject, body(topic: "load", n: n), flush: false) }
                #expect(
                    await eventually(timeout: .seconds(300)) {
                        instances.allSatisfy { $0.collector.messages.withLock { $0.count } >= count }
                    })
                let wall = clock.now - start
                figures["\(delivery)"] = (wall, processCPUTime() - startCPU, server.cpuTime - startServerCPU)
            }
        }
        for (name, figure) in figures.sorted(by: { $0.key < $1.key }) {
            print(
                "topic fan-out to 3 instances, \(name): \(count) messages in \(figure.wall); per message: CPU \((figure.herald + figure.server) / count) (Herald's 3 instances and the sender \(figure.herald / count), nats-server \(figure.server / count)), wall \(figure.wall / count)"
            )
        }
    }
}

/// CPU time this process used so far (user and system).
func processCPUTime() -> Duration {
    var usage = rusage()
    getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
    let microseconds =
        (Int(usage.ru_utime.tv_sec) + Int(usage.ru_stime.tv_sec)) * 1_000_000 + Int(usage.ru_utime.tv_usec)
        + Int(usage.ru_stime.tv_usec)
    return .microseconds(microseconds)
}
