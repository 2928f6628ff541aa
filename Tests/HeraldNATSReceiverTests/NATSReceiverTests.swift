import Foundation
import Herald
import HeraldNATSReceiver
import HeraldSQLite
import HeraldTesting
import Testing

/// Records the data messages an instance handled.
final class Collector: MessageHandler, Sendable {
    let messages = Locked<[RemoteMessage]>([])
    func didReceive(_ message: RemoteMessage) async throws { messages.withLock { $0.append(message) } }
    /// The `n` data value of each message handled, in order.
    var numbers: [String] { messages.withLock { $0.compactMap { $0.userInfo["n"]?.stringValue } } }
}

/// A handler that holds every message at its gate.
final class HeldHandler: MessageHandler, Sendable {
    let gate = Gate()
    func didReceive(_ message: RemoteMessage) async throws { await gate.wait() }
}

/// One Herald instance with a NATS receiver and a collector, as a daemon of a fleet would run it.
final class FleetInstance: Sendable {
    let herald: Herald
    let receiver: NATSReceiver
    let collector = Collector()

    init(
        server: any TestNATSServer, store: any HeraldStore = InMemoryStore(), plugins: [any HeraldPlugin] = [],
        maxInFlight: Int = 1024, autoInit: Bool = true, configure: (inout NATSReceiver.Options) -> Void = { _ in }
    ) throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        configuration.maxInFlight = maxInFlight
        configuration.isAutoInitEnabled = autoInit
        herald = Herald(configuration: patientShutdown(configuration), store: store)
        var options = NATSReceiver.Options(servers: [server.url])
        options.ackWait = .seconds(2)
        options.redeliveryDelay = .milliseconds(100)
        options.reconnectWait = .milliseconds(20)
        options.maxReconnectWait = .milliseconds(200)
        configure(&options)
        receiver = NATSReceiver(options: options)
        try herald.register(receiver)
        try herald.register(collector)
        for plugin in plugins { try herald.register(plugin) }
    }

    func start() async throws { try await herald.start() }

    func token() async throws -> String { try await herald.token() }

    func tokenSubject() async throws -> String { NATSSubjects.token(project: "demo", token: try await token()) }

    func subscribe(_ topic: String) async throws {
        try await herald.subscribe(toTopic: topic)
        try await receiver.flush()
    }
}

/// A server the tests connect to: a real nats-server, or the resetting stand-in.
protocol TestNATSServer: Sendable {
    var url: String { get }
}

extension NATSServerProcess: TestNATSServer {}
extension ResettingNATSServer: TestNATSServer {}

/// Starts `instances`, runs `body`, and shuts them down (also when `body` throws).
func withFleet(_ instances: [FleetInstance], _ body: () async throws -> Void) async throws {
    do {
        for instance in instances { try await instance.start() }
        try await body()
    } catch {
        for instance in instances { await instance.herald.shutdown() }
        throw error
    }
    for instance in instances {
        await instance.herald.shutdown()
        #expect(instance.receiver.state == .closed)
        #expect(instance.herald.loop.statistics.liveHandles == 0)
    }
}

