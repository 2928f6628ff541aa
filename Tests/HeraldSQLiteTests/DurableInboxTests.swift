import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("Identity and topics survive restarts (real SQLite files)", .serialized)
struct PersistentIdentityTests {
    @Test("the token is minted once, stable across restarts, told at every start; rotation is kept and the old token refused")
    func tokenAcrossRestarts() async throws {
        try await withDataDirectory { directory in
            let first = DurableRecorder()
            var token1 = ""
            var fid = ""
            try await withDurableHerald(directory: directory, plugins: [first]) { herald async throws in
                token1 = try await herald.token()
                fid = try await herald.installationID()
            }
            #expect(first.tokens == [token1])
            let second = DurableRecorder()
            var token2 = ""
            try await withDurableHerald(directory: directory, plugins: [second]) { herald async throws in
                #expect(try await herald.token() == token1)
                #expect(try await herald.installationID() == fid)
                try await herald.deleteToken()
                token2 = try await herald.token()
                #expect(token2 != token1)
            }
            #expect(second.tokens == [token1, token2])
            let third = DurableRecorder()
            try await withDurableHerald(directory: directory, plugins: [third]) { herald async throws in
                #expect(try await herald.token() == token2)
                #expect(await herald.deliver(dataMessage(id: "old", token: token1)).failureValue?.status == .unregistered)
                #expect((try? await herald.deliver(dataMessage(id: "new", token: token2)).get()) == "new")
            }
            #expect(third.tokens == [token2])
        }
    }

    @Test("topics and the device token persist; setting the same device token again is a no-op")
    func topicsAndDeviceToken() async throws {
        try await withDataDirectory { directory in
            try await withDurableHerald(directory: directory, plugins: []) { herald async throws in
                try await herald.subscribe(toTopic: "/topics/weather")
                try await herald.subscribe(toTopic: "news")
                try await herald.unsubscribe(fromTopic: "news")
                try await herald.setDeviceToken("unix:/run/herald.sock")
                try await herald.setDeviceToken("unix:/run/herald.sock")
                await #expect(throws: MessageError.self) { try await herald.subscribe(toTopic: "no spaces") }
            }
            try await withDurableHerald(directory: directory, plugins: []) { herald async throws in
                #expect(try await herald.subscribedTopics() == ["weather"])
                #expect(try await herald.deviceToken() == "unix:/run/herald.sock")
            }
        }
    }

    @Test("with auto-init off no token is minted until asked, then it is kept")
    func autoInitOff() async throws {
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1")
            configuration.isAutoInitEnabled = false
            let recorder = DurableRecorder()
            var minted = ""
            try await withDurableHerald(directory: directory, configuration: configuration, plugins: [recorder]) { herald async throws in
                #expect(recorder.tokens == [nil])
                minted = try await herald.token()
            }
            #expect(recorder.tokens == [nil, minted])
            try await withDurableHerald(directory: directory, configuration: configuration, plugins: []) { herald async throws in
                #expect(try await herald.token() == minted)
            }
        }
    }

    @Test("deleteData removes token, topics, inbox and window; a new identity is minted")
    func deleteData() async throws {
        try await withDataDirectory { directory in
            let recorder = DurableRecorder()
            try await withDurableHerald(directory: directory, plugins: [recorder]) { herald async throws in
                let oldToken = try await herald.token()
                let oldFID = try await herald.installationID()
                try await herald.subscribe(toTopic: "weather")
                _ = try await herald.deliver(dataMessage(id: "m1", token: oldToken)).get()
                try await herald.waitUntilIdle()
                try await herald.deleteData()
                let newToken = try await herald.token()
                #expect(newToken != oldToken)
                #expect(try await herald.installationID() != oldFID)
                #expect(try await herald.subscribedTopics().isEmpty)
                #expect(await herald.deliver(dataMessage(id: "m2", token: oldToken)).failureValue?.status == .unregistered)
                // The window was emptied too: the same message ID is new again.
                _ = try await herald.deliver(dataMessage(id: "m1", token: newToken)).get()
                try await herald.waitUntilIdle()
                #expect(recorder.messages.count == 2)
            }
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            #expect(state.topics.isEmpty)
        }
    }

    @Test("a store that cannot be opened stops start-up with an error naming the file")
    func badStore() async throws {
        try await withDataDirectory { directory in
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let file = directory + "/not-a-directory"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
            let error = #expect(throws: StoreError.self) { try SQLiteStore(directory: file) }
            #expect(error?.description.contains(file) == true)
            let garbage = directory + "/garbage"
            try FileManager.default.createDirectory(atPath: garbage, withIntermediateDirectories: true)
            #expect(
                FileManager.default.createFile(
                    atPath: garbage + "/herald.sqlite", contents: Data((0..<4096).map { _ in UInt8.random(in: 0...255) })))
            let corrupt = #expect(throws: StoreError.self) { try SQLiteStore(directory: garbage) }
            if case .corrupt? = corrupt {} else { Issue.record("garbage opened: \(String(describing: corrupt))") }
        }
    }
}

