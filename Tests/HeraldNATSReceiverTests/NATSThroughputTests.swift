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
            let (start, startCPU, startServerCPU) = (clock.now, processCPUTime(), server.cpuTime)
            var (firstHandled, end) = (start, start)
            var cpu: (herald: Duration, server: Duration) = (.zero, .zero)
            let handled: @Sendable () -> Int = { instance.collector.messages.withLock { $0.count } }
            try await withFleet([instance]) {
                #expect(await eventually(timeout: .seconds(120)) { handled() >= 1 })
                firstHandled = clock.now
                #expect(await eventually(timeout: .seconds(120)) { handled() >= Self.count })
                // The acks the instance owes are part of the work: counted once the server has taken them.
                #expect(await eventually { instance.receiver.statistics.acknowledged >= Self.count })
                try await instance.receiver.flush()
                end = clock.now
                cpu = (processCPUTime() - startCPU, server.cpuTime - startServerCPU)
            }
            let stopped = clock.now
            let rate = Double(Self.count) / Self.seconds(end - start)
            print("NATS JetStream -> one instance (\(kind) store): the instance's stop took \(stopped - end)")
            print(
                "NATS JetStream -> one instance (\(kind) store): \(Self.count) messages in \(end - start) from the instance's start,"
                    + " \(Int(rate)) messages/s; \(Int(Double(Self.count - 1) / Self.seconds(end - firstHandled))) messages/s from the first message;"
                    + " CPU per message: Herald \(Self.microseconds(cpu.herald, Self.count)) µs, nats-server \(Self.microseconds(cpu.server, Self.count)) µs"
            )
            try await Self.ceiling(server: server, herald: rate, kind: kind)
        }
    }

    /// With HERALD_NATS_CEILING (the path of Benchmarks/scripts/jetstream-drain-ceiling.c built), the plain cnats
    /// ceiling of the same work on the same nats-server right after Herald's drain: as many messages published
    /// asynchronously into a work-queue stream of its own, then drained with an ack each, by a pull consumer and by a
    /// push one; prints each and Herald's drain ÷ each.
    private static func ceiling(server: NATSServerProcess, herald rate: Double, kind: String) async throws {
        guard let path = ProcessInfo.processInfo.environment["HERALD_NATS_CEILING"] else { return }
        for mode in ["pull", "push"] {
            let result = try await runExecutable(URL(fileURLWithPath: path), [server.url, "\(count)", mode])
            #expect(result.status == 0, "\(result.error)")
            let fields = Dictionary(
                result.output.split(separator: " ").compactMap { field -> (String, String)? in
                    let parts = field.split(separator: "=", maxSplits: 1)
                    return parts.count == 2 ? (String(parts[0]), String(parts[1]).trimmingCharacters(in: .whitespacesAndNewlines)) : nil
                }, uniquingKeysWith: { $1 })
            let drain = try #require(fields["drain"].flatMap(Double.init), "\(result.output)")
            print(
                "plain cnats ceiling (\(mode), after the \(kind) store's run): \(fields["publish"] ?? "?") publishes/s, drained \(Int(drain)) messages/s,"
                    + " its CPU per message drained \(fields["drain_cpu_us"] ?? "?") µs; Herald ÷ ceiling: \(String(format: "%.2f", rate / drain))"
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

    /// The ways of topic delivery `fanOutCost` compares: core NATS, and stored with each ack policy.
    enum FanOut: String, CaseIterable {
        case core = "core NATS"
        case storedEach = "stored, an ack per message (AckPolicy explicit, as 0.1)"
        case storedEachTurn = "stored, an ack per loop turn that committed something (AckPolicy all, no delay)"
        case storedCumulative = "stored, an ack per committed batch (AckPolicy all, the default delay)"
    }

    /// CPU per topic message fanned out to 3 instances, core NATS against stored topic delivery with either ack
    /// policy, in rounds that take each in turn (so that the machine's load falls on all alike), medians printed.
    /// HERALD_NATS_FANOUT_MESSAGES (20,000) and HERALD_NATS_FANOUT_ROUNDS (3) size it. CPU is the scheduler's, to
    /// the nanosecond: the test process (the 3 instances, the sender and the test's polling) and nats-server apart.
    @Test("topic fan-out to 3 instances: core NATS against stored (JetStream, a durable consumer per instance), same run")
    func fanOutCost() async throws {
        let environment = ProcessInfo.processInfo.environment
        let count = environment["HERALD_NATS_FANOUT_MESSAGES"].flatMap { Int($0) } ?? 20_000
        let rounds = environment["HERALD_NATS_FANOUT_ROUNDS"].flatMap { Int($0) } ?? 3
        // HERALD_NATS_FANOUT_WAYS (`core`, `storedEach`, `storedEachTurn`, `storedCumulative`, comma-separated) runs only those: to
        // profile one way at a time (callgrind's instruction counts of the test process).
        let named = environment["HERALD_NATS_FANOUT_WAYS"].map { $0.split(separator: ",").map(String.init) }
        let ways = named.map { names in FanOut.allCases.filter { names.contains("\($0)") } } ?? FanOut.allCases
        var figures: [FanOut: [(wall: Duration, herald: Duration, server: Duration)]] = [:]
        for round in 1...rounds {
            for way in ways {
                let figure = try await fanOut(way, count: count)
                figures[way, default: []].append(figure)
                print(
                    "fan-out round \(round), \(way.rawValue): per message CPU \(Self.microseconds(figure.herald + figure.server, count)) µs (Herald \(Self.microseconds(figure.herald, count)), nats-server \(Self.microseconds(figure.server, count))), wall \(Self.microseconds(figure.wall, count)) µs"
                )
            }
        }
        func median(_ way: FanOut, _ part: (Duration, Duration, Duration) -> Duration) -> Double {
            let values = figures[way, default: []].map { Self.microseconds(part($0.wall, $0.herald, $0.server), count) }.sorted()
            return values[values.count / 2]
        }
        let core = ways.contains(.core) ? median(.core) { _, herald, server in herald + server } : .nan
        for way in ways {
            let total = median(way) { _, herald, server in herald + server }
            print(
                "topic fan-out to 3 instances, \(count) messages, median of \(rounds) rounds, \(way.rawValue): CPU per message \(total) µs (Herald's 3 instances and the sender \(median(way) { _, herald, _ in herald }), nats-server \(median(way) { _, _, server in server })), wall \(median(way) { w, _, _ in w }) µs; ÷ core \((total / core * 100).rounded() / 100)"
            )
            guard way != .core, ways.contains(.core) else { continue }
            // How sure the ratio is: the rounds resampled (10,000 times, with replacement), the ratio of the medians
            // of each resample; its 2.5th and 97.5th percentiles.
            let cpu: (FanOut) -> [Double] = { way in
                figures[way, default: []].map { Self.microseconds($0.herald + $0.server, count) }
            }
            let (stored, cores) = (cpu(way), cpu(.core))
            var generator = SystemRandomNumberGenerator()
            func resampledMedian(_ values: [Double]) -> Double {
                let sample = values.indices.map { _ in values[Int.random(in: 0..<values.count, using: &generator)] }.sorted()
                return sample[sample.count / 2]
            }
            let ratios = (0..<10_000).map { _ in resampledMedian(stored) / resampledMedian(cores) }.sorted()
            let rounded = { (value: Double) in (value * 100).rounded() / 100 }
            print(
                "\(way.rawValue) ÷ core: median \(rounded(total / core)), 95 % of resampled rounds within \(rounded(ratios[250]))–\(rounded(ratios[9_749])); ratio of the sums of all rounds \(rounded(stored.reduce(0, +) / cores.reduce(0, +)))"
            )
        }
    }

    private func fanOut(_ way: FanOut, count: Int) async throws -> (wall: Duration, herald: Duration, server: Duration) {
        let server = try NATSServerProcess()
        let instances = try (0..<3).map { _ in
            try FleetInstance(server: server) {
                $0.topicDelivery = way == .core ? .fanOut : .stored
                $0.cumulativeTopicAcks = way == .storedCumulative || way == .storedEachTurn
                if way == .storedEachTurn { $0.cumulativeAckDelay = .zero }
            }
        }
        var figure: (wall: Duration, herald: Duration, server: Duration) = (.zero, .zero, .zero)
        try await withFleet(instances) {
            for instance in instances { try await instance.subscribe("load") }
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.topic(project: "demo", topic: "load")
            let clock = ContinuousClock()
            let (startCPU, startServerCPU, start) = (processCPUTime(), server.cpuTime, clock.now)
            // Plain publishes in all cases: the stream stores them; what differs is the path to the instances.
            for n in 0..<count { try client.publish(subject, body(topic: "load", n: n), flush: false) }
            #expect(
                await eventually(timeout: .seconds(300)) {
                    instances.allSatisfy { $0.collector.messages.withLock { $0.count } >= count }
                })
            // The acks the instances owe are part of the cost: counted once the server has taken them.
            for instance in instances { try await instance.receiver.flush() }
            if way != .core {
                #expect(await eventually { instances.allSatisfy { $0.receiver.statistics.acknowledged >= count } })
                for instance in instances { try await instance.receiver.flush() }
            }
            figure = (clock.now - start, processCPUTime() - startCPU, server.cpuTime - startServerCPU)
            let acks = instances.map { $0.receiver.statistics.acknowledgementsSent }.reduce(0, +)
            print("fan-out, \(way.rawValue): \(acks) acks for \(count * instances.count) deliveries")
        }
        return figure
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private static func microseconds(_ duration: Duration, _ count: Int) -> Double {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return (seconds / Double(count) * 1e7).rounded() / 10
    }
}

/// CPU time this process used so far (user and system, all threads), to the nanosecond as the scheduler counts it.
func processCPUTime() -> Duration {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
}