func body(token: String, n: Int) -> String { #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# }
func body(topic: String, n: Int) -> String { #"{"message": {"topic": "\#(topic)", "data": {"n": "\#(n)"}}}"# }

@Suite("NATSReceiver: a fleet of instances over a real nats-server with JetStream", .serialized)
struct NATSReceiverTests {
    @Test("token messages reach the instance of the token only, through JetStream, each acknowledged")
    func tokenDelivery() async throws {
        let server = try NATSServerProcess()
        let first = try FleetInstance(server: server)
        let second = try FleetInstance(server: server)
        try await withFleet([first, second]) {
            #expect(first.receiver.state == .connected)
            let client = try NATSPublisher(url: server.url)
            let firstSubject = try await first.tokenSubject()
            let secondSubject = try await second.tokenSubject()
            let firstToken = try await first.token()
            let secondToken = try await second.token()
            for n in 0..<5 { try client.publishStored(firstSubject, body(token: firstToken, n: n)) }
            for n in 100..<103 { try client.publishStored(secondSubject, body(token: secondToken, n: n)) }
            #expect(await eventually { first.collector.numbers.count == 5 && second.collector.numbers.count == 3 })
            #expect(Set(first.collector.numbers) == Set((0..<5).map(String.init)))
            #expect(Set(second.collector.numbers) == Set((100..<103).map(String.init)))
            #expect(await eventually { first.receiver.statistics.acknowledged == 5 && second.receiver.statistics.acknowledged == 3 })
            // Work-queue retention: acknowledged messages leave the stream.
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
            // A message for a token no instance has is kept for its owner, and reaches no one here.
            try client.publishStored(NATSSubjects.token(project: "demo", token: "nobody"), body(token: "nobody", n: 999))
            try await first.receiver.flush()
            #expect(!first.collector.numbers.contains("999") && !second.collector.numbers.contains("999"))
        }
    }

    /// A publisher to the token stream, made first with a one-second duplicate window, so that JetStream stores one
    /// publish twice once the window has passed.
    func publisherToShortWindowStream(_ server: NATSServerProcess) throws -> NATSPublisher {
        var short = NATSReceiver.Options(servers: [server.url])
        short.duplicateWindow = .seconds(1)
        let client = try NATSPublisher(url: server.url)
        try client.ensureStream(project: "demo", options: short)
        return client
    }

    @Test("one publish JetStream stored twice (one Nats-Msg-Id, two stream sequences, as around a leader's change) is handled once")
    func secondStoredCopy() async throws {
        let server = try NATSServerProcess()
        let client = try publisherToShortWindowStream(server)
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            let subject = try await instance.tokenSubject()
            let token = try await instance.token()
            let first = try client.publishStored(subject, body(token: token, n: 1), messageID: "campaign-1")
            #expect(await eventually { instance.collector.numbers == ["1"] })
            // The publisher's retry, until JetStream's window has passed and it stores the publish again.
            let second = try await eventuallyValue {
                let id = try client.publishStored(subject, body(token: token, n: 1), messageID: "campaign-1")
                return id != first ? id : nil
            }
            try #require(second != nil, "JetStream never stored the publish a second time")
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 }, "the copy was not acknowledged")
            #expect(instance.receiver.statistics.duplicatesDropped == 1)
            try client.publishStored(subject, body(token: token, n: 2), messageID: "campaign-2")
            #expect(await eventually { instance.collector.numbers.count == 2 })
            #expect(instance.collector.numbers == ["1", "2"])
        }
    }

    @Test(
        "the publishes remembered for second stored copies are bounded: past the limit the oldest is forgotten (its copy is handled again), the newest still recognised"
    )
    func rememberedPublishesBounded() async throws {
        let server = try NATSServerProcess()
        let client = try publisherToShortWindowStream(server)
        let instance = try FleetInstance(server: server) { $0.recentPublishLimit = 4 }
        try await withFleet([instance]) {
            let subject = try await instance.tokenSubject()
            let token = try await instance.token()
            var ids: [String] = []
            for n in 1...6 { ids.append(try client.publishStored(subject, body(token: token, n: n), messageID: "publish-\(n)")) }
            #expect(await eventually { instance.collector.numbers.count == 6 })
            // Once JetStream's window has passed it stores a publisher's retry again: of the first and the last publish.
            for (n, first) in [(6, ids[5]), (1, ids[0])] {
                let again = try await eventuallyValue {
                    let id = try client.publishStored(subject, body(token: token, n: n), messageID: "publish-\(n)")
                    return id != first ? id : nil
                }
                try #require(again != nil, "JetStream never stored publish \(n) a second time")
            }
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
            // The last is remembered: its copy dropped. The first was forgotten (4 kept): its copy handled again.
            #expect(instance.receiver.statistics.duplicatesDropped == 1)
            #expect(await eventually { instance.collector.numbers.count == 7 })
            #expect(instance.collector.numbers.sorted() == ["1", "1", "2", "3", "4", "5", "6"])
        }
    }

    @Test("two publishes of one Nats-Msg-Id stored further apart than the window are two messages, though taken together from a backlog")
    func sameIDStoredApart() async throws {
        let server = try NATSServerProcess()
        let client = try publisherToShortWindowStream(server)
        // The instance's store outlives it: the one started later has the same token and consumer.
        let store = InMemoryStore()
        let away = try FleetInstance(server: server, store: store) { $0.duplicateWindow = .seconds(1) }
        var subject = ""
        var token = ""
        try await withFleet([away]) {
            subject = try await away.tokenSubject()
            token = try await away.token()
        }
        let first = try client.publishStored(subject, body(token: token, n: 1), messageID: "daily-greeting")
        // The same send again once JetStream's window has passed: JetStream stores it as a new message.
        let second = try await eventuallyValue {
            let id = try client.publishStored(subject, body(token: token, n: 1), messageID: "daily-greeting")
            return id != first ? id : nil
        }
        try #require(second != nil, "JetStream never stored the publish a second time")
        let back = try FleetInstance(server: server, store: store) { $0.duplicateWindow = .seconds(1) }
        try await withFleet([back]) {
            #expect(await eventually { back.collector.numbers.count == 2 }, "handled: \(back.collector.numbers)")
            #expect(back.receiver.statistics.duplicatesDropped == 0)
        }
    }

    @Test("start fails with an error naming the servers when none answers, and naming JetStream when it is off")
    func startFailures() async throws {
        let port = try freeLoopbackPort()
        let herald = Herald(configuration: Herald.Configuration(senderID: "1"))
        try herald.register(NATSReceiver(options: NATSReceiver.Options(servers: ["nats://127.0.0.1:\(port)"])))
        await #expect {
            try await herald.start()
        } throws: { error in
            "\(error)".contains("cannot connect to NATS at nats://127.0.0.1:\(port)")
        }
        #expect(herald.loop.statistics.liveHandles == 0)

        let server = try NATSServerProcess(jetStream: false)
        let plain = Herald(configuration: Herald.Configuration(senderID: "1"))
        let receiver = NATSReceiver(options: NATSReceiver.Options(servers: [server.url]))
        try plain.register(receiver)
        await #expect {
            try await plain.start()
        } throws: { error in
            "\(error)".contains("JetStream")
        }
        #expect(receiver.state == .closed)
        #expect(plain.loop.statistics.liveHandles == 0)
    }

    @Test(
        "token rotation moves the durable consumer to the new token's subject and the registration; the old token's messages reach no one")
    func tokenRotation() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            let client = try NATSPublisher(url: server.url)
            let oldToken = try await instance.token()
            let oldSubject = try await instance.tokenSubject()
            try client.publishStored(oldSubject, body(token: oldToken, n: 1))
            #expect(await eventually { instance.collector.numbers == ["1"] })
            #expect(try client.isRegistered(token: oldToken, project: "demo"))
            try await instance.herald.deleteToken()
            let newToken = try await instance.token()
            // The registrations bucket follows the rotation.
            #expect(try client.isRegistered(token: newToken, project: "demo"))
            #expect(try !client.isRegistered(token: oldToken, project: "demo"))
            #expect(try !client.isRegistered(token: "dUnknownInstallation:xyz", project: "demo"))
            #expect(newToken != oldToken)
            #expect(newToken.hasPrefix(String(oldToken.split(separator: ":")[0])), "one installation, one durable consumer")
            try client.publishStored(oldSubject, body(token: oldToken, n: 2))
            try client.publishStored(try await instance.tokenSubject(), body(token: newToken, n: 3))
            #expect(await eventually { instance.collector.numbers == ["1", "3"] })
            try await instance.receiver.flush()
            #expect(instance.collector.numbers == ["1", "3"])
            // The old token's message waits in the stream for a consumer that no longer exists; message 3 leaves it
            // once the server has processed its acknowledgement (the flush's round trip does not wait for that).
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 1 })
        }
    }

    @Test("shutdown while the server is away (reconnecting) finishes cleanly, every handle closed")
    func shutdownWhileReconnecting() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await instance.start()
        server.stop()
        #expect(await eventually { instance.receiver.state == .reconnecting })
        // A few reconnect attempts first: a listener on the server's port counts them (and ends each at once).
        let port = server.port
        let attempts = try await onOwnThread { try acceptAndClose(port: port, count: 3, within: .seconds(10)) }
        #expect(attempts == 3)
        await instance.herald.shutdown()
        #expect(instance.receiver.state == .closed)
        #expect(instance.herald.loop.statistics.liveHandles == 0)
    }

    @Test("a restarted instance whose consumer is still bound to its old connection subscribes once the server lets that go")
    func consumerStillBound() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-bound") { directory in
            // Two instances of one installation (one data directory): the second starts while the first still holds
            // the token's consumer, as a restarted daemon can before the server has seen the old connection end.
            let old = try FleetInstance(server: server, store: try SQLiteStore(directory: directory + "/old"))
            try await old.start()
            let oldToken = try await old.token()
            // The same installation: a copy of its store (one store has the inbox's log open at a time, and the old
            // instance keeps its own; the old process's end would have let it go).
            try FileManager.default.copyItem(atPath: directory + "/old", toPath: directory + "/new")
            let new = try FleetInstance(server: server, store: try SQLiteStore(directory: directory + "/new"))
            async let started: Void = new.start()
            // The old instance lets its consumer go only once the new one was refused it at least once.
            #expect(await eventually { new.receiver.statistics.boundConsumerRetries > 0 }, "the consumer was never found bound")
            await old.herald.shutdown()
            try await started
            #expect(new.receiver.state == .connected)
            let token = try await new.token()
            #expect(token == oldToken)
            try NATSPublisher(url: server.url).publishStored(try await new.tokenSubject(), body(token: token, n: 1))
            #expect(await eventually { new.collector.numbers == ["1"] })
            await new.herald.shutdown()
        }
    }

    @Test("a deleted token (auto-init off) leaves the registrations bucket and the stream's consumers")
    func tokenDeletion() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server, autoInit: false)
        try await withFleet([instance]) {
            let client = try NATSPublisher(url: server.url)
            let token = try await instance.token()
            #expect(await eventually { (try? client.isRegistered(token: token, project: "demo")) == true })
            try client.publishStored(try await instance.tokenSubject(), body(token: token, n: 1))
            #expect(await eventually { instance.collector.numbers == ["1"] })
            try await instance.herald.deleteToken()
            #expect(try !client.isRegistered(token: token, project: "demo"))
            try client.publishStored(NATSSubjects.token(project: "demo", token: token), body(token: token, n: 2))
            try await instance.receiver.flush()
            #expect(instance.collector.numbers == ["1"])
        }
    }

    @Test("without the durable inbox, a JetStream message is acknowledged only once its handlers have finished")
    func ackAfterHandlers() async throws {
        let server = try NATSServerProcess()
        let held = HeldHandler()
        let gate = held.gate
        let instance = try FleetInstance(server: server, plugins: [held])
        try await withFleet([instance]) {
            let client = try NATSPublisher(url: server.url)
            try client.publishStored(try await instance.tokenSubject(), body(token: try await instance.token(), n: 1))
            #expect(await eventually { gate.arrived == 1 })
            try await instance.receiver.flush()
            #expect(instance.receiver.statistics.acknowledged == 0)
            #expect(try client.storedMessages(stream: "HERALD_DEMO") == 1)
            gate.open()
            #expect(await eventually { instance.receiver.statistics.acknowledged == 1 })
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
        }
    }

    @Test("bus full: topic messages are held in order until it has room, stored ones come again later; none lost")
    func backpressure() async throws {
        let server = try NATSServerProcess()
        let held = HeldHandler()
        let gate = held.gate
        let instance = try FleetInstance(server: server, plugins: [held], maxInFlight: 4)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            let client = try NATSPublisher(url: server.url)
            let token = try await instance.token()
            for n in 0..<20 {
                try client.publish(NATSSubjects.topic(project: "demo", topic: "news"), body(topic: "news", n: n), flush: false)
            }
            for n in 100..<110 { try client.publishStored(try await instance.tokenSubject(), body(token: token, n: n)) }
            #expect(await eventually { gate.arrived == 4 })
            try await instance.receiver.flush()
            #expect(gate.arrived == 4)
            gate.open()
            #expect(await eventually { instance.collector.numbers.count == 30 })
            let topics = instance.collector.numbers.compactMap(Int.init).filter { $0 < 100 }
            #expect(topics == Array(0..<20), "held topic messages keep their order")
            let expected: Set<String> = Set((0..<20).map { String($0) }).union((100..<110).map { String($0) })
            #expect(Set(instance.collector.numbers) == expected)
            #expect(instance.receiver.statistics.redeliveryRequested > 0)
        }
    }

    @Test("topic messages fan out to exactly the subscribed instances, once each")
    func topicFanOut() async throws {
        let server = try NATSServerProcess()
        let instances = try (0..<3).map { _ in try FleetInstance(server: server) }
        try await withFleet(instances) {
            try await instances[0].subscribe("news")
            try await instances[1].subscribe("news")
            try await instances[2].subscribe("sports")
            let client = try NATSPublisher(url: server.url)
            for n in 0..<4 { try client.publish(NATSSubjects.topic(project: "demo", topic: "news"), body(topic: "news", n: n)) }
            #expect(await eventually { instances[0].collector.numbers.count == 4 && instances[1].collector.numbers.count == 4 })
            try await instances[2].receiver.flush()
            #expect(instances[2].collector.numbers.isEmpty)
            #expect(instances[0].collector.numbers.sorted() == ["0", "1", "2", "3"])
            // Unsubscribing takes the instance off the subject.
            try await instances[0].herald.unsubscribe(fromTopic: "news")
            try await instances[0].receiver.flush()
            try client.publish(NATSSubjects.topic(project: "demo", topic: "news"), body(topic: "news", n: 4))
            #expect(await eventually { instances[1].collector.numbers.count == 5 })
            try await instances[0].receiver.flush()
            #expect(instances[0].collector.numbers.count == 4)
        }
    }

    @Test("shared work: three instances in a queue group handle every message exactly once between them")
    func sharedWork() async throws {
        let server = try NATSServerProcess()
        let instances = try (0..<3).map { _ in try FleetInstance(server: server) { $0.topicDelivery = .shared(group: "workers") } }
        try await withFleet(instances) {
            for instance in instances { try await instance.subscribe("jobs") }
            let client = try NATSPublisher(url: server.url)
            let count = 60
            for n in 0..<count { try client.publish(NATSSubjects.topic(project: "demo", topic: "jobs"), body(topic: "jobs", n: n)) }
            #expect(await eventually { instances.map(\.collector.numbers.count).reduce(0, +) == count })
            for instance in instances { try await instance.receiver.flush() }
            let all = instances.flatMap(\.collector.numbers)
            #expect(all.count == count)
            #expect(Set(all) == Set((0..<count).map(String.init)))
            // Split, not copied: more than one instance took part (all 60 going to one of three is ~1e-28 likely).
            #expect(instances.filter { !$0.collector.numbers.isEmpty }.count > 1)
        }
    }

    @Test("bad input: a request gets the FCM error on its reply subject, a stored message is terminated, the instance goes on")
    func badInput() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.topic(project: "demo", topic: "news")

            let malformed = try JSONParser.parse(Array(try client.request(subject, "not json").utf8))
            #expect(malformed["error"]?["status"] == "INVALID_ARGUMENT")
            let wrongType = try JSONParser.parse(
                Array(try client.request(subject, #"{"message": {"topic": "news", "data": {"n": 1}}}"#).utf8))
            #expect(wrongType["error"]?["status"] == "INVALID_ARGUMENT")
            let unknownField = try JSONParser.parse(
                Array(try client.request(subject, #"{"message": {"topic": "news", "colour": "red"}}"#).utf8))
            #expect(unknownField["error"]?["status"] == "INVALID_ARGUMENT")
            let good = try JSONParser.parse(Array(try client.request(subject, body(topic: "news", n: 1)).utf8))
            #expect(good["name"]?.stringValue?.hasPrefix("projects/demo/messages/") == true)

            let token = try await instance.token()
            let tokenSubject = try await instance.tokenSubject()
            try client.publishStored(tokenSubject, "{not json")
            try client.publishStored(tokenSubject, #"{"message": {"token": "someone-else", "data": {"n": "2"}}}"#)
            try client.publishStored(tokenSubject, body(token: token, n: 3))
            #expect(await eventually { instance.collector.numbers.sorted() == ["1", "3"] })
            #expect(await eventually { instance.receiver.statistics.terminated == 2 })
            #expect(instance.receiver.statistics.invalid == 4)
            // The handler sees message 3 before the receiver acknowledges it (after its handlers finish).
            #expect(await eventually { instance.receiver.statistics.acknowledged == 1 })
            // Terminated messages are not delivered again: the stream is empty.
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
        }
    }

    // A killed server with unread acks resets the connection; the receiver's socket may still hold data in front of
    // the reset (under the sanitizers' timing it did, and cnats's own libuv adapter then stopped reading for good:
    // see resetWithBufferedData, which forces that case).
    @Test(
        "nats-server stopped (SIGTERM) or killed (SIGKILL) under load and started again: the receiver reconnects and every stored message is handled",
        arguments: [false, true])
    func serverRestart(killed: Bool) async throws {
        let server = try NATSServerProcess()
        let sink = RecordingSink()
        // The production ack-wait (30 s): a message left waiting for it misses the 10 s bound below.
        let instance = try FleetInstance(server: server, plugins: [sink]) { $0.ackWait = .seconds(30) }
        try await withFleet([instance]) {
            let token = try await instance.token()
            let subject = try await instance.tokenSubject()
            var client = try NATSPublisher(url: server.url)
            let count = 300
            var stored = Set<Int>()
            var restarted = ContinuousClock.now
            for n in 0..<count {
                if n == count / 2 {
                    if killed { server.kill() } else { server.stop() }
                    try server.start()
                    restarted = .now
                }
                // The sender retries (on a new connection) until JetStream confirms storage, for up to 10 s; the
                // message ID makes retries one message.
                let sender = Locked(client)
                let confirmed = await eventually {
                    if (try? sender.withLock { $0 }.publishStored(subject, body(token: token, n: n), messageID: "m\(n)")) != nil {
                        return true
                    }
                    if let fresh = try? NATSPublisher(url: server.url) { sender.withLock { $0 = fresh } }
                    return false
                }
                try #require(confirmed, "JetStream did not confirm message \(n)")
                stored.insert(n)
                client = sender.withLock { $0 }
            }
            #expect(stored.count == count)
            let handled: @Sendable () -> Set<String> = { Set(instance.collector.numbers) }
            let all = Set((0..<count).map(String.init))
            // Within seconds of the restart, far inside one ack-wait, every message stored after it is handled (JetStream
            // pushes as soon as the receiver is subscribed again), and the receiver holds nothing it took: every
            // delivery it received is settled (acknowledged, handed back or terminated).
            let afterRestart = Set((count / 2..<count).map(String.init))
            #expect(
                await eventually(timeout: restarted + .seconds(10) - .now) { handled().isSuperset(of: afterRestart) },
                "receiver: \(instance.receiver.statistics); handled \(handled().intersection(afterRestart).count) of \(afterRestart.count)")
            let inTime = await eventually(timeout: restarted + .seconds(10) - .now) { handled().count == count }
            #expect(
                await eventually(timeout: .seconds(5)) {
                    let statistics = instance.receiver.statistics
                    return statistics.received == statistics.acknowledged + statistics.redeliveryRequested + statistics.terminated
                }, "receiver: \(instance.receiver.statistics); handled \(handled().count) of \(count)")
            if !inTime {
                // Messages the receiver never received: JetStream counted them delivered and did not send them.
                // nats-server 2.9 drops what a stream still has queued for delivery when it stops, and restores those
                // messages as delivered and unacknowledged: they come again once the ack-wait runs out.
                print("serverRestart(killed: \(killed)): \(all.subtracting(handled()).sorted()) wait for the ack-wait")
            }
            #expect(
                await eventually(timeout: restarted + instance.receiver.options.ackWait + .seconds(10) - .now) { handled() == all },
                "receiver: \(instance.receiver.statistics); handled \(handled().count) of \(count)")
            // cnats calls the reconnected callback on a thread of its own, and may do so after messages flow again.
            #expect(await eventually { instance.receiver.state == .connected && instance.receiver.statistics.reconnects >= 1 })
            // The connection's changes are diagnostic events too.
            #expect(
                await eventually {
                    let states = sink.events(named: .diagnostic).filter { $0.parameters["detail"] == "nats_connection" }.compactMap {
                        $0.parameters["state"]
                    }
                    return states.starts(with: ["reconnecting", "connected"])
                })
        }
    }

    @Test(
        "a reset with data still buffered (epoll reports the error before the last reads): the receiver reads up to the reset and reconnects at once, not when the PINGs run out"
    )
    func resetWithBufferedData() async throws {
        let server = try ResettingNATSServer()
        defer { server.stop() }
        // The default PING interval (20 s): only reading up to the reset can find it within the 10 s below.
        let instance = try FleetInstance(server: server) { $0.tokenDelivery = false }
        try await withFleet([instance]) {
            #expect(instance.receiver.state == .connected)
            server.reset()
            #expect(await eventually(timeout: .seconds(10)) { instance.receiver.statistics.reconnects >= 1 && server.connections >= 2 })
            #expect(instance.receiver.state == .connected)
        }
    }

    @Test(
        "a server that stops answering (SIGSTOP) but keeps the socket open: unanswered PINGs make the connection stale, the receiver reconnects once the server answers again and goes on handling messages"
    )
    func silentServer() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server) { options in
            options.pingInterval = .milliseconds(100)
            options.maxPingsOut = 2
        }
        try await withFleet([instance]) {
            let token = try await instance.token()
            let subject = try await instance.tokenSubject()
            try NATSPublisher(url: server.url).publishStored(subject, body(token: token, n: 1))
            #expect(await eventually { instance.collector.numbers == ["1"] })
            server.pause()
            // No FIN, no RST: only the PINGs can tell.
            #expect(await eventually(timeout: .seconds(10)) { instance.receiver.state == .reconnecting })
            server.resume()
            #expect(await eventually(timeout: .seconds(30)) { instance.receiver.state == .connected })
            #expect(instance.receiver.statistics.reconnects >= 1)
            try NATSPublisher(url: server.url).publishStored(subject, body(token: token, n: 2))
            #expect(await eventually(timeout: .seconds(30)) { Set(instance.collector.numbers) == ["1", "2"] })
        }
    }
}

