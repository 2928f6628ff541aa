// InboxLayouts: what a group commit of the durable inbox costs, per message, in the store `herald serve` uses and in
// SQLite rows, at the group sizes a daemon sees (a commit per 8 requests over HTTP with 16 connections, hundreds on a
// pipelined socket).
//
//   InboxLayouts [--directory DIR] [--groups 1,8,16,64,256] [--seconds 3] [--layouts store,rows-keyed]
//
// Each commit does what the daemon's commit does for FCM v1 sends over HTTP: it stores the group's new records (the
// sample body's `userInfo`, IDs made on receipt, so no de-duplication window entries) and removes the previous group's,
// whose handlers have finished, then makes it durable. Layouts:
//
// - store: HeraldSQLite's `SQLiteStore.commit`, the daemon's own code: one checksummed frame appended to the inbox's
//   log (`inbox.log`) and one fdatasync per commit, compacted as the daemon's is.
// - rows-indexed, rows-indexed-pruned, rows-keyed, rows-keyed-pruned: the inbox as SQLite rows (how 0.1.0 kept it), on
//   a database of their own (WAL, synchronous = FULL, values bound through GRDB): `indexed` is 0.1.0's table (an
//   integer key, the message ID UNIQUE: two B-trees), `keyed` a `WITHOUT ROWID` table keyed by the message ID with the
//   order in a column (one B-tree); `pruned` also runs the four statements with which each of 0.1.0's commits checked
//   and pruned the de-duplication window.
//
// Printed per layout and group size: commits/s, µs of the committing thread's CPU per message (user, kernel) and µs
// of the whole machine's CPU per message (from /proc/stat: the kernel's journal thread and block-layer work
// included, so run it on an otherwise idle machine), and the mean latency of a commit.
import Foundation
import GRDB
import Glibc
import Herald
import HeraldSQLite

struct Options {
    var directory = FileManager.default.temporaryDirectory.path
    var groups = [1, 8, 16, 64, 256]
    var seconds = 3.0
    var layouts = ["store", "rows-keyed"]
}

var options = Options()
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    guard let value = arguments.next() else { fatalError("\(argument) needs a value") }
    switch argument {
    case "--directory": options.directory = value
    case "--groups": options.groups = value.split(separator: ",").compactMap { Int($0) }
    case "--seconds": options.seconds = Double(value) ?? 3
    case "--layouts": options.layouts = value.split(separator: ",").map(String.init)
    default: fatalError("unknown option \(argument)")
    }
}

/// The sample notification's `userInfo` as the inbox stores it (JSON bytes), 15-digit IDs as the daemon makes them.
let userInfo = Array(
    #"{"aps":{"alert":{"title":"Build finished","body":"main passed in 4m 12s; 1,204 tests, no failures"},"sound":"default","category":"BUILD"},"build":"8812","branch":"main","gcm.message_id":"0"}"#
        .utf8)
var nextID: UInt64 = 100_000_000_000_000
@MainActor func record() -> InboxRecord {
    nextID += 1
    var record = InboxRecord(
        messageID: String(nextID), userInfo: userInfo, targetKind: "token", targetValue: "registration-token-of-this-instance",
        collapseKey: nil, priority: 10, expiration: nil, receivedAt: 1_764_460_800_000)
    record.deduplicates = false
    return record
}

/// A layout: one commit of `accepted`, removing `finished`, durable when it returns.
protocol Layout {
    mutating func commit(accepted: [InboxRecord], finished: [String]) throws
}

struct StoreLayout: Layout {
    let store: SQLiteStore
    init(directory: String) throws { store = try SQLiteStore(directory: directory) }
    func commit(accepted: [InboxRecord], finished: [String]) throws {
        try store.commit(StoreBatch(accepted: accepted, finished: finished), window: DeduplicationWindow(), now: 1_764_460_800_000)
    }
}

final class RowsLayout: Layout {
    let queue: DatabaseQueue
    let keyed: Bool
    let prune: Bool
    var nextSeq: Int64 = 1