@Suite("The durable inbox: commit before acknowledging, replay after a stop, nothing lost", .serialized)
struct DurableInboxTests {
    @Test("messages are acknowledged once committed and the inbox is empty after they are handled")
    func commitAndFinish() async throws {
        try await withDataDirectory { directory in
            let recorder = DurableRecorder()
            try await withDurableHerald(directory: directory, plugins: [recorder]) { herald async throws in
                let token = try await herald.token()
                try await withThrowingTaskGroup(of: String.self) { group in
                    for index in 0..<500 {
                        group.addTask { try await herald.deliver(dataMessage(id: "m\(index)", token: token)).get() }
                    }
                    var acknowledged = 0
                    for try await _ in group { acknowledged += 1 }
                    #expect(acknowledged == 500)
                }
                try await herald.waitUntilIdle()
                #expect(Set(recorder.messages.compactMap(\.messageID)).count == 500)
                #expect(recorder.messages.allSatisfy { !$0.isReplay })
            }
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            #expect(state.pending.isEmpty)
            #expect(state.seenMessageIDs.count == 500)
        }
    }

    @Test("messages accepted but unfinished at a stop are replayed once at the next start, flagged; resends are duplicates")
    func replayAfterStop() async throws {
        try await withDataDirectory { directory in
            let holding = DurableRecorder(holding: true)
            var token = ""
            try await withDurableHerald(directory: directory, shutdownGrace: .milliseconds(50), plugins: [holding]) { herald async throws in
                token = try await herald.token()
                for index in 0..<50 {
                    _ = try await herald.deliver(dataMessage(id: "r\(index)", token: token)).get()
                }
            }
            let recorder = DurableRecorder()
            try await withDurableHerald(directory: directory, plugins: [recorder]) { herald async throws in
                try await herald.waitUntilIdle()
                #expect(recorder.messages.count == 50)
                #expect(recorder.messages.allSatisfy { $0.isReplay })
                for index in 0..<50 {
                    #expect((try? await herald.deliver(dataMessage(id: "r\(index)", token: token)).get()) == "r\(index)")
                }
                try await herald.waitUntilIdle()
                #expect(recorder.messages.count == 50)
            }
        }
    }

    @Test("expired entries and entries replaced by a newer one with the same collapse key are dropped at replay")
    func replayDropsExpiredAndCollapsed() async throws {
        try await withDataDirectory { directory in
            var token = ""
            try await withDurableHerald(directory: directory, plugins: []) { herald in token = try await herald.token() }
            let store = try SQLiteStore(directory: directory)
            let now = WallClock.nowMilliseconds()
            try store.commit(
                StoreBatch(accepted: [
                    InboxRecord(dataMessage(id: "expired", token: token, expiration: now / 1000 - 60), messageID: "expired"),
                    InboxRecord(dataMessage(id: "old-score", token: token, collapseKey: "score", payload: "1-0"), messageID: "old-score"),
                    InboxRecord(dataMessage(id: "new-score", token: token, collapseKey: "score", payload: "2-0"), messageID: "new-score"),
                    InboxRecord(dataMessage(id: "plain", token: token), messageID: "plain"),
                ]), window: DeduplicationWindow(), now: now)
            store.close()  // one writer at a time: the instance below opens the inbox's log
            let recorder = DurableRecorder()
            let sink = RecordingSink()
            try await withDurableHerald(directory: directory, plugins: [recorder, sink]) { herald async throws in
                try await herald.waitUntilIdle()
            }
            #expect(recorder.messages.compactMap(\.messageID).sorted() == ["new-score", "plain"])
            let drops = sink.events(named: .messageDropped).map { "\($0.messageID ?? ""):\($0.parameters["reason"] ?? "")" }.sorted()
            #expect(drops == ["expired:expired", "old-score:collapsed"])
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            #expect(state.pending.isEmpty)
        }
    }