/// Listens on loopback `port`, accepts up to `count` connections and closes each at once (a server that is not
/// there yet, for a client's reconnect attempts), waiting at most `within`; returns how many it accepted.
func acceptAndClose(port: Int, count: Int, within limit: Duration) throws -> Int {
    let listener = try listenOnLoopback(port: port).fd
    defer { close(listener) }
    let deadline = ContinuousClock.now + limit
    var accepted = 0
    while accepted < count, ContinuousClock.now < deadline {
        guard readable(listener, within: millisecondsLeft(until: deadline)) else { continue }
        let connection = accept(listener, nil, nil)
        if connection >= 0 {
            close(connection)
            accepted += 1
        }
    }
    return accepted
}

@Suite("NATSReceiver: an independent NATS client (nats-py) as the sender", .serialized)
struct NATSPyTests {
    @Test("nats-py publishes through JetStream, requests and publishes on core NATS: handled like any sender")
    func natsPy() async throws {
        let python = try pythonEnvironment(with: "nats-py")
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            let token = try await instance.token()
            let script = repositoryRoot.appendingPathComponent("Tests/NATSPy/nats_py_publish.py").path
            let arguments = [script, "--url", server.url, "--project", "demo", "--token", token, "--topic", "news"]
            let result = try await runExecutable(python, arguments)
            #expect(result.status == 0, "nats_py_publish.py failed (exit \(result.status)):\n\(result.output)\(result.error)")
            #expect(await eventually { Set(instance.collector.numbers) == ["py-1", "py-2", "py-3"] })
            #expect(instance.receiver.statistics.invalid == 1)
        }
    }
}

