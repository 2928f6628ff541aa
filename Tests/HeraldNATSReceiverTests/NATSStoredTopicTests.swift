import Foundation
import Herald
import HeraldNATSReceiver
import HeraldSQLite
import HeraldTesting
import Testing

func topicBody(_ topic: String, n: Int, android: String = "") -> String {
    #"{"message": {"topic": "\#(topic)", "data": {"n": "\#(n)"}\#(android.isEmpty ? "" : #", "android": {\#(android)}"#)}}"#
}

@Suite("Stored topic delivery: topic messages wait in JetStream for subscribed instances, within their TTL", .serialized)
struct NATSStoredTopicTests {
    @Test(
        "each subscribed instance handles each topic message once; one that was stopped gets, once back, what was sent within the TTL (android.ttl or apns-expiration), the newest of a collapse key; expired ones are dropped as expired"
    )
    func instanceBackWithinTTL() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-stored-topics") { directory in
            let stored: (inout NATSReceiver.Options) -> Void = { $0.topicDelivery = .stored }
            let online = try FleetInstance(server: server, configure: stored)
            let away = try FleetInstance(server: server, store: try SQLiteStore(directory: directory), configure: stored)
            let publisher = try NATSPublisher(url: server.url)
            func send(_ topic: String, _ n: Int, android: String = "", apnsExpiration: Int64? = nil) throws {
                var text = topicBody(topic, n: n, android: android)
                if let apnsExpiration {
                    let apns = #""apns": {"headers": {"apns-expiration": "\#(apnsExpiration)"}}"#
                    text = #"{"message": {"topic": "\#(topic)", "data": {"n": "\#(n)"}, \#(apns)}}"#
                }
                let body = Array(text.utf8)
                let id = try publisher.publishTopic(
                    NATSSubjects.topic(project: "demo", topic: topic), body: body, messageID: "t\(n)", stored: true)
                #expect(id?.hasPrefix("nats-HERALD_DEMO_TOPICS-") == true)
            }
            try await withFleet([online]) {
                try await online.subscribe("news")
                try await withFleet([away]) {
                    try await away.subscribe("news")
                    for n in 1...3 { try send("news", n) }
                    #expect(await eventually { online.collector.numbers == ["1", "2", "3"] && away.collector.numbers == ["1", "2", "3"] })
                }
                // Sent while `away` is stopped: kept for it.
                try send("news", 4)
                try send("news", 5, android: #""ttl": "1s""#)
                let expiring = Int64(Date().timeIntervalSince1970)
                try send("news", 6, android: #""collapse_key": "score""#)
                try send("news", 7, android: #""collapse_key": "score""#)
                try send("news", 8)
                try send("other", 9)
                // APNs' expiration (seconds since 1970) is a TTL too: 10 expires while `away` is stopped, 11 does not.
                try send("news", 10, apnsExpiration: expiring + 4)
                try send("news", 11, apnsExpiration: expiring + 3600)
                #expect(await eventually { Set(online.collector.numbers).isSuperset(of: ["4", "5", "7", "8", "10", "11"]) })
                // The 1 s TTL of message 5 and the expiration of 10 run out while `away` is stopped.
                #expect(await eventually { Int64(Date().timeIntervalSince1970) > expiring + 5 })

                let sink = RecordingSink()
                let back = try FleetInstance(
                    server: server, store: try SQLiteStore(directory: directory), plugins: [sink], configure: stored)
                try await withFleet([back]) {
                    #expect(await eventually { Set(back.collector.numbers) == ["4", "7", "8", "11"] })
                    try await back.herald.waitUntilIdle()
                    try await back.receiver.flush()
                    #expect(Set(back.collector.numbers) == ["4", "7", "8", "11"])
                    #expect(back.collector.numbers.count == 4)
                }
                let drops = sink.events(named: .messageDropped).compactMap { $0.parameters["reason"] }
                // Two expired: 5 (android.ttl) and 10 (apns-expiration).
                #expect(drops.filter { $0 == "expired" }.count == 2, "\(drops)")
                #expect(drops.contains("collapsed"), "\(drops)")
                // Nothing twice at the instance that stayed.
                #expect(online.collector.numbers.count == Set(online.collector.numbers).count)
            }
        }
    }

    @Test(
        "after an upgrade, a consumer made with explicit acks (by 0.1) is kept with the messages waiting for it: each handled once, all acknowledged"
    )
    func upgradeKeepsExplicitConsumer() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-stored-upgrade") { directory in
            let publisher = try NATSPublisher(url: server.url)
            func send(_ n: Int) throws {
                _ = try publisher.publishTopic(
                    "herald.demo.topic.news", body: Array(topicBody("news", n: n).utf8), messageID: "u\(n)", stored: true)
            }
            let old = try FleetInstance(server: server, store: try SQLiteStore(directory: directory)) {
                $0.topicDelivery = .stored
                $0.cumulativeTopicAcks = false
            }
            try await withFleet([old]) {
                try await old.subscribe("news")
                for n in 1...3 { try send(n) }
                #expect(await eventually { old.receiver.statistics.acknowledged == 3 })
            }
            // Sent while it is down (being upgraded): they wait on the consumer made with explicit acks.
            for n in 4...6 { try send(n) }
            let upgraded = try FleetInstance(server: server, store: try SQLiteStore(directory: directory)) { $0.topicDelivery = .stored }
            try await withFleet([upgraded]) {
                // Each once, in any order: a message JetStream pushed to the stopping instance before its interest
                // ended can come again only after the consumer's ack wait, behind the others. What was handled, and
                // the receiver's counts, are named when a wait fails.
                #expect(
                    await eventually { Self.once(upgraded.collector.numbers, ["4", "5", "6"]) },
                    "\(upgraded.collector.numbers) \(upgraded.receiver.statistics)")
                try send(7)
                #expect(
                    await eventually { Self.once(upgraded.collector.numbers, ["4", "5", "6", "7"]) },
                    "\(upgraded.collector.numbers) \(upgraded.receiver.statistics)")
                #expect(await eventually { upgraded.receiver.statistics.acknowledged == 4 }, "\(upgraded.receiver.statistics)")
            }
            // All of them were acknowledged: the next start gets what is sent from then on only.
            let again = try FleetInstance(server: server, store: try SQLiteStore(directory: directory)) { $0.topicDelivery = .stored }
            try await withFleet([again]) {
                try await again.receiver.flush()
                try send(8)
                #expect(await eventually { again.collector.numbers.contains("8") })
                try await again.herald.waitUntilIdle()
                #expect(again.collector.numbers == ["8"])
            }
        }
    }

    @Test(
        "a stored topic's acks go in batches: messages handled one at a time wait for the delay or a batch, not an ack each; flush sends those that wait; no delay is an ack per loop turn"
    )
    func acknowledgementsInBatches() async throws {
        let server = try NATSServerProcess()
        let publisher = try NATSPublisher(url: server.url)
        // One message at a time, each handled before the next is sent: each is committed in a loop turn of its own.
        func trickle(_ topic: String, _ numbers: ClosedRange<Int>, to instance: FleetInstance) async throws {
            for n in numbers {
                _ = try publisher.publishTopic(
                    "herald.demo.topic.\(topic)", body: Array(topicBody(topic, n: n).utf8), messageID: "\(topic)\(n)", stored: true)
                #expect(await eventually { instance.collector.numbers.contains("\(n)") })
            }
        }
        func stored(delay: Duration, maxAckPending: Int = 1024) throws -> FleetInstance {
            try FleetInstance(server: server) {
                $0.topicDelivery = .stored
                $0.cumulativeAckDelay = delay
                $0.maxAckPending = maxAckPending
            }
        }
        // A long delay, a batch of 128: ten messages wait for flush(), which covers them with one ack (two if the
        // last commit came after the first flush).
        let waiting = try stored(delay: .seconds(600))
        // A batch of 2 (an eighth of 16): an ack every second message, none waits for the delay.
        let pairs = try stored(delay: .seconds(600), maxAckPending: 16)
        // A short delay: the timer acknowledges a message left alone.
        let timed = try stored(delay: .milliseconds(50))
        // No delay: an ack per loop turn, so one per message here.
        let perTurn = try stored(delay: .zero)
        try await withFleet([waiting, pairs, timed, perTurn]) {
            for (instance, topic) in [(waiting, "waiting"), (pairs, "pairs"), (timed, "timed"), (perTurn, "turns")] {
                try await instance.subscribe(topic)
            }
            try await trickle("waiting", 1...10, to: waiting)
            try await waiting.herald.waitUntilIdle()
            #expect(waiting.receiver.statistics.acknowledgementsSent == 0)
            #expect(
                try await eventually {
                    try await waiting.receiver.flush()
                    return waiting.receiver.statistics.acknowledged == 10
                })
            #expect((1...2).contains(waiting.receiver.statistics.acknowledgementsSent))

            try await trickle("pairs", 1...10, to: pairs)
            // Every message but at most the last is covered without waiting for the delay: an ack per pair, or one
            // for three when a message was settled before the ack of the pair went (the ack is sent at the end of
            // the loop turn). After such a three the pairs fall one later, and the tenth is left alone, waiting for
            // the delay (600 s here) or a flush.
            #expect(await eventually { pairs.receiver.statistics.acknowledged >= 9 }, "\(pairs.receiver.statistics)")
            #expect(
                try await eventually {
                    try await pairs.receiver.flush()
                    return pairs.receiver.statistics.acknowledged == 10
                }, "\(pairs.receiver.statistics)")
            // 5 (an ack per pair); fewer if a commit came late (the flush's ack included), never more.
            #expect((3...5).contains(pairs.receiver.statistics.acknowledgementsSent), "\(pairs.receiver.statistics)")

            try await trickle("timed", 1...1, to: timed)
            #expect(await eventually { timed.receiver.statistics.acknowledged == 1 }, "\(timed.receiver.statistics)")
            #expect(timed.receiver.statistics.acknowledgementsSent == 1, "\(timed.receiver.statistics)")

            for n in 1...5 {
                try await trickle("turns", n...n, to: perTurn)
                #expect(await eventually { perTurn.receiver.statistics.acknowledged == n }, "\(perTurn.receiver.statistics)")
            }
            #expect(perTurn.receiver.statistics.acknowledgementsSent == 5)
        }
    }

    @Test("a topic left is not kept: after unsubscribing, messages sent to it wait for no one and reach no one")
    func unsubscribeDeletesConsumer() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server) { $0.topicDelivery = .stored }
        try await withFleet([instance]) {
            let publisher = try NATSPublisher(url: server.url)
            try await instance.subscribe("news")
            _ = try publisher.publishTopic(
                "herald.demo.topic.news", body: Array(topicBody("news", n: 1).utf8), messageID: "a", stored: true)
            #expect(await eventually { instance.collector.numbers == ["1"] })
            try await instance.herald.unsubscribe(fromTopic: "news")
            try await instance.receiver.flush()
            _ = try publisher.publishTopic(
                "herald.demo.topic.news", body: Array(topicBody("news", n: 2).utf8), messageID: "b", stored: true)
            try await instance.subscribe("news")
            _ = try publisher.publishTopic(
                "herald.demo.topic.news", body: Array(topicBody("news", n: 3).utf8), messageID: "c", stored: true)
            #expect(await eventually { instance.collector.numbers.contains("3") })
            try await instance.herald.waitUntilIdle()
            #expect(instance.collector.numbers == ["1", "3"])
        }
    }

    @Test(
        "a topic send through the gateway is stored: answered with the stored ID, and handled by an instance that was stopped when it was sent"
    )
    func throughGateway() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-stored-gateway") { directory in
            try FileManager.default.createDirectory(atPath: "\(directory)/store", withIntermediateDirectories: true)
            let stored: (inout NATSReceiver.Options) -> Void = { $0.topicDelivery = .stored }
            let first = try FleetInstance(server: server, store: try SQLiteStore(directory: "\(directory)/store"), configure: stored)
            try await withFleet([first]) { try await first.subscribe("news") }
            let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
            let answer = try httpRequest(
                port: gateway.httpPort, "POST", "/v1/projects/demo/messages:send", body: topicBody("news", n: 1), secret: "s3cret")
            #expect(answer.status == 200, "\(answer.body)")
            #expect(answer.body.contains("/messages/nats-HERALD_DEMO_TOPICS-"), "\(answer.body)")
            let back = try FleetInstance(server: server, store: try SQLiteStore(directory: "\(directory)/store"), configure: stored)
            try await withFleet([back]) {
                #expect(await eventually { back.collector.numbers == ["1"] })
                let id = back.collector.messages.withLock { $0.first?.messageID } ?? "none"
                #expect(answer.body.contains(id), "\(answer.body) against \(id)")
                try await back.herald.waitUntilIdle()
                #expect(back.collector.numbers == ["1"])
            }
            #expect(await gateway.terminate() == 0)
        }
    }

    /// Whether `handled` holds each of `expected` once and nothing else.
    static func once(_ handled: [String], _ expected: Set<String>) -> Bool {
        handled.count == expected.count && Set(handled) == expected
    }
}