    init(path: String, keyed: Bool, prune: Bool) throws {
        self.keyed = keyed
        self.prune = prune
        queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = FULL")
            let columns = """
                user_info BLOB NOT NULL, target_kind TEXT NOT NULL, target_value TEXT NOT NULL, collapse_key TEXT,
                priority INTEGER NOT NULL, expiration INTEGER, received_at INTEGER NOT NULL
                """
            try db.execute(
                sql: keyed
                    ? "CREATE TABLE inbox (message_id TEXT NOT NULL PRIMARY KEY, seq INTEGER NOT NULL, \(columns)) STRICT, WITHOUT ROWID"
                    : "CREATE TABLE inbox (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, \(columns)) STRICT")
            try db.execute(
                sql: "CREATE TABLE seen (position INTEGER PRIMARY KEY, seen_at INTEGER NOT NULL, message_ids BLOB NOT NULL) STRICT")
        }
    }

    func commit(accepted: [InboxRecord], finished: [String]) throws {
        try queue.inTransaction(.immediate) { db in
            if prune {
                let newest = try Int64.fetchOne(db.cachedStatement(sql: "SELECT max(position) FROM seen")) ?? 0
                let firstKept = try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT position FROM seen WHERE seen_at >= ? ORDER BY position LIMIT 1"),
                    arguments: [1_764_374_400_000])
                if let firstKept {
                    try db.cachedStatement(sql: "DELETE FROM seen WHERE position < ?").execute(arguments: [firstKept])
                } else {
                    try db.cachedStatement(sql: "DELETE FROM seen").execute()
                }
                try db.cachedStatement(sql: "DELETE FROM seen WHERE position <= ?").execute(arguments: [newest - 10_000])
            }
            let delete = try db.cachedStatement(sql: "DELETE FROM inbox WHERE message_id = ?")
            for messageID in finished { try delete.execute(arguments: [messageID]) }
            let insert = try db.cachedStatement(
                sql: keyed
                    ? "INSERT OR REPLACE INTO inbox (message_id, seq, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    : "INSERT OR REPLACE INTO inbox (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            )
            for record in accepted {
                let data = Data(record.userInfo)
                if keyed {
                    try insert.execute(arguments: [
                        record.messageID, nextSeq, data, record.targetKind, record.targetValue, record.collapseKey, record.priority,
                        record.expiration, record.receivedAt,
                    ])
                    nextSeq += 1
                } else {
                    try insert.execute(arguments: [
                        record.messageID, data, record.targetKind, record.targetValue, record.collapseKey, record.priority,
                        record.expiration, record.receivedAt,
                    ])
                }
            }
            return .commit
        }
    }
}

/// The machine's busy time in clock ticks, all CPUs (user, nice, system, irq, softirq, steal).
func machineBusyTicks() -> Int {
    guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8), let line = stat.split(separator: "\n").first else {
        return 0
    }
    let fields = line.split(separator: " ").dropFirst().compactMap { Int($0) }
    guard fields.count >= 8 else { return 0 }
    return fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
}

func threadCPU() -> (user: Double, system: Double) {
    var usage = rusage()
    getrusage(__rusage_who_t(1), &usage)  // RUSAGE_THREAD
    return (
        Double(usage.ru_utime.tv_sec) * 1e6 + Double(usage.ru_utime.tv_usec),
        Double(usage.ru_stime.tv_sec) * 1e6 + Double(usage.ru_stime.tv_usec)
    )
}

func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

@MainActor func measure(layout name: String, group: Int) throws {
    let directory = "\(options.directory)/inbox-layouts-\(getpid())-\(name)-\(group)"
    try? FileManager.default.removeItem(atPath: directory)
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var layout: any Layout =
        switch name {
        case "store": try StoreLayout(directory: directory)
        case "rows-indexed": try RowsLayout(path: "\(directory)/rows.sqlite", keyed: false, prune: false)
        case "rows-indexed-pruned": try RowsLayout(path: "\(directory)/rows.sqlite", keyed: false, prune: true)
        case "rows-keyed": try RowsLayout(path: "\(directory)/rows.sqlite", keyed: true, prune: false)
        case "rows-keyed-pruned": try RowsLayout(path: "\(directory)/rows.sqlite", keyed: true, prune: true)
        default: fatalError("unknown layout \(name)")
        }
    // Warm-up: a few commits (statements prepared, pages in the cache).
    var previous: [String] = []
    for _ in 0..<20 {
        let accepted = (0..<group).map { _ in record() }
        try layout.commit(accepted: accepted, finished: previous)
        previous = accepted.map(\.messageID)
    }
    let batches = (0..<64).map { _ in (0..<group).map { _ in record() } }
    var commits = 0
    let cpuBefore = threadCPU()
    let ticksBefore = machineBusyTicks()
    let start = now()
    while now() - start < options.seconds || commits < 20 {
        var accepted = batches[commits % batches.count]
        for index in accepted.indices { accepted[index].messageID = String(nextID + UInt64(index)) }
        nextID += UInt64(group)
        try layout.commit(accepted: accepted, finished: previous)
        previous = accepted.map(\.messageID)
        commits += 1
    }
    let elapsed = now() - start
    let cpuAfter = threadCPU()
    let ticks = machineBusyTicks() - ticksBefore
    let messages = Double(commits * group)
    let hz = Double(sysconf(Int32(_SC_CLK_TCK)))
    print(
        String(
            format:
                "%-15@ group %4d: %7.0f commits/s, %8.0f messages/s; thread CPU %6.2f µs/message (user %6.2f, kernel %6.2f); machine CPU %6.2f µs/message; commit latency %7.1f µs",
            name as NSString, group, Double(commits) / elapsed, messages / elapsed,
            (cpuAfter.user - cpuBefore.user + cpuAfter.system - cpuBefore.system) / messages,
            (cpuAfter.user - cpuBefore.user) / messages, (cpuAfter.system - cpuBefore.system) / messages,
            Double(ticks) / hz * 1e6 / messages,
            elapsed * 1e6 / Double(commits)))
}

for group in options.groups {
    for layout in options.layouts {
        try measure(layout: layout, group: group)
    }
}