@Suite("herald send --nats: publishing straight to NATS", .serialized)
struct SendOverNATSTests {
    @Test("a token message is answered once JetStream stored it and reaches its instance; a topic message is answered by the instance")
    func sendToTokenAndTopic() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await instance.subscribe("news")
            let token = try await instance.token()
            let sent = try await runBuiltExecutable(
                "herald", ["send", "--nats", server.url, "--project-id", "demo", "--token", token, "--data", "n=cli-1"])
            #expect(sent.status == 0, "\(sent.output)\(sent.error)")
            // The name carries the ID the receiver gives the stored message.
            #expect(sent.output.contains(#"projects/demo/messages/nats-HERALD_DEMO-"#))
            let topic = try await runBuiltExecutable(
                "herald", ["send", "--nats", server.url, "--project-id", "demo", "--topic", "news", "--data", "n=cli-2"])
            #expect(topic.status == 0, "\(topic.output)\(topic.error)")
            #expect(await eventually { Set(instance.collector.numbers) == ["cli-1", "cli-2"] })
            let storedID = try #require(
                instance.collector.messages.withLock { $0.first { $0.userInfo["n"]?.stringValue == "cli-1" } }?.messageID)
            #expect(sent.output.contains(storedID))

            let refused = try await runBuiltExecutable(
                "herald",
                [
                    "send", "--nats", server.url, "--project-id", "demo", "--topic", "news", "--data", "n=1", "--title", "x", "--body",
                    "y", "--validate-only",
                ])
            #expect(refused.status == 0, "validate-only is answered by the instance: \(refused.output)\(refused.error)")
        }
    }

    @Test("send --nats refuses a condition, and says so when no server answers")
    func refusals() async throws {
        let condition = try await runBuiltExecutable("herald", ["send", "--nats", "nats://127.0.0.1:1", "--condition", "'a' in topics"])
        #expect(condition.status != 0)
        #expect(condition.error.contains("a condition cannot be sent over NATS"))
        let port = try freeLoopbackPort()
        let unreachable = try await runBuiltExecutable(
            "herald", ["send", "--nats", "nats://127.0.0.1:\(port)", "--token", "t", "--data", "n=1"])
        #expect(unreachable.status != 0)
        #expect(unreachable.error.contains("cannot connect to NATS at nats://127.0.0.1:\(port)"))
    }
}
