import Foundation
import Glibc
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("InboxLog: the inbox and the window as an append-only file of checksummed frames")
struct InboxLogTests {
    static let window = DeduplicationWindow(maximumCount: 10_000, maximumAge: .seconds(3600))
    static let now: Int64 = 1_800_000_000_000

    static func record(_ id: String, collapseKey: String? = nil, expiration: Int64? = nil, deduplicates: Bool = true) -> InboxRecord {
        var record = InboxRecord(
            messageID: id, userInfo: Array(#"{"title":"t \#(id)","n":"\#(id)"}"#.utf8), targetKind: "token", targetValue: "token-1",
            collapseKey: collapseKey, priority: 10, expiration: expiration, receivedAt: now - 5)
        record.deduplicates = deduplicates
        return record
    }

    /// The path and detail of the `StoreError.corrupt` that `body` throws; anything else is recorded as an issue (`nil`).
    static func corruption(
        _ body: () throws -> Any, sourceLocation: SourceLocation = #_sourceLocation
    ) -> (path: String, detail: String)? {
        let error = #expect(throws: StoreError.self, sourceLocation: sourceLocation) { _ = try body() }
        guard case .corrupt(let path, let detail)? = error else {
            Issue.record("expected corrupt, got \(String(describing: error))", sourceLocation: sourceLocation)
            return nil
        }
        return (path, detail)
    }

    static func withLog(_ body: (String) throws -> Void) throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-inbox-log")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory + "/inbox.log")
    }

    static func fileSize(_ path: String) -> Int {
        var status = stat()
        return stat(path, &status) == 0 ? Int(status.st_size) : -1
    }