    @Test("a newer message with the same collapse key replaces one still waiting for its commit")
    func collapseWhileWaiting() async throws {
        try await withDataDirectory { directory in
            let recorder = DurableRecorder()
            try await withDurableHerald(directory: directory, plugins: [recorder]) { herald async throws in
                let token = try await herald.token()
                let bus = try herald.bus
                let outcomes = Locked<[String]>([])
                try await herald.loop.submit {
                    for (id, score) in [("s1", "1-0"), ("s2", "2-0")] {
                        bus.deliver(dataMessage(id: id, token: token, collapseKey: "score", payload: score)) { outcome in
                            outcomes.withLock { $0.append((try? outcome.get()) ?? "refused") }
                        }
                    }
                }
                #expect(await eventually { outcomes.withLock { $0.count } == 2 })
                try await herald.waitUntilIdle()
                #expect(outcomes.withLock { $0 }.sorted() == ["s1", "s2"])
                #expect(recorder.messages.map { $0.userInfo["payload"] } == ["2-0"])
            }
        }
    }

    @Test("when the disk is full the senders are refused with UNAVAILABLE, and what was accepted before is kept")
    func diskFull() async throws {
        try await withDataDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let holding = DurableRecorder(holding: true)
            var configuration = Herald.Configuration(senderID: "1")
            configuration.shutdownGracePeriod = .milliseconds(50)
            let herald = Herald(configuration: patientShutdown(configuration), store: store)
            try herald.register(holding)
            try await herald.start()
            let token = try await herald.token()
            for index in 0..<10 { _ = try await herald.deliver(dataMessage(id: "kept\(index)", token: token)).get() }
            // SQLite never sets the limit below the pages in use: the file cannot grow from here, as on a full disk.
            #expect(try store.limitPages(1) > 1)
            let big = String(repeating: "y", count: 50_000)
            var refused = 0
            for index in 0..<20 {
                if case .failure(let error) = await herald.deliver(dataMessage(id: "big\(index)", token: token, payload: big)) {
                    #expect(error.status == .unavailable)
                    refused += 1
                }
            }
            #expect(refused > 0)
            _ = try store.limitPages(1_000_000)
            // A refused message can be sent again once the disk has room: it was never accepted.
            #expect((try? await herald.deliver(dataMessage(id: "big0", token: token, payload: big)).get()) == "big0")
            await herald.shutdown()
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            let pending = Set(state.pending.map(\.messageID))
            #expect((0..<10).allSatisfy { pending.contains("kept\($0)") })
            #expect(pending.contains("big0"))
        }
    }

    @Test("a retry of a message not yet committed, a message replaced by a newer one and its retry get that commit's outcome")
    func followersShareTheCommitOutcome() async throws {
        try await withDataDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let herald = Herald(configuration: patientShutdown(.init(senderID: "1")), store: store)
            let recorder = DurableRecorder()
            try herald.register(recorder)
            try await herald.start()
            let token = try await herald.token()
            #expect(try store.limitPages(1) > 1)
            let bus = try herald.bus
            let big = String(repeating: "z", count: 50_000)
            let outcomes = Locked<[String: String]>([:])
            try await herald.loop.submit {
                let record: (String) -> (DeliveryOutcome) -> Void = { label in
                    { outcome in outcomes.withLock { $0[label] = (try? outcome.get()).map { _ in "accepted" } ?? "refused" } }
                }
                bus.deliver(dataMessage(id: "m", token: token, payload: big), completion: record("first"))
                bus.deliver(dataMessage(id: "m", token: token, payload: big), completion: record("retry"))
                bus.deliver(dataMessage(id: "c1", token: token, collapseKey: "k", payload: big), completion: record("older"))
                bus.deliver(dataMessage(id: "c2", token: token, collapseKey: "k", payload: big), completion: record("newer"))
                bus.deliver(dataMessage(id: "c1", token: token, collapseKey: "k", payload: big), completion: record("older again"))
            }
            #expect(await eventually { outcomes.withLock { $0.count } == 5 })
            // The disk is full: nothing was stored, so no sender may hear "accepted".
            #expect(
                outcomes.withLock { $0 } == [
                    "first": "refused", "retry": "refused", "older": "refused", "newer": "refused", "older again": "refused",
                ])
            _ = try store.limitPages(1_000_000)
            // Nothing refused is remembered: each of those IDs is a new message now, delivered.
            #expect((try? await herald.deliver(dataMessage(id: "m", token: token)).get()) == "m")
            #expect((try? await herald.deliver(dataMessage(id: "c1", token: token, collapseKey: "k")).get()) == "c1")
            try await herald.waitUntilIdle()
            #expect(recorder.messages.compactMap(\.messageID) == ["m", "c1"])
            await herald.shutdown()
        }
    }

    @Test("the de-duplication window keeps at most its count across restarts")
    func windowLimits() async throws {
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1")
            configuration.deduplication = DeduplicationWindow(maximumCount: 20, maximumAge: .seconds(3600))
            let recorder = DurableRecorder()
            try await withDurableHerald(directory: directory, configuration: configuration, plugins: [recorder]) { herald async throws in
                let token = try await herald.token()
                for index in 0..<100 { _ = try await herald.deliver(dataMessage(id: "w\(index)", token: token)).get() }
                try await herald.waitUntilIdle()
            }
            let state = try SQLiteStore(directory: directory).load(window: configuration.deduplication, now: WallClock.nowMilliseconds())
            #expect(state.seenMessageIDs.count == 20)
            #expect(state.seenMessageIDs.last == "w99")
        }
    }

    @Test("an ID made on receipt (an FCM v1 send's) takes no place in the window: an ID a sender gave stays, across a restart too")
    func newIDsOutsideWindow() async throws {
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1")
            configuration.deduplication = DeduplicationWindow(maximumCount: 3, maximumAge: .seconds(3600))
            let given = SendContext(messageID: "given-1")
            let first = DurableRecorder()
            try await withDurableHerald(directory: directory, configuration: configuration, plugins: [first]) { herald async throws in
                let bus = try herald.bus
                let body = Array(fcmBody(token: try await herald.token(), data: ["a": "b"]).utf8)
                #expect(await bus.submit(body, given) == .accepted(messageID: "given-1"))
                var madeIDs: Set<String> = []
                for _ in 0..<10 {
                    let outcome = await bus.submit(body, SendContext())
                    guard case .accepted(let id) = outcome else {
                        Issue.record("not accepted: \(outcome)")
                        return
                    }
                    madeIDs.insert(id)
                }
                #expect(madeIDs.count == 10 && !madeIDs.contains("given-1"))
                // After ten new IDs the window of three still has the given one: its redelivery is a duplicate.
                #expect(await bus.submit(body, given) == .accepted(messageID: "given-1"))
                try await herald.waitUntilIdle()
                #expect(first.messages.count == 11)
                #expect(first.messages.filter { $0.messageID == "given-1" }.count == 1)
            }
            let state = try SQLiteStore(directory: directory).load(window: configuration.deduplication, now: WallClock.nowMilliseconds())
            #expect(state.seenMessageIDs == ["given-1"])
            let second = DurableRecorder()
            try await withDurableHerald(directory: directory, configuration: configuration, plugins: [second]) { herald async throws in
                let bus = try herald.bus
                let body = Array(fcmBody(token: try await herald.token(), data: ["a": "b"]).utf8)
                #expect(await bus.submit(body, given) == .accepted(messageID: "given-1"))
                try await herald.waitUntilIdle()
                #expect(second.messages.isEmpty, "the restored window knows the given ID")
            }
        }
    }
}
