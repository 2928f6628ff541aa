import Foundation
import Herald
import HeraldEventLoop
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("CachedStoreRead: the store read again only when another connection has committed")
struct CachedStoreReadTests {
    /// A read of the store's senders that counts its calls.
    final class CountingRead: Sendable {
        let directory: String
        let calls = Locked(0)
        init(directory: String) { self.directory = directory }

        func read() throws -> [String] {
            calls.withLock { $0 += 1 }
            return try SQLiteStore.senders(directory: directory).map { "\($0.name)\($0.revokedAt == nil ? "" : " revoked")" }
        }

        var count: Int { calls.withLock { $0 } }
    }

    func sender(_ name: String) -> StoredSender {
        StoredSender(name: name, secretHash: String(repeating: name, count: 64), scopes: "send", createdAt: 100)
    }

    @Test("unchanged: read once; a commit by the store's own connection, then by another store, each read again")
    func readsAgainAfterACommit() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.addSender(sender("a"))
            let counting = CountingRead(directory: directory)
            let cached = CachedStoreRead(directory: directory) { try counting.read() }
            #expect(try cached.value() == ["a"])
            #expect(try cached.value() == ["a"])
            #expect(try cached.value() == ["a"])
            #expect(counting.count == 1)

            try store.addSender(sender("b"))
            #expect(try cached.value() == ["a", "b"])
            #expect(try cached.value() == ["a", "b"])
            #expect(counting.count == 2)

            // Another connection (the command line's is one, in another process; SQLite tells them apart the same way).
            let other = try SQLiteStore(directory: directory)
            #expect(try other.revokeSender("a", now: 200))
            #expect(try cached.value() == ["a revoked", "b"])
            #expect(counting.count == 3)
            // A statement that changes nothing commits nothing: nothing to read.
            #expect(try !other.revokeSender("nobody", now: 300))
            #expect(try cached.value() == ["a revoked", "b"])
            #expect(counting.count == 3)
        }
    }

    @Test("callers at once on several threads while another connection commits: each gets a value the store held, the last the final one")
    func concurrentCallers() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            let counting = CountingRead(directory: directory)
            let cached = CachedStoreRead(directory: directory) { try counting.read() }
            let names = (0..<20).map { "s\($0)" }
            let seen = try await withThrowingTaskGroup(of: [[String]].self) { group in
                for _ in 0..<4 {
                    group.addTask { try (0..<200).map { _ in try cached.value() } }
                }
                group.addTask {
                    for name in names { try store.addSender(self.sender(name)) }
                    return []
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            // Every value is senders the store held at some moment: some of those added, none other; the last, all.
            let sorted = names.sorted()
            for value in seen { #expect(Set(value).isSubset(of: Set(sorted)), "\(value)") }
            #expect(try cached.value().sorted() == sorted)
        }
    }

    @Test("no store: read every time (and nothing kept); once a store is made, kept while it is unchanged")
    func noStoreYet() throws {
        try withTemporaryDirectory { directory in
            let counting = CountingRead(directory: directory)
            let cached = CachedStoreRead(directory: directory) { (try? counting.read()) ?? ["none"] }
            #expect(try cached.value() == ["none"])
            #expect(try cached.value() == ["none"])
            #expect(counting.count == 2)
            let store = try SQLiteStore(directory: directory)
            try store.addSender(sender("a"))
            #expect(try cached.value() == ["a"])
            #expect(try cached.value() == ["a"])
            #expect(counting.count == 3)
        }
    }

    @Test("a store replaced by another file (moved aside, restored) is opened anew and read")
    func storeReplaced() throws {
        try withTemporaryDirectory { directory in
            let replacement = directory + "/replacement"
            do {
                let store = try SQLiteStore(directory: replacement)
                try store.addSender(sender("z"))
            }
            let counting = CountingRead(directory: directory)
            let cached = CachedStoreRead(directory: directory) { try counting.read() }
            do {
                let store = try SQLiteStore(directory: directory)
                try store.addSender(sender("a"))
                #expect(try cached.value() == ["a"])
            }
            let path = SQLiteStore.path(inDirectory: directory)
            for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            #expect(rename(SQLiteStore.path(inDirectory: replacement), path) == 0)
            #expect(try cached.value() == ["z"])
            #expect(try cached.value() == ["z"])
            #expect(counting.count == 2)
        }
    }

    @Test("a read that throws is not kept: the next call reads again")
    func failedReadNotKept() throws {
        try withTemporaryDirectory { directory in
            _ = try SQLiteStore(directory: directory)
            let calls = Locked(0)
            struct Refused: Error {}
            let cached = CachedStoreRead(directory: directory) { () throws -> Int in
                let call = calls.withLock { calls in
                    calls += 1
                    return calls
                }
                if call == 1 { throw Refused() }
                return call
            }
            #expect(throws: Refused.self) { try cached.value() }
            #expect(try cached.value() == 2)
            #expect(try cached.value() == 2)
            #expect(calls.withLock { $0 } == 2)
        }
    }
}
