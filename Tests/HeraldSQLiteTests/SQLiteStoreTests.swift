import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("SQLiteStore on real SQLite files")
struct SQLiteStoreTests {
    // MARK: - Opening and migrations

    @Test("opening a missing directory creates it (0700) and an empty v1 store")
    func createsDirectoryAndSchema() throws {
        try withTemporaryDirectory { root in
            let directory = root + "/nested/data"
            let store = try SQLiteStore(directory: directory)
            #expect(store.path == directory + "/herald.sqlite")
            #expect(store.isDurable)
            #expect(FileManager.default.fileExists(atPath: store.path))
            let attributes = try FileManager.default.attributesOfItem(atPath: directory)
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o700)
            let state = try store.load(window: DeduplicationWindow(), now: 1_000)
            #expect(state.identity == nil && state.topics.isEmpty && state.seenMessageIDs.isEmpty && state.pending.isEmpty)
            #expect(try store.pragma("application_id") == String(0x4852_4C44))
        }
    }

    @Test("a new store's files are 0600, its write-ahead log and the inbox's log included: the registration token is in them")
    func fileModes() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.save(identity: StoredIdentity(installationID: "fid", token: "tok"))
            try store.commit(StoreBatch(accepted: [record(1)]), window: DeduplicationWindow(), now: 1)
            for file in ["herald.sqlite", "herald.sqlite-wal", "herald.sqlite-shm", "inbox.log"] {
                let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/" + file)
                #expect((attributes[.posixPermissions] as? NSNumber)?.uint16Value == 0o600, "\(file)")
            }
        }
    }

    @Test("an empty herald.sqlite is migrated like a missing one")
    func migratesEmptyFile() throws {
        try withTemporaryDirectory { directory in
            #expect(FileManager.default.createFile(atPath: directory + "/herald.sqlite", contents: Data()))
            let store = try SQLiteStore(directory: directory)
            try store.commit(StoreBatch(accepted: [record(1)]), window: DeduplicationWindow(), now: 5)
            #expect(try store.load(window: DeduplicationWindow(), now: 5).pending == [record(1)])
        }
    }

    @Test("the database runs in WAL mode with synchronous FULL, a busy timeout and foreign keys on")
    func pragmas() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            #expect(try store.pragma("journal_mode") == "wal")
            #expect(try store.pragma("synchronous") == "2")  // FULL
            #expect(try store.pragma("foreign_keys") == "1")
            #expect(try Int(store.pragma("busy_timeout") ?? "0") ?? 0 > 0)
        }
    }

    @Test("reopening keeps the identity, the topics, the pending records byte for byte and the window")
    func reopenKeepsEverything() throws {
        try withTemporaryDirectory { directory in
            let identity = StoredIdentity(
                installationID: "fid-1", token: "tok:1", deviceToken: "/run/herald.sock", tokenRetiredAt: 1_764_320_000_123)
            let binary = InboxRecord(
                messageID: "m-binary", userInfo: (0...255).map { UInt8($0) } + [0, 0, 255], targetKind: "topic", targetValue: "weather",
                collapseKey: "ck", priority: 5, expiration: 1_700_000_123_456, receivedAt: 1_700_000_000_001)
            let bare = InboxRecord(
                messageID: "m-bare", userInfo: Array(#"{"a":"é✓"}"#.utf8), targetKind: "token", targetValue: "tok:1", collapseKey: nil,
                priority: 10, expiration: nil, receivedAt: -1)
            do {
                let store = try SQLiteStore(directory: directory)
                try store.save(identity: identity)
                try store.setTopic("weather", subscribed: true)
                try store.setTopic("news", subscribed: true)
                try store.setTopic("gone", subscribed: true)
                try store.setTopic("gone", subscribed: false)
                try store.commit(StoreBatch(accepted: [binary, bare, record(3)]), window: DeduplicationWindow(), now: 10)
                try store.commit(StoreBatch(finished: ["m3"]), window: DeduplicationWindow(), now: 11)
            }
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: 12)
            #expect(state.identity == identity)
            #expect(state.topics == ["weather", "news"])
            #expect(state.pending == [binary, bare])
            #expect(state.seenMessageIDs == ["m-binary", "m-bare", "m3"])

            let noDevice = StoredIdentity(installationID: "fid-2", token: nil)
            try SQLiteStore(directory: directory).save(identity: noDevice)
            #expect(try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: 12).identity == noDevice)
        }
    }

    // MARK: - Commits

    @Test("accepted records become pending, finished ones leave, a repeated message ID replaces the entry")
    func commitSemantics() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow()
            try store.commit(StoreBatch(accepted: [record(1), record(2), record(3)]), window: window, now: 100)
            #expect(try store.load(window: window, now: 100).pending.map(\.messageID) == ["m1", "m2", "m3"])

            try store.commit(StoreBatch(accepted: [record(4)], finished: ["m2", "unknown"]), window: window, now: 101)
            #expect(try store.load(window: window, now: 101).pending.map(\.messageID) == ["m1", "m3", "m4"])

            // Accepted and finished in one batch: never pending, still seen.
            try store.commit(StoreBatch(accepted: [record(5)], finished: ["m5"]), window: window, now: 102)
            var replacement = record(1, size: 40)
            replacement.priority = 5
            replacement.collapseKey = "new"
            try store.commit(StoreBatch(accepted: [replacement]), window: window, now: 103)
            let state = try store.load(window: window, now: 103)
            #expect(state.pending == [record(3), record(4), replacement])
            #expect(state.seenMessageIDs == ["m2", "m3", "m4", "m5", "m1"])

            try store.commit(StoreBatch(), window: window, now: 104)
            #expect(try store.load(window: window, now: 104).pending.count == 3)
        }
    }

    @Test("a batch of 10,000 records commits in one call and reads back after reopening")
    func largeBatch() throws {
        try withTemporaryDirectory { directory in
            let records = (0..<10_000).map { record($0) }
            try SQLiteStore(directory: directory).commit(StoreBatch(accepted: records), window: DeduplicationWindow(), now: 50)
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: 50)
            #expect(state.pending == records)
            #expect(state.seenMessageIDs == records.map(\.messageID))
        }
    }

    @Test("setting a topic twice, or removing a missing one, is harmless")
    func topicsAreIdempotent() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.setTopic("a", subscribed: true)
            try store.setTopic("a", subscribed: true)
            try store.setTopic("b", subscribed: false)
            #expect(try store.load(window: DeduplicationWindow(), now: 0).topics == ["a"])
        }
    }

    // MARK: - The de-duplication window

    @Test("the window keeps only the newest maximumCount IDs")
    func countLimit() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow(maximumCount: 5, maximumAge: .seconds(3600))
            try store.commit(StoreBatch(accepted: (1...8).map { record($0) }), window: window, now: 1_000)
            #expect(try store.load(window: window, now: 1_000).seenMessageIDs == ["m4", "m5", "m6", "m7", "m8"])
            // Pruning the window never touches the inbox.
            #expect(try store.load(window: window, now: 1_000).pending.count == 8)
        }
    }

    @Test("the window drops IDs older than maximumAge, at commit and at load")
    func ageLimit() throws {
        try withTemporaryDirectory { directory in
            let window = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(60))
            let start: Int64 = 1_700_000_000_000
            do {
                let store = try SQLiteStore(directory: directory)
                try store.commit(StoreBatch(accepted: [record(1), record(2)]), window: window, now: start)
                try store.commit(StoreBatch(accepted: [record(3)]), window: window, now: start + 30_000)
                // Exactly at the limit is kept; one millisecond later is not.
                try store.commit(StoreBatch(accepted: [record(4)]), window: window, now: start + 60_000)
                #expect(try store.load(window: window, now: start + 60_000).seenMessageIDs == ["m1", "m2", "m3", "m4"])
                try store.commit(StoreBatch(accepted: [record(5)]), window: window, now: start + 60_001)
                #expect(try store.load(window: window, now: start + 60_001).seenMessageIDs == ["m3", "m4", "m5"])
            }
            // `load` prunes with its own window and time, and the pruning is stored.
            let store = try SQLiteStore(directory: directory)
            #expect(try store.load(window: window, now: start + 90_001).seenMessageIDs == ["m4", "m5"])
            let wide = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(86_400))
            #expect(try store.load(window: wide, now: start + 90_001).seenMessageIDs == ["m4", "m5"])
            #expect(
                try store.load(window: DeduplicationWindow(maximumCount: 1, maximumAge: .seconds(86_400)), now: start).seenMessageIDs == [
                    "m5"
                ])
        }
    }

    @Test("after many commits the window never holds more than maximumCount IDs")
    func windowNeverGrows() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(86_400))
            var next = 0
            for round in 0..<200 {
                let batch = (0..<7).map { _ in
                    defer { next += 1 }
                    return record(next)
                }
                try store.commit(StoreBatch(accepted: batch, finished: batch.map(\.messageID)), window: window, now: Int64(round))
                let seen = try store.load(window: window, now: Int64(round)).seenMessageIDs
                #expect(seen.count == min(next, 100))
                #expect(seen == ((next - seen.count)..<next).map { "m\($0)" })
            }
            #expect(try store.pragma("page_count").flatMap { Int($0) } ?? .max < 100)
        }
    }

    @Test("pending entries outlive the window: pruning by count or age never drops one, and finishing it removes it")
    func pendingOutlivesWindow() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow(maximumCount: 2, maximumAge: .seconds(60))
            try store.commit(StoreBatch(accepted: (1...5).map { record($0) }), window: window, now: 0)
            var state = try store.load(window: window, now: 0)
            #expect(state.seenMessageIDs == ["m4", "m5"])
            #expect(state.pending == (1...5).map { record($0) })

            try store.commit(StoreBatch(), window: window, now: 60_001)
            store.close()  // one writer at a time: the store below reads the files back
            state = try SQLiteStore(directory: directory).load(window: window, now: 60_001)
            #expect(state.seenMessageIDs.isEmpty)
            #expect(state.pending == (1...5).map { record($0) })

            try store.commit(StoreBatch(finished: ["m1", "m5"]), window: window, now: 60_002)
            #expect(try store.load(window: window, now: 60_002).pending == (2...4).map { record($0) })
        }
    }

    @Test("an ID accepted again moves to the newest end of the window, once; the window never exceeds its count")
    func repeatedIDInWindow() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow(maximumCount: 3, maximumAge: .seconds(3600))
            try store.commit(StoreBatch(accepted: [record(1), record(2), record(3)]), window: window, now: 1)
            try store.commit(StoreBatch(accepted: [record(1, size: 50)], finished: ["m2"]), window: window, now: 2)
            var state = try store.load(window: window, now: 2)
            #expect(state.seenMessageIDs == ["m2", "m3", "m1"])
            #expect(state.pending == [record(3), record(1, size: 50)])

            // `load` rewrote the window without the repeat, so the count is exact again.
            try store.commit(StoreBatch(accepted: [record(4)]), window: window, now: 3)
            store.close()  // one writer at a time: the store below reads the files back
            state = try SQLiteStore(directory: directory).load(window: window, now: 3)
            #expect(state.seenMessageIDs == ["m3", "m1", "m4"])
            #expect(state.pending.map(\.messageID) == ["m3", "m1", "m4"])

            // Until the next load, a repeat counts twice: the window may forget its oldest IDs early, never hold more.
            try store.commit(StoreBatch(accepted: [record(5), record(5)]), window: window, now: 4)
            let seen = try store.load(window: window, now: 4).seenMessageIDs
            #expect(seen.count <= 3 && Set(seen).count == seen.count && seen.suffix(2) == ["m4", "m5"])
            try store.commit(StoreBatch(accepted: [record(6), record(7)]), window: window, now: 5)
            #expect(try store.load(window: window, now: 5).seenMessageIDs == ["m5", "m6", "m7"])
        }
    }

    @Test("an ID accepted again and finished in the same batch is not pending")
    func acceptedAgainAndFinished() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow()
            try store.commit(StoreBatch(accepted: [record(1), record(2)]), window: window, now: 1)
            try store.commit(StoreBatch(accepted: [record(3), record(1, size: 60)], finished: ["m1", "m3"]), window: window, now: 2)
            let state = try store.load(window: window, now: 2)
            #expect(state.pending == [record(2)])
            #expect(state.seenMessageIDs == ["m2", "m3", "m1"])
        }
    }

    @Test("an ID with a NUL is kept whole, in the inbox and in the window, and finished only by its whole self")
    func idsWithNUL() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow()
            func cut(_ id: String, _ suffix: UInt8) -> InboxRecord {
                InboxRecord(
                    messageID: id + "\u{0}" + String(suffix), userInfo: [suffix], targetKind: "fid", targetValue: "f", collapseKey: nil,
                    priority: 10, expiration: nil, receivedAt: 1)
            }
            let long = "nats-HERALD_DEMO-12345-" + String(repeating: "x", count: 40)
            // A finished ID with another tail after the NUL is another ID.
            try store.commit(
                StoreBatch(accepted: [cut(long, 1), cut("short", 2), record(3)], finished: ["short\u{0}other"]), window: window, now: 1)
            store.close()  // one writer at a time: the store below reads the files back
            let state = try SQLiteStore(directory: directory).load(window: window, now: 1)
            #expect(state.pending.map(\.messageID) == [long + "\u{0}1", "short\u{0}2", "m3"])
            #expect(state.seenMessageIDs == [long + "\u{0}1", "short\u{0}2", "m3"])
            try store.commit(StoreBatch(finished: [long, "short\u{0}2"]), window: window, now: 2)
            #expect(try store.load(window: window, now: 2).pending.map(\.messageID) == [long + "\u{0}1", "m3"])
        }
    }

    @Test(
        "each record of a batch is stored with its own values: long then short, NULL between texts, empty and non-ASCII values; nothing of one row stays for the next"
    )
    func rowsKeepTheirOwnValues() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow()
            let records = [
                InboxRecord(
                    messageID: "long-" + String(repeating: "é", count: 300), userInfo: Array(repeating: 0x7B, count: 2_000),
                    targetKind: "condition", targetValue: "'a' in topics && 'b' in topics", collapseKey: String(repeating: "k", count: 100),
                    priority: 10, expiration: 5, receivedAt: 1),
                InboxRecord(
                    messageID: "s", userInfo: [], targetKind: "fid", targetValue: "", collapseKey: nil, priority: 5, expiration: nil,
                    receivedAt: 2),
                InboxRecord(
                    messageID: "天気", userInfo: [0, 1, 0], targetKind: "topic", targetValue: "ニュース", collapseKey: "c",
                    priority: 10, expiration: nil, receivedAt: 3),
            ]
            try store.commit(StoreBatch(accepted: records), window: window, now: 1)
            store.close()  // one writer at a time: the store below reads the files back
            let state = try SQLiteStore(directory: directory).load(window: window, now: 1)
            #expect(state.pending.map(\.messageID) == records.map(\.messageID))
            for (stored, record) in zip(state.pending, records) {
                #expect(stored == record, "\(record.messageID)")
            }
            // Finished one at a time, each by its own ID (the shorter after the longer).
            try store.commit(StoreBatch(finished: [records[0].messageID, records[1].messageID]), window: window, now: 2)
            #expect(try store.load(window: window, now: 2).pending.map(\.messageID) == ["天気"])
        }
    }

    @Test("a window entry stamped before an older-stamped one (the clock went back) is still pruned by age, for good")
    func clockWentBack() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(60))
            try store.commit(StoreBatch(accepted: [record(1)]), window: window, now: 100_000)
            try store.commit(StoreBatch(accepted: [record(2)]), window: window, now: 10_000)
            try store.commit(StoreBatch(accepted: [record(3)]), window: window, now: 100_001)
            #expect(try store.load(window: window, now: 80_000).seenMessageIDs == ["m1", "m3"])
            let wide = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(86_400))
            #expect(try store.load(window: wide, now: 100_002).seenMessageIDs == ["m1", "m3"])
            try store.commit(
                StoreBatch(accepted: [record(4)]), window: DeduplicationWindow(maximumCount: 2, maximumAge: .seconds(60)), now: 100_003)
            #expect(try store.load(window: wide, now: 100_003).seenMessageIDs == ["m3", "m4"])
        }
    }

    @Test("an empty userInfo and unusual message IDs read back as written")
    func unusualValues() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let empty = InboxRecord(
                messageID: "", userInfo: [], targetKind: "condition", targetValue: "'a' in topics", collapseKey: "", priority: 0,
                expiration: 0, receivedAt: 0)
            let unicode = InboxRecord(
                messageID: "0:1700000000000000%é✓ 🚀,\n\t", userInfo: [0], targetKind: "fid", targetValue: "f", collapseKey: nil,
                priority: 5,
                expiration: nil, receivedAt: Int64.max)
            try store.commit(StoreBatch(accepted: [empty, unicode]), window: DeduplicationWindow(), now: 1)
            store.close()  // one writer at a time: the store below reads the files back
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: 1)
            #expect(state.pending == [empty, unicode])
            #expect(state.seenMessageIDs == ["", unicode.messageID])
        }
    }

    @Test("the window and the inbox match a model over commits of every size, with reloads in between")
    func matchesModel() throws {
        try withTemporaryDirectory { directory in
            var generator = SplitMix64(seed: 7)
            let window = DeduplicationWindow(maximumCount: 50, maximumAge: .seconds(3600))
            var store = try SQLiteStore(directory: directory)
            var seen: [String] = []
            var pending: [InboxRecord] = []
            var next = 0
            for round in 0..<300 {
                let size = Int(generator.next() % 40)
                let accepted = (0..<size).map { _ in
                    defer { next += 1 }
                    return record(next, size: 20)
                }
                let candidates = pending + accepted
                let finished = candidates.filter { _ in generator.next() % 3 == 0 }.map(\.messageID)
                try store.commit(StoreBatch(accepted: accepted, finished: finished), window: window, now: Int64(round))
                seen = Array((seen + accepted.map(\.messageID)).suffix(50))
                pending = (pending + accepted).filter { !finished.contains($0.messageID) }
                if generator.next() % 10 == 0 {
                    store.close()  // one writer at a time: the store below reads the files back
                    store = try SQLiteStore(directory: directory)
                    let state = try store.load(window: window, now: Int64(round))
                    #expect(state.seenMessageIDs == seen)
                    #expect(state.pending == pending)
                }
            }
            let state = try store.load(window: window, now: 300)
            #expect(state.seenMessageIDs == seen)
            #expect(state.pending == pending)
        }
    }

    // MARK: - deleteAll

    @Test("deleteAll empties every table, leaves no trace in the files, and the store keeps working")
    func deleteAll() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let secret = Array("secret-personal-data-4711".utf8)
            var personal = record(1)
            personal.userInfo = secret
            try store.save(identity: StoredIdentity(installationID: "fid", token: "tok", deviceToken: "dev"))
            try store.setTopic("t", subscribed: true)
            try store.commit(StoreBatch(accepted: [personal] + (2...50).map { record($0) }), window: DeduplicationWindow(), now: 1)
            // The inbox's log as it was before the call, read through a descriptor of its own: the file the call
            // replaces must have been overwritten too, not only unlinked with the data still in its blocks.
            let logPath = directory + "/inbox.log"
            let former = open(logPath, O_RDONLY | O_CLOEXEC)
            try #require(former >= 0)
            defer { close(former) }
            var formerStatus = stat()
            #expect(fstat(former, &formerStatus) == 0)
            var formerBytes = [UInt8](repeating: 0, count: Int(formerStatus.st_size))
            #expect(pread(former, &formerBytes, formerBytes.count, 0) == formerBytes.count)
            let heldBefore = contains(formerBytes, secret)
            #expect(heldBefore)

            try store.deleteAll()
            let state = try store.load(window: DeduplicationWindow(), now: 2)
            #expect(state.identity == nil && state.topics.isEmpty && state.seenMessageIDs.isEmpty && state.pending.isEmpty)
            for suffix in ["", "-wal"] {
                let bytes = [UInt8]((try? Data(contentsOf: URL(fileURLWithPath: store.path + suffix))) ?? Data())
                #expect(!contains(bytes, secret), "herald.sqlite\(suffix) still holds deleted data")
            }
            let log = [UInt8]((try? Data(contentsOf: URL(fileURLWithPath: logPath))) ?? Data())
            #expect(log.count == InboxLog.headerSize, "inbox.log holds its header alone: \(log.count) bytes")
            #expect(pread(former, &formerBytes, formerBytes.count, 0) == formerBytes.count)
            let heldAfter = contains(formerBytes, secret)
            #expect(!heldAfter, "the former inbox.log still holds deleted data")

            try store.commit(StoreBatch(accepted: [record(9)]), window: DeduplicationWindow(), now: 3)
            try store.setTopic("u", subscribed: true)
            store.close()  // one writer at a time: the store below reads the files back
            let after = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: 3)
            #expect(after.pending == [record(9)] && after.topics == ["u"] && after.seenMessageIDs == ["m9"])
        }
    }

    // MARK: - Errors

    @Test("a data directory path that is a regular file is refused with cannotOpen naming it")
    func directoryIsAFile() throws {
        try withTemporaryDirectory { root in
            let file = root + "/not-a-directory"
            #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
            let error = #expect(throws: StoreError.self) { try SQLiteStore(directory: file) }
            guard case .cannotOpen(let path, let detail)? = error else {
                Issue.record("expected cannotOpen, got \(String(describing: error))")
                return
            }
            #expect(path == file)
            #expect(detail.contains("not a directory"))
            #expect(error?.description.contains(file) == true)

            let below = #expect(throws: StoreError.self) { try SQLiteStore(directory: file + "/data") }
            guard case .cannotOpen(let belowPath, _)? = below else {
                Issue.record("expected cannotOpen, got \(String(describing: below))")
                return
            }
            #expect(belowPath == file + "/data")
        }
    }

    @Test("a herald.sqlite of garbage bytes is refused as corrupt, and left as it was")
    func garbageIsCorrupt() throws {
        try withTemporaryDirectory { directory in
            var generator = SplitMix64(seed: 42)
            let garbage = Data((0..<8192).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
            let path = directory + "/herald.sqlite"
            #expect(FileManager.default.createFile(atPath: path, contents: garbage))
            let error = #expect(throws: StoreError.self) { try SQLiteStore(directory: directory) }
            guard case .corrupt(let errorPath, let detail)? = error else {
                Issue.record("expected corrupt, got \(String(describing: error))")
                return
            }
            #expect(errorPath == path)
            #expect(detail.contains("not a database"))
            #expect(FileManager.default.contents(atPath: path) == garbage)
        }
    }

    @Test(
        "each load counts a start for every pending entry; quarantined entries leave the inbox for the quarantine table, and deleteAll empties it"
    )
    func replaysAndQuarantine() throws {
        try withTemporaryDirectory { directory in
            let window = DeduplicationWindow()
            let store = try SQLiteStore(directory: directory)
            try store.commit(StoreBatch(accepted: [record(1), record(2)]), window: window, now: 10)
            #expect(try store.load(window: window, now: 11).replays == ["m1": 1, "m2": 1])
            try store.commit(StoreBatch(accepted: [record(3)], finished: ["m2"]), window: window, now: 12)
            store.close()  // one writer at a time: the store below reads the files back
            let reopened = try SQLiteStore(directory: directory)
            #expect(try reopened.load(window: window, now: 13).replays == ["m1": 2, "m3": 1])
            try reopened.commit(StoreBatch(quarantined: ["m1", "unknown"]), window: window, now: 14)
            let state = try reopened.load(window: window, now: 15)
            #expect(state.pending == [record(3)])
            #expect(state.replays == ["m3": 2])
            let quarantined = try reopened.quarantine()
            #expect(quarantined.count == 1)
            #expect(quarantined.first?.record == record(1))
            #expect(quarantined.first?.replays == 2 && quarantined.first?.quarantinedAt == 14)
            #expect(try SQLiteStore.quarantineSnapshot(directory: directory) == quarantined)
            // Release: all or none; a released entry is pending again with its count reset.
            #expect(try reopened.release(["m1", "m9"]) == ["m9"])
            #expect(try reopened.quarantine().count == 1)
            #expect(try reopened.release(["m1"]).isEmpty)
            #expect(try reopened.quarantine().isEmpty)
            let released = try reopened.load(window: window, now: 16)
            #expect(released.pending.map(\.messageID) == ["m3", "m1"])
            #expect(released.replays == ["m3": 3, "m1": 1])
            try reopened.commit(StoreBatch(quarantined: ["m3"]), window: window, now: 17)
            try reopened.deleteAll()
            #expect(try reopened.quarantine().isEmpty)
        }
    }

    @Test("a store from before the quarantine (schema v1) is migrated: its pending entries are kept and counted from there")
    func migratesV1Store() throws {
        try withTemporaryDirectory { directory in
            do {
                let store = try SQLiteStore(directory: directory)
                try store.commit(StoreBatch(accepted: [record(1)]), window: DeduplicationWindow(), now: 1)
                try store.execute(
                    sql: """
                        DROP TABLE quarantine;
                        ALTER TABLE inbox DROP COLUMN replays;
                        DELETE FROM grdb_migrations WHERE identifier = 'v2-quarantine';
                        """)
            }
            let store = try SQLiteStore(directory: directory)
            let state = try store.load(window: DeduplicationWindow(), now: 2)
            #expect(state.pending == [record(1)])
            #expect(state.replays == ["m1": 1])
            #expect(try store.quarantine().isEmpty)
        }
    }

    @Test("a store written by a newer Herald (an unknown migration) is refused with newerSchema")
    func newerSchema() throws {
        try withTemporaryDirectory { directory in
            do {
                let store = try SQLiteStore(directory: directory)
                try store.commit(StoreBatch(accepted: [record(1)]), window: DeduplicationWindow(), now: 1)
                try store.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v2-from-the-future')")
            }
            let error = #expect(throws: StoreError.self) { try SQLiteStore(directory: directory) }
            #expect(error == .newerSchema(path: directory + "/herald.sqlite", found: "v2-from-the-future"))
        }
    }

    @Test("a SQLite database of another application is refused as corrupt, not migrated")
    func otherApplication() throws {
        try withTemporaryDirectory { directory in
            do {
                let store = try SQLiteStore(directory: directory)
                try store.execute(
                    sql: """
                        DROP TABLE grdb_migrations; DROP TABLE identity; DROP TABLE topic; DROP TABLE inbox; DROP TABLE seen;
                        PRAGMA application_id = 0; CREATE TABLE customers (id INTEGER PRIMARY KEY)
                        """)
            }
            let error = #expect(throws: StoreError.self) { try SQLiteStore(directory: directory) }
            guard case .corrupt(_, let detail)? = error else {
                Issue.record("expected corrupt, got \(String(describing: error))")
                return
            }
            #expect(detail.contains("customers"))

            try SQLiteStore(directory: directory + "/b").execute(sql: "PRAGMA application_id = 42")
            let marked = #expect(throws: StoreError.self) { try SQLiteStore(directory: directory + "/b") }
            guard case .corrupt? = marked else {
                Issue.record("expected corrupt, got \(String(describing: marked))")
                return
            }
        }
    }

    @Test("a full disk fails the commit with writeFailed, loses nothing committed, and the store recovers")
    func diskFull() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let window = DeduplicationWindow()
            let before = (0..<20).map { record($0) }
            try store.save(identity: StoredIdentity(installationID: "fid", token: "tok"))
            try store.commit(StoreBatch(accepted: before), window: window, now: 1)

            let limit = try store.limitPages(1)
            #expect(limit > 1)
            let big = (1_000..<3_000).map { record($0) }
            let error = #expect(throws: StoreError.self) { try store.commit(StoreBatch(accepted: big), window: window, now: 2) }
            guard case .writeFailed(let path, let detail)? = error else {
                Issue.record("expected writeFailed, got \(String(describing: error))")
                return
            }
            // The inbox's log, where a commit writes.
            #expect(path == store.inboxLogPath)
            #expect(detail.contains("No space left on device"))
            // A load writes too (a start for every pending record): read back once there is room again.
            #expect(try store.limitPages(1_000_000_000) == 1_000_000_000)
            let unchanged = try store.load(window: window, now: 2)
            #expect(unchanged.pending == before)
            #expect(unchanged.seenMessageIDs == before.map(\.messageID))

            try store.commit(StoreBatch(accepted: big, finished: ["m0"]), window: window, now: 3)
            store.close()  // one writer at a time: the store below reads the files back
            let state = try SQLiteStore(directory: directory).load(window: window, now: 3)
            #expect(state.pending == Array(before.dropFirst()) + big)
            #expect(state.identity?.installationID == "fid")
        }
    }
}

// MARK: - Helpers

/// A record whose ID is `m<index>`, with a `size`-byte JSON `userInfo`.
private func record(_ index: Int, size: Int = 300) -> InboxRecord {
    let prefix = #"{"gcm.message_id":"m\#(index)","pad":""#
    let padding = String(repeating: "x", count: max(0, size - prefix.utf8.count - 2))
    return InboxRecord(
        messageID: "m\(index)", userInfo: Array((prefix + padding + #""}"#).utf8), targetKind: "token", targetValue: "tok",
        collapseKey: index.isMultiple(of: 2) ? "even" : nil, priority: 10, expiration: index.isMultiple(of: 3) ? Int64(index) * 1_000 : nil,
        receivedAt: 1_700_000_000_000 + Int64(index))
}

private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
}