    @Test(
        "commits survive reopening: pending records in acceptance order with every field, finished ones gone, a record accepted again replaces the first"
    )
    func commitsSurvive() throws {
        try Self.withLog { path in
            do {
                let log = try InboxLog(path: path)
                try log.commit(
                    accepted: [Self.record("a", collapseKey: "score"), Self.record("b", expiration: 99), Self.record("c")], finished: [],
                    window: Self.window, now: Self.now)
                try log.commit(accepted: [Self.record("d", deduplicates: false)], finished: ["b"], window: Self.window, now: Self.now)
                var again = Self.record("a")
                again.userInfo = Array(#"{"again":"yes"}"#.utf8)
                try log.commit(accepted: [again], finished: ["nothing-such"], window: Self.window, now: Self.now)
            }
            let log = try InboxLog(path: path)
            #expect(log.cutBytes == 0)
            let state = try log.load(window: Self.window, now: Self.now)
            #expect(state.pending.map(\.messageID) == ["c", "d", "a"])
            #expect(state.pending[0] == Self.record("c"))
            #expect(state.pending[1] == Self.record("d", deduplicates: false))
            #expect(state.pending[1].deduplicates == false)
            #expect(state.pending[2].userInfo == Array(#"{"again":"yes"}"#.utf8))
            #expect(state.pending[2].collapseKey == nil)
            // The window: every ID that keeps its own, once, at its newest acceptance.
            #expect(state.seen == ["b", "c", "a"])
        }
    }

    @Test("the file's bytes are the format's: header, then commits of accepted, finished, started and seen entries")
    func fileBytes() throws {
        try Self.withLog { path in
            do {
                let log = try InboxLog(path: path)
                try log.commit(
                    accepted: [Self.record("é1", collapseKey: "k", expiration: 7), Self.record("b2", deduplicates: false)],
                    finished: ["zz"],
                    window: Self.window, now: Self.now)
                _ = try log.load(window: Self.window, now: Self.now)
                let file = try #require(FileManager.default.contents(atPath: path))
                let commits = Self.hex(file.prefix(log.size))
                #expect(commits == Self.goldenCommits, "\(commits)")
                // Then the room ahead: zeros to the next multiple of roomAhead.
                #expect(file.count == log.roomAhead && file.dropFirst(log.size).allSatisfy { $0 == 0 })
                try log.compact()
            }
            let compacted = Self.hex(try #require(FileManager.default.contents(atPath: path)))
            #expect(compacted == Self.goldenCompacted, "\(compacted)")
        }
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    // Written by the log of this format's first release; a change here is a change of the format.
    /// The header, a commit (two accepted entries, one finished) and a start.
    static let goldenCommits =
        "13000000e1f10e8f00686572616c6420696e626f78206c6f672031ce000000ba15d1820101640000000f0000000000000000"
        + "00505c18a3010000fb4f5c18a30100000a00000000000000070000000000000003000000c3a93105000000746f6b656e0700"
        + "0000746f6b656e2d31010000006b7b227469746c65223a227420c3a931222c226e223a22c3a931227d015400000000000000"
        + "000000000000505c18a3010000fb4f5c18a30100000a0000000000000002000000623205000000746f6b656e07000000746f"
        + "6b656e2d317b227469746c65223a2274206232222c226e223a226232227d0206000000020000007a7a06000000c6d41e8f01"
        + "0400000000"
    /// The header and one commit of what is live: the window's IDs, then the pending records with their start counts.
    static let goldenCompacted =
        "13000000e1f10e8f00686572616c6420696e626f78206c6f672031d70000007d058cc001030f00000000505c18a301000003"
        + "000000c3a93101640000000d01000000000000000000000000000000fb4f5c18a30100000a00000000000000070000000000"
        + "000003000000c3a93105000000746f6b656e07000000746f6b656e2d31010000006b7b227469746c65223a227420c3a93122"
        + "2c226e223a22c3a931227d01540000000001000000000000000000000000000000fb4f5c18a30100000a0000000000000002"
        + "000000623205000000746f6b656e07000000746f6b656e2d317b227469746c65223a2274206232222c226e223a226232227d"

    @Test("an ID accepted and finished in the same commit is gone; each field of a record reads back as written")
    func acceptedAndFinishedTogether() throws {
        try Self.withLog { path in
            do {
                let log = try InboxLog(path: path)
                try log.commit(
                    accepted: [Self.record("x"), Self.record("y", collapseKey: "k", expiration: 7)], finished: ["x"], window: Self.window,
                    now: Self.now)
            }
            let state = try InboxLog(path: path).load(window: Self.window, now: Self.now)
            #expect(state.pending == [Self.record("y", collapseKey: "k", expiration: 7)])
        }
    }

    @Test("each load counts a start for every pending record, durably; a record accepted later starts from 0")
    func loadCountsStarts() throws {
        try Self.withLog { path in
            do {
                let log = try InboxLog(path: path)
                try log.commit(accepted: [Self.record("a")], finished: [], window: Self.window, now: Self.now)
                #expect(try log.load(window: Self.window, now: Self.now).replays == ["a": 1])
            }
            do {
                let log = try InboxLog(path: path)
                #expect(try log.load(window: Self.window, now: Self.now).replays == ["a": 2])
                try log.commit(accepted: [Self.record("b")], finished: [], window: Self.window, now: Self.now)
                #expect(log.pendingRecord("b")?.replays == 0)
            }
            let log = try InboxLog(path: path)
            #expect(try log.load(window: Self.window, now: Self.now).replays == ["a": 3, "b": 1])
        }
    }

    /// How a crash can leave the last commit's frames: cut short anywhere, or whole in length with bytes that never
    /// reached the disk.
    enum Damage: CustomTestStringConvertible, Sendable {
        case cut(keeping: Int)
        case flipped(fromEnd: Int)
        case garbage

        var testDescription: String {
            switch self {
            case .cut(let keeping): "the last commit cut after \(keeping) bytes"
            case .flipped(let fromEnd): "a byte \(fromEnd) from the end flipped"
            case .garbage: "zeros after the last commit, and a torn commit after them"
            }
        }
    }

    @Test(
        "a torn end is cut off when the log is opened: the commits that returned are kept, and the log goes on",
        arguments: [
            Damage.cut(keeping: 0), .cut(keeping: 3), .cut(keeping: 8), .cut(keeping: 20), .cut(keeping: -1), .flipped(fromEnd: 1),
            .flipped(fromEnd: 30), .garbage,
        ])
    func tornEnd(_ damage: Damage) throws {
        try Self.withLog { path in
            let before: Int
            let after: Int
            do {
                let log = try InboxLog(path: path)
                try log.commit(accepted: [Self.record("kept")], finished: [], window: Self.window, now: Self.now)
                before = log.size
                try log.commit(
                    accepted: [Self.record("torn-1"), Self.record("torn-2")], finished: ["kept"], window: Self.window, now: Self.now)
                after = log.size
            }
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
            switch damage {
            case .cut(let keeping):
                try handle.truncate(atOffset: UInt64(keeping >= 0 ? before + keeping : after + keeping))
            case .flipped(let fromEnd):
                try handle.seek(toOffset: UInt64(after - fromEnd))
                let byte = try handle.read(upToCount: 1)![0]
                try handle.seek(toOffset: UInt64(after - fromEnd))
                try handle.write(contentsOf: [byte ^ 0x40])
            case .garbage:
                // Zeros are room ahead; bytes after them are not.
                try handle.truncate(atOffset: UInt64(before))
                try handle.seekToEnd()
                try handle.write(contentsOf: [UInt8](repeating: 0, count: 4096) + [1])
            }
            try handle.close()
            let damagedSize = Self.fileSize(path)
            do {
                let log = try InboxLog(path: path)
                if case .cut(keeping: 0) = damage {
                    #expect(log.cutBytes == 0)
                } else {
                    #expect(log.cutBytes > 0)
                }
                #expect(log.cutBytes == damagedSize - before)
                #expect(Self.fileSize(path) == before)
                #expect(try log.load(window: Self.window, now: Self.now).pending.map(\.messageID) == ["kept"])
                try log.commit(accepted: [Self.record("next")], finished: [], window: Self.window, now: Self.now)
            }
            let log = try InboxLog(path: path)
            #expect(log.cutBytes == 0)
            let state = try log.load(window: Self.window, now: Self.now)
            #expect(state.pending.map(\.messageID) == ["kept", "next"])
            #expect(state.replays == ["kept": 2, "next": 1])
        }
    }

    @Test("a commit that does not check with whole commits after it is damage, not a torn end: refused naming the file, nothing cut")
    func damageInTheMiddle() throws {
        try Self.withLog { path in
            let middle: Int
            do {
                let log = try InboxLog(path: path)
                try log.commit(accepted: [Self.record("first")], finished: [], window: Self.window, now: Self.now)
                middle = log.size
                try log.commit(accepted: [Self.record("second")], finished: [], window: Self.window, now: Self.now)
                try log.commit(accepted: [Self.record("third")], finished: [], window: Self.window, now: Self.now)
            }
            let sizeBefore = Self.fileSize(path)
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
            try handle.seek(toOffset: UInt64(middle + 20))
            let byte = try handle.read(upToCount: 1)![0]
            try handle.seek(toOffset: UInt64(middle + 20))
            try handle.write(contentsOf: [byte ^ 0x01])
            try handle.close()
            guard let (named, detail) = Self.corruption({ try InboxLog(path: path) }) else { return }
            #expect(named == path)
            #expect(detail.contains("byte \(middle)") && detail.contains("whole commits follow"))
            #expect(Self.fileSize(path) == sizeBefore)
        }
    }

    @Test("a file that is not an inbox log, and a frame that checks but does not read, are refused naming the file")
    func notALog() throws {
        try Self.withLog { path in
            try Data("SQLite format 3\0 and more".utf8).write(to: URL(fileURLWithPath: path))
            guard let (named, detail) = Self.corruption({ try InboxLog(path: path) }) else { return }
            #expect(named == path && detail.contains("not a Herald inbox log"))
        }
        try Self.withLog { path in
            do { _ = try InboxLog(path: path) }
            // A frame of an unknown kind with a good checksum: written by something else, or a newer Herald.
            var frame: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 99, 1, 2, 3]
            let checksum = UInt32(truncatingIfNeeded: frame[8...].withUnsafeBytes { InboxLogTests.crc($0) })
            withUnsafeBytes(of: UInt32(4).littleEndian) { frame.replaceSubrange(0..<4, with: $0) }
            withUnsafeBytes(of: checksum.littleEndian) { frame.replaceSubrange(4..<8, with: $0) }
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: frame)
            try handle.close()
            guard let (named, detail) = Self.corruption({ try InboxLog(path: path) }) else { return }
            #expect(named == path && detail.contains("unknown kind"))
        }
    }

    /// CRC-32 (IEEE), bit by bit: the test's own, to write a frame the log has not written.
    static func crc(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return ~crc
    }

    @Test("one writer at a time: a second opening of the log is refused, naming it, until the first is closed")
    func oneWriter() throws {
        try Self.withLog { path in
            do {
                let first = try InboxLog(path: path)
                try first.commit(accepted: [Self.record("a")], finished: [], window: Self.window, now: Self.now)
                let error = #expect(throws: StoreError.self) { try InboxLog(path: path) }
                guard case .cannotOpen(let named, let detail)? = error else {
                    Issue.record("expected cannotOpen, got \(String(describing: error))")
                    return
                }
                #expect(named == path)
                #expect(detail.contains("one writer at a time"))
                // The refused opening changed nothing: the first goes on writing where it was.
                try first.commit(accepted: [Self.record("b")], finished: [], window: Self.window, now: Self.now)
            }
            #expect(try InboxLog(path: path).load(window: Self.window, now: Self.now).pending.map(\.messageID) == ["a", "b"])
        }
    }

    @Test("a header cut short by a crash while the file was made gives a new log; an empty file too")
    func headerCutShort() throws {
        try Self.withLog { path in
            do { _ = try InboxLog(path: path) }
            let whole = try Data(contentsOf: URL(fileURLWithPath: path))
            for keep in [0, 5, whole.count - 1] {
                try whole.prefix(keep).write(to: URL(fileURLWithPath: path))
                do {
                    let log = try InboxLog(path: path)
                    #expect(log.size == whole.count)
                    try log.commit(accepted: [Self.record("a")], finished: [], window: Self.window, now: Self.now)
                }
                #expect(try InboxLog(path: path).load(window: Self.window, now: Self.now).pending.map(\.messageID) == ["a"])
            }
        }
    }

    @Test("the window: the IDs of records that keep theirs, at most maximumCount, none older than maximumAge; kept across opening")
    func windowLimits() throws {
        try Self.withLog { path in
            let limits = DeduplicationWindow(maximumCount: 3, maximumAge: .seconds(60))
            do {
                let log = try InboxLog(path: path)
                try log.commit(accepted: [Self.record("old")], finished: ["old"], window: limits, now: Self.now - 61_000)
                try log.commit(
                    accepted: [Self.record("1"), Self.record("made-on-receipt", deduplicates: false), Self.record("2")], finished: [],
                    window: limits, now: Self.now)
                try log.commit(accepted: [Self.record("3"), Self.record("4")], finished: ["1", "2", "3"], window: limits, now: Self.now)
            }
            let state = try InboxLog(path: path).load(window: limits, now: Self.now)
            #expect(state.seen == ["2", "3", "4"])
            #expect(state.pending.map(\.messageID) == ["made-on-receipt", "4"])
            let none = try InboxLog(path: path).load(window: DeduplicationWindow(maximumCount: 0, maximumAge: .seconds(60)), now: Self.now)
            #expect(none.seen.isEmpty)
        }
    }

    @Test(
        "room ahead: a commit that reaches the end of the file writes zeros to the next multiple of roomAhead, commits go over them, and reopening keeps them as room, not a torn end"
    )
    func roomAhead() throws {
        try Self.withLog { path in
            var sizes: [Int] = []
            do {
                let log = try InboxLog(path: path)
                log.roomAhead = 4096
                #expect(Self.fileSize(path) == InboxLog.headerSize)
                for n in 0..<60 {
                    try log.commit(accepted: [Self.record("m\(n)")], finished: [], window: Self.window, now: Self.now)
                    let expected = (log.size / 4096 + 1) * 4096
                    #expect(log.fileEnd == expected && Self.fileSize(path) == expected, "commit \(n)")
                    sizes.append(log.size)
                }
                #expect(Set(sizes.map { $0 / 4096 }).count > 1, "the commits went past the first room")
            }
            let fileSize = Self.fileSize(path)
            do {
                let log = try InboxLog(path: path)
                #expect(log.cutBytes == 0 && log.size == sizes.last && log.fileEnd == fileSize)
                #expect(Self.fileSize(path) == fileSize)
                log.roomAhead = 4096
                try log.commit(accepted: [Self.record("after")], finished: ["m0"], window: Self.window, now: Self.now)
                #expect(Self.fileSize(path) == fileSize, "the commit went into the room, after the last commit")
            }
            let state = try InboxLog(path: path).load(window: Self.window, now: Self.now)
            #expect(state.pending.map(\.messageID) == (1..<60).map { "m\($0)" } + ["after"])
        }
        // No room, and no room past the size limit.
        try Self.withLog { path in
            let log = try InboxLog(path: path)
            log.roomAhead = 0
            try log.commit(accepted: [Self.record("a")], finished: [], window: Self.window, now: Self.now)
            #expect(Self.fileSize(path) == log.size && log.fileEnd == log.size)
            log.roomAhead = 1 << 20
            log.sizeLimit = log.size + 1000
            try log.commit(accepted: [Self.record("b")], finished: [], window: Self.window, now: Self.now)
            #expect(Self.fileSize(path) == log.sizeLimit && log.fileEnd == log.sizeLimit)
        }
    }

    /// A log opened on a thread of its own, handed over when the open returns.
    @Test(
        "a log opened while another has it, and replaced meanwhile (a compaction renames a new file over it), is opened again: its commits go to the file the name leads to"
    )
    func waiterAfterACompaction() throws {
        try Self.withLog { path in
            let limits = DeduplicationWindow(maximumCount: 50, maximumAge: .seconds(3600))
            var holder: InboxLog? = try InboxLog(path: path)
            try holder?.commit(accepted: [Self.record("before")], finished: [], window: limits, now: Self.now)
            var original = stat()
            #expect(stat(path, &original) == 0)
            // The second opener finds the lock taken. While it waits, the holder does what a compaction does (without its
            // flushes): a copy of the log renamed over it; then it lets go of the file it had.
            var log: InboxLog? = try InboxLog(path: path) {
                #expect((try? FileManager.default.copyItem(atPath: path, toPath: path + ".copy")) != nil)
                #expect(rename(path + ".copy", path) == 0)
                var replaced = stat()
                #expect(stat(path, &replaced) == 0 && replaced.st_ino != original.st_ino)
                holder = nil
            }
            #expect(holder == nil, "the second opener waited for the lock")
            try log?.commit(accepted: [Self.record("after")], finished: [], window: limits, now: Self.now + 1)
            log = nil  // one writer at a time
            let state = try InboxLog(path: path).load(window: limits, now: Self.now + 2)
            #expect(state.pending.map(\.messageID) == ["before", "after"])
        }
    }

    @Test(
        "a start counted for some records counts for those still pending alone, read back the same; one without IDs counts every record pending at its place"
    )
    func countedForSome() throws {
        try Self.withLog { path in
            do {
                let log = try InboxLog(path: path)
                try log.commit(accepted: [Self.record("a"), Self.record("b")], finished: [], window: Self.window, now: Self.now)
                #expect(try log.load(window: Self.window, now: Self.now, counting: false).replays == ["a": 0, "b": 0])
                try log.commit(accepted: [Self.record("c")], finished: ["b"], window: Self.window, now: Self.now)
                // b finished and c came after the load: only a is counted.
                try log.countStart(of: ["a", "b"])
                #expect(log.pendingRecord("a")?.replays == 1 && log.pendingRecord("c")?.replays == 0)
            }
            do {
                let log = try InboxLog(path: path)
                #expect(try log.load(window: Self.window, now: Self.now, counting: false).replays == ["a": 1, "c": 0])
                try log.countStart()
                try log.commit(accepted: [Self.record("d")], finished: [], window: Self.window, now: Self.now)
            }
            let log = try InboxLog(path: path)
            #expect(try log.load(window: Self.window, now: Self.now, counting: false).replays == ["a": 2, "c": 1, "d": 0])
        }
    }

    @Test("compaction: once the file holds much more than what is live, it is rewritten to what is live; the state read back is the same")
    func compaction() throws {
        try Self.withLog { path in
            let limits = DeduplicationWindow(maximumCount: 50, maximumAge: .seconds(3600))
            var largest = 0
            do {
                let log = try InboxLog(path: path)
                log.compactionThreshold = 16 << 10
                try log.commit(
                    accepted: [Self.record("long-pending", collapseKey: "c", expiration: 5)], finished: [], window: limits, now: Self.now)
                _ = try log.load(window: limits, now: Self.now)  // a start counted for it
                for n in 0..<400 {
                    try log.commit(
                        accepted: [Self.record("m\(n)")], finished: n > 0 ? ["m\(n - 1)"] : [], window: limits, now: Self.now + Int64(n))
                    largest = max(largest, log.size)
                }
                #expect(largest <= 16 << 10 + 1024)
                #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))
            }
            let log = try InboxLog(path: path)
            #expect(log.cutBytes == 0)
            let state = try log.load(window: limits, now: Self.now + 400)
            #expect(state.pending.map(\.messageID) == ["long-pending", "m399"])
            #expect(state.pending[0] == Self.record("long-pending", collapseKey: "c", expiration: 5))
            #expect(state.replays == ["long-pending": 2, "m399": 1])
            #expect(state.seen == (350..<400).map { "m\($0)" })
        }
    }

    @Test("compaction of more than a frame holds (some 3 MB live): every pending record and ID reads back, in order")
    func compactionOfManyFrames() throws {
        try Self.withLog { path in
            let limits = DeduplicationWindow(maximumCount: 5_000, maximumAge: .seconds(3600))
            let large = Array(#"{"blob":"\#(String(repeating: "x", count: 2_000))"}"#.utf8)
            var expected: [InboxRecord] = []
            do {
                let log = try InboxLog(path: path)
                for group in 0..<30 {
                    let records = (0..<50).map { n in
                        var record = Self.record(
                            "p\(group)-\(n)", collapseKey: n % 3 == 0 ? "c\(n)" : nil, expiration: n % 2 == 0 ? 9 : nil)
                        record.userInfo = large
                        return record
                    }
                    expected += records
                    try log.commit(accepted: records, finished: [], window: limits, now: Self.now + Int64(group))
                }
                try log.compact()
                #expect(log.size > 3 << 20, "more than three frames of a megabyte")
            }
            let state = try InboxLog(path: path).load(window: limits, now: Self.now + 30)
            #expect(state.pending == expected)
            #expect(state.seen == expected.map(\.messageID))
        }
    }

    @Test("random commits and restarts read back as a model of them says, each time")
    func againstAModel() throws {
        try Self.withLog { path in
            var generator = SystemRandomNumberGenerator()
            var model: [(id: String, replays: Int)] = []
            var next = 0
            var log: InboxLog? = try InboxLog(path: path)
            log?.compactionThreshold = 8 << 10
            for step in 0..<300 {
                if Int.random(in: 0..<20, using: &generator) == 0 {
                    log = nil
                    log = try InboxLog(path: path)
                    log?.compactionThreshold = 8 << 10
                    let state = try log!.load(window: Self.window, now: Self.now)
                    model = model.map { (id: $0.id, replays: $0.replays + 1) }
                    #expect(state.pending.map(\.messageID) == model.map(\.id), "step \(step)")
                    #expect(state.replays == Dictionary(uniqueKeysWithValues: model.map { ($0.id, $0.replays) }), "step \(step)")
                    continue
                }
                let accepted = (0..<Int.random(in: 0..<4, using: &generator)).map { _ in
                    defer { next += 1 }
                    return Self.record("r\(next)")
                }
                var finished: [String] = []
                for entry in model where Bool.random(using: &generator) { finished.append(entry.id) }
                try log!.commit(accepted: accepted, finished: finished, window: Self.window, now: Self.now)
                model.removeAll { finished.contains($0.id) }
                model += accepted.map { (id: $0.messageID, replays: 0) }
            }
        }
    }
}

@Suite("SQLiteStore with the inbox's log: a store of an earlier release, a missing log, moves to and from the quarantine")
struct InboxLogStoreTests {
    @Test("a store of an earlier release gives its inbox rows (with their start counts) and its window to the log, once")
    func adoptsRows() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-adopt")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let store = try SQLiteStore(directory: directory)
            // As the release before the log wrote them.
            try store.execute(
                sql: """
                    INSERT INTO inbox (seq, message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays)
                    VALUES (1, 'first', X'7B7D', 'token', 't', NULL, 10, NULL, 5, 2),
                           (2, 'second', X'7B7D', 'topic', 'news', 'k', 5, 99, 6, 0);
                    INSERT INTO seen (position, seen_at, message_ids) VALUES (2, \(InboxLogTests.now), X'6F6C6400666972737400');
                    """)
        }
        let window = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(60))
        let state = try SQLiteStore(directory: directory).load(window: window, now: InboxLogTests.now)
        #expect(state.pending.map(\.messageID) == ["first", "second"])
        #expect(state.pending[1].collapseKey == "k" && state.pending[1].expiration == 99 && state.pending[1].targetKind == "topic")
        #expect(state.replays == ["first": 3, "second": 1])
        #expect(state.seenMessageIDs == ["old", "first"])
        #expect(FileManager.default.fileExists(atPath: directory + "/inbox.log"))
        // The rows are gone from the database; the next start reads the log alone.
        let again = try SQLiteStore(directory: directory)
        #expect(try again.load(window: window, now: InboxLogTests.now).replays == ["first": 4, "second": 2])
    }

    @Test("a missing database beside an inbox's log with commits in it stops the start, naming both; a log without commits does not")
    func missingDatabase() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-missing-database")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let store = try SQLiteStore(directory: directory)
            try store.commit(StoreBatch(accepted: [InboxLogTests.record("a")]), window: InboxLogTests.window, now: InboxLogTests.now)
        }
        for file in ["herald.sqlite", "herald.sqlite-wal", "herald.sqlite-shm"] {
            try? FileManager.default.removeItem(atPath: directory + "/" + file)
        }
        guard let (path, detail) = InboxLogTests.corruption({ try SQLiteStore(directory: directory) }) else { return }
        #expect(path == directory + "/herald.sqlite")
        #expect(detail.contains(directory + "/inbox.log") && detail.contains("missing"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/herald.sqlite"), "nothing is created")
        // A log with its header only holds nothing to lose: a new store starts.
        try FileManager.default.removeItem(atPath: directory + "/inbox.log")
        do { _ = try InboxLog(path: directory + "/inbox.log") }
        #expect(try SQLiteStore(directory: directory).load(window: InboxLogTests.window, now: InboxLogTests.now).pending.isEmpty)
    }

    @Test("a missing log beside a store that has used one stops the start, naming the file")
    func missingLog() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-missing-log")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let store = try SQLiteStore(directory: directory)
            try store.commit(StoreBatch(accepted: [InboxLogTests.record("a")]), window: InboxLogTests.window, now: InboxLogTests.now)
        }
        try FileManager.default.removeItem(atPath: directory + "/inbox.log")
        let error = #expect(throws: StoreError.self) {
            try SQLiteStore(directory: directory).load(window: InboxLogTests.window, now: InboxLogTests.now)
        }
        guard case .corrupt(let path, let detail)? = error else {
            Issue.record("expected corrupt, got \(String(describing: error))")
            return
        }
        #expect(path == directory + "/inbox.log")
        #expect(detail.contains("missing"))
    }

    @Test(
        "a crash between a move's two steps is settled at the next load: quarantined stays quarantined, released stays released; a message accepted anew under a quarantined ID stays"
    )
    func movesSettled() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-moves")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let window = InboxLogTests.window
        let now = InboxLogTests.now
        let receivedAt = InboxLogTests.record("poison").receivedAt
        do {
            let store = try SQLiteStore(directory: directory)
            try store.commit(
                StoreBatch(accepted: [InboxLogTests.record("poison"), InboxLogTests.record("back"), InboxLogTests.record("again")]),
                window: window, now: now)
            try store.commit(StoreBatch(quarantined: ["back", "again"]), window: window, now: now)
            #expect(try store.release(["back"]) == [])
            // A quarantine's first step alone: the row copied, the log not yet told.
            try store.execute(
                sql: """
                    INSERT INTO quarantine (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, quarantined_at)
                    VALUES ('poison', X'7B7D', 'token', 't', NULL, 10, NULL, \(receivedAt), 3, 1)
                    """)
            // A release's first step alone: back in the log, the row not yet deleted.
            try store.execute(
                sql: """
                    INSERT INTO quarantine (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, quarantined_at)
                    VALUES ('back', X'7B7D', 'token', 't', NULL, 10, NULL, \(receivedAt), 3, 1)
                    """)
            // The quarantined ID accepted anew, received later: another message.
            var anew = InboxLogTests.record("again")
            anew.receivedAt = receivedAt + 60_000
            try store.commit(StoreBatch(accepted: [anew]), window: window, now: now)
        }
        let store = try SQLiteStore(directory: directory)
        let state = try store.load(window: window, now: now)
        #expect(state.pending.map(\.messageID) == ["back", "again"])
        #expect(try store.quarantine().map(\.record.messageID).sorted() == ["again", "poison"])
    }
}
