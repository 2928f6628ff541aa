import CZlib
import Glibc
package import Herald

/// The durable inbox and the de-duplication window as one append-only file of checksummed frames: a group commit is
/// one `pwrite` of its frames and one `fdatasync`, with no B-tree, page or lock to update. The state (the pending
/// records, the window's IDs, the start counts) is kept in memory and rebuilt from the file when it is opened.
///
/// A frame is its payload's length (4 bytes, little-endian), the payload's CRC-32 (4 bytes) and the payload, whose
/// first byte is its kind: the file's header, or a commit. A commit's payload is its entries, each a kind, a length
/// and a body: a record accepted, an ID finished, an ID the window keeps (written by a compaction), a start counted (for
/// the record whose ID it holds, or without one for every record pending at its place).
/// A commit is one frame, written after the last commit in one call and made durable before it returns; a crash
/// during that call can leave that frame torn (cut short, or with bytes that do not check), never an earlier one.
/// Opening the file cuts it at the first frame that does not check (``cutBytes``): what is kept is exactly the
/// commits that returned, each whole.
///
/// The file only grows while it is used; when it holds much more than what is live (the pending records and the
/// window), ``commit(accepted:finished:window:now:)`` and ``load(window:now:)`` write what is live to a new file and
/// rename it over the old one (``compact()``). That rewrite is not part of the call that asks for it: one that fails
/// (a full disk) is kept in ``compactionFailure`` and tried again once the file has grown further.
///
/// Room ahead: a commit that reaches the end of the file also writes zeros after its frames, up to the next multiple of
/// ``roomAhead``, and the commits after it are written over those zeros. Writing into blocks the file already has
/// changes none of its metadata, so their `fdatasync` flushes the data alone; one that makes the file longer also
/// commits the file system's journal (its size and new blocks), which took half the time and the kernel's CPU of
/// such a commit (ext4). A length of zero is no frame: reading stops at the first zeros, and zeros to the end of the
/// file are room, not a torn end.
///
/// Threads: one call at a time, from any thread (the store's contract: Herald calls it from its blocking pool). Calls
/// block on disk I/O.
package final class InboxLog {
    package let path: String
    /// Bytes of a torn end that opening the file cut off, the room ahead after it included (0 when the last commit was
    /// whole).
    package private(set) var cutBytes = 0
    /// Where the next commit's frames go: the end of the last commit (the file is longer by its room ahead).
    package private(set) var size = 0
    /// The file's length: from ``size`` to here, zeros written ahead of the commits.
    package private(set) var fileEnd = 0
    /// How far ahead a commit that reaches the end of the file writes zeros (to the next multiple of this); 0 for none.
    package var roomAhead = 256 << 10
    /// When ``commit(accepted:finished:window:now:)`` compacts: the file is larger than this and than
    /// ``compactionFactor`` times what is live.
    package var compactionThreshold = 4 << 20
    package var compactionFactor = 4
    /// For tests: where the commits may not end past, as on a full disk (a commit that would is refused with ENOSPC's
    /// error and leaves nothing; room ahead is not written past it either). It limits ``size``, not the file's length:
    /// a commit into room already written past it is refused too.
    package var sizeLimit = Int.max

    private var descriptor: Int32
    /// Set when a commit that wrote room ahead failed: some file systems (NFS, FUSE, thin-provisioned storage) report
    /// a full disk only when the data is flushed, so the zeros may be what failed it. The commits after it write no
    /// room until the log is opened again.
    private var roomRefused = false
    /// Why the last compaction failed (a full disk, say), `nil` once one succeeds. A compaction is not part of the commit
    /// that asked for it: that commit is durable and kept whatever the compaction does; the next is tried once the file
    /// has grown by a quarter of ``compactionThreshold`` (at least 64 KiB) more.
    package private(set) var compactionFailure: StoreError?
    private var compactionRetrySize = 0
    /// Set when a compaction renamed its file over the log but the directory could not be made durable: the commits
    /// after it would go to a file whose name a crash may take back. No commit is written until the directory is synced.
    private var directoryUnsynced = false
    /// Set when a failed commit could not be cut off the file (or the cut not made durable): its frame may still be
    /// there, whole, and would be read back as a commit. No commit is written until the cut is made.
    private var uncutFailure = false
    /// The pending records by ID, each with its place in acceptance order, its start count and its frame's size.
    private var pending: [String: Pending] = [:]
    private var nextOrder: UInt64 = 0
    /// The window's IDs with their commit times, oldest first, from `windowStart` on.
    private var window: [(id: String, seenAt: Int64)] = []
    private var windowStart = 0
    /// The bytes a compacted file would take: the header, the pending records' frames, the window's frames.
    private var liveBytes = 0

    private struct Pending {
        var order: UInt64
        var record: InboxRecord
        var replays: Int
        var released: Bool
        /// Its entry's size, for the estimate of what is live.
        var entrySize: Int
    }

    private enum FrameKind: UInt8 {
        case header = 0
        case commit = 1
    }

    private enum EntryKind: UInt8 {
        case accepted = 1
        case finished = 2
        case seen = 3
        case started = 4
    }

    private static let magic = Array("herald inbox log 1".utf8)
    /// The size of a log with no commit: its header frame.
    package static var headerSize: Int { frameOverhead + 1 + magic.count }
    private static let frameOverhead = 8
    /// An entry's kind (1 byte) and its body's length (4).
    private static let entryOverhead = 5
    /// No frame is larger: a longer length is a torn or damaged frame, not an allocation to attempt.
    private static let maximumPayload = 64 << 20

    /// Opens the log at `path`, creating it (mode 0600) when missing, and reads it: a torn end is cut off.
    ///
    /// - Throws: `StoreError/cannotOpen(path:detail:)` when the file cannot be created or opened;
    ///   `StoreError/corrupt(path:detail:)` when it is not an inbox log or a frame that checks does not read;
    ///   `StoreError/writeFailed(path:detail:)` when a new file's header or the cut cannot be written.
    package convenience init(path: String) throws(StoreError) {
        try self.init(path: path, waitingForTheLock: {})
    }

    /// ``init(path:)``, calling `waitingForTheLock` once if another writer has the log's lock when it first asks for
    /// it (and it goes on to wait): for tests of what happens meanwhile.
    package init(path: String, waitingForTheLock: () -> Void) throws(StoreError) {
        self.path = path
        // One writer: a second would append where the first believes its end is, over the first's frames. A process
        // this one starts holds a copy of every descriptor, and so of the lock, until it executes its program (the
        // descriptor closes on exec): a log closed here and opened again at that moment waits for that, up to a second,
        // before it takes the holder for another writer.
        var waits = 0
        while true {
            descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw .cannotOpen(path: path, detail: Self.describe(errno)) }
            while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                let code = errno
                if code == EINTR || (code == EWOULDBLOCK && waits < 200) {
                    if code == EWOULDBLOCK {
                        if waits == 0 { waitingForTheLock() }
                        waits += 1
                        usleep(5_000)
                    }
                    continue
                }
                close(descriptor)
                throw .cannotOpen(
                    path: path,
                    detail: code == EWOULDBLOCK
                        ? "another Herald store has the inbox's log open (a daemon on this data directory, or a second store in this process): one writer at a time"
                        : Self.describe(code))
            }
            // The file locked may no longer be the log: the writer this one waited for compacted it meanwhile (a new
            // file renamed over it) and let go of the old one. Its commits would go to a file no name leads to: the
            // log is opened again.
            var locked = stat()
            var current = stat()
            if fstat(descriptor, &locked) == 0, stat(path, &current) == 0, locked.st_dev == current.st_dev,
                locked.st_ino == current.st_ino
            {
                break
            }
            close(descriptor)
        }
        // A compaction a crash interrupted before its rename: the log is whole without it.
        unlink(path + ".compacting")
        do {
            try read()
        } catch {
            close(descriptor)
            throw error
        }
    }

    deinit { close(descriptor) }

    // MARK: Reading

    private func read() throws(StoreError) {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .cannotOpen(path: path, detail: Self.describe(errno)) }
        let bytes = try readAll(count: Int(status.st_size))
        let header = Self.frame(.header, Self.magic)
        // Empty, or a header cut short by a crash while the file was made: a new log.
        if bytes.count < header.count, bytes.elementsEqual(header.prefix(bytes.count)) {
            try truncate(to: 0)
            try write(header, at: 0)
            guard fdatasync(descriptor) == 0 else { throw .writeFailed(path: path, detail: Self.describe(errno)) }
            try syncDirectory()
            size = header.count
            fileEnd = size
            liveBytes = header.count
            return
        }
        guard bytes.count >= header.count, bytes.prefix(header.count).elementsEqual(header) else {
            throw .corrupt(path: path, detail: "it is not a Herald inbox log (its first bytes are not the header)")
        }
        var offset = header.count
        let failure: StoreError? = bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                guard let payload = Self.checkedPayload(raw, at: offset) else {
                    // A crash leaves at most the last commit torn: whole frames after one that does not check are
                    // damage in the middle (a flipped bit, say), and cutting there would drop commits that returned.
                    if let next = Self.followingFrame(raw, at: offset), Self.checkedPayload(raw, at: next) != nil {
                        return .corrupt(
                            path: path,
                            detail:
                                "the commit at byte \(offset) does not match its checksum and whole commits follow it: the file is damaged. Restore it from a backup, or move the data directory aside to start a new store (a new registration token; messages not yet handled are lost)"
                        )
                    }
                    break
                }
                do throws(StoreError) { try apply(payload, at: offset) } catch { return error }
                offset += Self.frameOverhead + payload.count
            }
            return nil
        }
        if let failure { throw failure }
        size = offset
        fileEnd = bytes.count
        // Zeros to the end are the room ahead of the next commit; anything else there is a torn commit, cut off with
        // the room after it.
        if offset < bytes.count, !bytes[offset...].allSatisfy({ $0 == 0 }) {
            cutBytes = bytes.count - offset
            try truncate(to: offset)
            fileEnd = offset
        }
        liveBytes = header.count + pending.values.reduce(0) { $0 + $1.entrySize } + windowBytes()
    }

    private func readAll(count: Int) throws(StoreError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let result = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + done, count - done, off_t(done)) }
            if result < 0, errno == EINTR { continue }
            guard result > 0 else {
                throw .cannotOpen(path: path, detail: result < 0 ? Self.describe(errno) : "the file ended before its size")
            }
            done += result
        }
        return bytes
    }

    /// Where the frame after the one at `offset` begins, by the length the frame at `offset` gives, when that is inside
    /// the file.
    private static func followingFrame(_ raw: UnsafeRawBufferPointer, at offset: Int) -> Int? {
        guard raw.count - offset >= frameOverhead else { return nil }
        let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        guard length > 0, length <= maximumPayload, raw.count - offset - frameOverhead - length >= frameOverhead else { return nil }
        return offset + frameOverhead + length
    }

    /// The payload of the frame at `offset`, or `nil` when it is cut short or does not check.
    private static func checkedPayload(_ raw: UnsafeRawBufferPointer, at offset: Int) -> UnsafeRawBufferPointer? {
        guard raw.count - offset >= frameOverhead else { return nil }
        let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        let checksum = UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
        guard length > 0, length <= maximumPayload, raw.count - offset - frameOverhead >= length else { return nil }
        let payload = UnsafeRawBufferPointer(rebasing: raw[(offset + frameOverhead)..<(offset + frameOverhead + length)])
        guard crc(payload) == checksum else { return nil }
        return payload
    }

    /// Applies a frame that checks; one that does not read (a checksum that matches by chance, a newer kind) is damage.
    private func apply(_ payload: UnsafeRawBufferPointer, at offset: Int) throws(StoreError) {
        var frame = FrameReader(payload)
        switch frame.byte().flatMap(FrameKind.init(rawValue:)) {
        case .commit?: break
        case .header?: throw .corrupt(path: path, detail: "a second header at byte \(offset)")
        case nil: throw .corrupt(path: path, detail: "the frame at byte \(offset) is of an unknown kind")
        }
        while !frame.isAtEnd {
            guard let kind = frame.byte().flatMap(EntryKind.init(rawValue:)), var entry = frame.entry() else {
                throw .corrupt(path: path, detail: "an entry of the commit at byte \(offset) is of an unknown kind or cut short")
            }
            let entrySize = Self.entryOverhead + entry.bytes.count
            switch kind {
            case .accepted:
                guard let (record, replays, addsToWindow, seenAt, released) = Self.decodeAccepted(&entry) else {
                    throw .corrupt(path: path, detail: "a record of the commit at byte \(offset) does not read")
                }
                accept(record, replays: replays, addsToWindow: addsToWindow, seenAt: seenAt, released: released, entrySize: entrySize)
            case .finished:
                guard let id = entry.string(), entry.isAtEnd else {
                    throw .corrupt(path: path, detail: "a finished ID of the commit at byte \(offset) does not read")
                }
                pending[id] = nil
            case .seen:
                guard let seenAt = entry.int64(), let id = entry.string(), entry.isAtEnd else {
                    throw .corrupt(path: path, detail: "a window ID of the commit at byte \(offset) does not read")
                }
                window.append((id, seenAt))
            case .started:
                // Without an ID: every record pending here; with one: that record.
                if entry.isAtEnd {
                    for id in pending.keys { pending[id]?.replays += 1 }
                } else {
                    guard let id = entry.string(), entry.isAtEnd else {
                        throw .corrupt(path: path, detail: "the start at byte \(offset) does not read")
                    }
                    pending[id]?.replays += 1
                }
            }
        }
    }

    /// Makes `record` pending, replacing a pending record with its ID (one lookup of the ID for both); answers the
    /// replaced record's entry size, 0 when there was none.
    @discardableResult
    private func accept(
        _ record: InboxRecord, replays: Int, addsToWindow: Bool, seenAt: Int64, released: Bool = false, entrySize: Int
    ) -> Int {
        let replaced = pending.updateValue(
            Pending(order: nextOrder, record: record, replays: replays, released: released, entrySize: entrySize), forKey: record.messageID)
        nextOrder += 1
        if addsToWindow { window.append((record.messageID, seenAt)) }
        return replaced?.entrySize ?? 0
    }

    // MARK: The store's calls

    /// Counts a start for every pending record, durably before it returns: an entry without an ID, which counts every
    /// record pending at its place in the log when it is read back.
    package func countStart() throws(StoreError) {
        guard !pending.isEmpty else { return }
        try append(Self.commitFrame(size: Self.entryOverhead) { Self.writeEntry(.started, bodySize: 0, to: &$0) { _ in } })
        for id in pending.keys { pending[id]?.replays += 1 }
    }

    /// Counts a start for each of the pending records `ids` (those still pending), durably before it returns: an entry
    /// with the ID for each.
    package func countStart(of ids: [String]) throws(StoreError) {
        let counted = ids.filter { pending[$0] != nil }
        guard !counted.isEmpty else { return }
        let size = counted.reduce(0) { $0 + Self.entryOverhead + Self.finishedBodySize($1) }
        try append(
            Self.commitFrame(size: size) { writer in
                for id in counted { Self.writeEntry(.started, bodySize: Self.finishedBodySize(id), to: &writer) { $0.string(id) } }
            })
        for id in counted { pending[id]?.replays += 1 }
    }

    /// Counts this start for every pending record (``countStart()``; not when `counting` is `false`), prunes the window
    /// to `limits` at `now` and answers the pending records in acceptance order, their start counts (1 at a record's
    /// first replay, when counted) and the window's IDs, oldest first. Compacts the file when it holds much more than
    /// that.
    package func load(window limits: DeduplicationWindow, now: Int64, counting: Bool = true) throws(StoreError) -> (
        pending: [InboxRecord], replays: [String: Int], seen: [String]
    ) {
        if counting { try countStart() }
        // The window exactly as its limits define it: each ID once (at its newest acceptance), none accepted before
        // its age (also behind a newer one, after the clock went back), the newest `maximumCount`.
        let oldest = limits.oldestKept(now: now)
        var kept = Set<String>()
        var entries: [(id: String, seenAt: Int64)] = []
        for entry in window[windowStart...].reversed() where entries.count < limits.maximumCount {
            if entry.seenAt >= oldest, kept.insert(entry.id).inserted { entries.append(entry) }
        }
        window = entries.reversed()
        windowStart = 0
        liveBytes = Self.frame(.header, Self.magic).count + pending.values.reduce(0) { $0 + $1.entrySize } + windowBytes()
        compactIfDue(size > liveBytes * 2 + (64 << 10))
        let ordered = pending.values.sorted { $0.order < $1.order }
        return (
            ordered.map(\.record), Dictionary(uniqueKeysWithValues: ordered.map { ($0.record.messageID, $0.replays) }),
            window.map { $0.id }
        )
    }

    /// Takes the inbox and window of a store from before the log: `records` (in acceptance order, with their start
    /// counts) and the window's IDs (oldest first, with the times they were committed), in one commit.
    package func adopt(_ records: [(InboxRecord, Int)], seen: [(id: String, seenAt: Int64)]) throws(StoreError) {
        let sizes = records.map { Self.acceptedEntrySize($0.0) }
        try append(
            Self.commitFrame(size: seen.reduce(0) { $0 + Self.seenEntrySize($1.id) } + sizes.reduce(0, +)) { writer in
                for entry in seen { Self.writeSeen(entry, to: &writer) }
                for (record, replays) in records {
                    Self.writeAccepted(record, replays: replays, addsToWindow: false, seenAt: 0, to: &writer)
                }
            })
        for entry in seen {
            window.append(entry)
            liveBytes += Self.seenEntrySize(entry.id)
        }
        for ((record, replays), size) in zip(records, sizes) {
            liveBytes += size - accept(record, replays: replays, addsToWindow: false, seenAt: 0, entrySize: size)
        }
    }

    /// Whether the pending record `id` came back from the quarantine (``release(_:)``) and was not accepted again since.
    package func isReleased(_ id: String) -> Bool { pending[id]?.released ?? false }

    /// Puts `records` back into the inbox, durably, their start counts at 0 and marked as released (``isReleased(_:)``),
    /// so that a record found both here and in the store's quarantine after a crash is known to be on its way back.
    package func release(_ records: [InboxRecord]) throws(StoreError) {
        guard !records.isEmpty else { return }
        let sizes = records.map { Self.acceptedEntrySize($0) }
        try append(
            Self.commitFrame(size: sizes.reduce(0, +)) { writer in
                for record in records {
                    Self.writeAccepted(record, replays: 0, addsToWindow: false, seenAt: 0, released: true, to: &writer)
                }
            })
        for (record, size) in zip(records, sizes) {
            liveBytes += size - accept(record, replays: 0, addsToWindow: false, seenAt: 0, released: true, entrySize: size)
        }
    }

    /// Erases everything (the GDPR call): a file with the header alone is renamed over the log (durably), then the old
    /// file's bytes are overwritten with zeros and made durable before it is closed, so that what it held does not linger
    /// on the disk. A crash at any point leaves the old log or the empty one, each whole: zeros written in place over a
    /// log would reach the disk page by page, and a crash among them could leave zeros in the middle of whole commits,
    /// which a later open refuses as damage.
    ///
    /// - Throws: `StoreError/writeFailed(path:detail:)` when the empty log cannot be written or renamed (nothing is
    ///   erased), or when the old file's bytes cannot be overwritten (the log is erased; its former bytes may remain in
    ///   blocks the file system has freed).
    package func erase() throws(StoreError) {
        let header = Self.frame(.header, Self.magic)
        let (new, _) = try replaceFile { new, temporary throws(StoreError) -> Int in
            try Self.write(header, to: new, at: 0, path: temporary)
            return header.count
        }
        let old = descriptor
        let oldLength = max(fileEnd, size)
        defer { close(old) }
        descriptor = new
        size = header.count
        fileEnd = size
        pending = [:]
        window = []
        windowStart = 0
        liveBytes = header.count
        compactionFailure = nil
        compactionRetrySize = 0
        uncutFailure = false
        directoryUnsynced = true
        try syncDirectory()
        directoryUnsynced = false
        var offset = header.count
        do throws(StoreError) {
            while offset < oldLength {
                let count = min(Self.zeros.count, oldLength - offset)
                try Self.write(Array(Self.zeros[..<count]), to: old, at: offset, path: path)
                offset += count
            }
            guard fdatasync(old) == 0 else { throw StoreError.writeFailed(path: path, detail: Self.describe(errno)) }
        } catch {
            let reason: String
            if case .writeFailed(_, let detail) = error { reason = detail } else { reason = "\(error)" }
            throw .writeFailed(
                path: path,
                detail:
                    "the inbox's log was erased, but its former bytes could not be overwritten on the disk (\(reason)): they may remain in blocks the file system has freed"
            )
        }
    }

    /// A pending record and its start count, if `id` is pending.
    package func pendingRecord(_ id: String) -> (record: InboxRecord, replays: Int)? {
        pending[id].map { ($0.record, $0.replays) }
    }

    /// One group commit, durable when it returns: `accepted` enter the inbox (replacing a pending record with the same
    /// ID, its start count back to 0) and, those that keep their ID (`InboxRecord/deduplicates`), the window at `now`;
    /// then `finished` leave the inbox (also one accepted in the same call); the window is pruned to `limits`.
    ///
    /// - Throws: `StoreError/writeFailed(path:detail:)` when the frames cannot be written or made durable (disk
    ///   full, I/O error); nothing of the commit is then kept, in the file or in memory.
    package func commit(accepted: [InboxRecord], finished: [String], window limits: DeduplicationWindow, now: Int64) throws(StoreError) {
        guard !accepted.isEmpty || !finished.isEmpty else { return }
        var sizes: [Int] = []
        sizes.reserveCapacity(accepted.count)
        let windowed = limits.maximumCount > 0
        var frameSize = 0
        for record in accepted {
            sizes.append(Self.acceptedEntrySize(record))
            frameSize += sizes[sizes.count - 1]
        }
        for id in finished { frameSize += Self.entryOverhead + Self.finishedBodySize(id) }
        let frame = Self.commitFrame(size: frameSize) { writer in
            // By index: a for-in loop copies each record out of the array (four retains and releases).
            for index in accepted.indices {
                Self.writeAccepted(
                    accepted[index], replays: 0, addsToWindow: windowed && accepted[index].deduplicates, seenAt: now, to: &writer)
            }
            for id in finished {
                Self.writeEntry(.finished, bodySize: Self.finishedBodySize(id), to: &writer) { $0.string(id) }
            }
        }
        try append(frame)
        for (record, size) in zip(accepted, sizes) {
            liveBytes += size - accept(record, replays: 0, addsToWindow: windowed && record.deduplicates, seenAt: now, entrySize: size)
            if windowed && record.deduplicates { liveBytes += Self.seenEntrySize(record.messageID) }
        }
        for id in finished {
            if let removed = pending.removeValue(forKey: id) { liveBytes -= removed.entrySize }
        }
        prune(limits, now: now)
        compactIfDue(size > compactionThreshold && size > liveBytes * compactionFactor)
    }

    /// Compacts when `due`, unless the last compaction failed and the file has not grown enough since. A failure is
    /// kept in ``compactionFailure``, not thrown: the commit or start that asked for it has already succeeded (a
    /// thrown error would refuse senders whose messages are on disk, and on a full disk every one after them).
    private func compactIfDue(_ due: Bool) {
        guard due, size >= compactionRetrySize else { return }
        do {
            try compact()
            compactionFailure = nil
            compactionRetrySize = 0
        } catch {
            compactionFailure = error
            compactionRetrySize = size + max(compactionThreshold / 4, 64 << 10)
        }
    }

    /// Writes what is live (the header, the window's IDs, the pending records with their start counts) to a new
    /// file and renames it over the log, durably: a crash leaves the old file or the new one, each whole.
    package func compact() throws(StoreError) {
        // What is live, in the order it goes: the window's IDs, then the pending records in acceptance order (in the
        // window already, through the entries before them). The records are sorted by their order alone, not moved
        // about whole.
        let seen = window[windowStart...]
        let records = pending.indices.map { (order: pending[$0].value.order, index: $0) }.sorted { $0.order < $1.order }.map(\.index)
        let count = seen.count + records.count
        func entrySize(_ entry: Int) -> Int {
            entry < seen.count
                ? Self.seenEntrySize(seen[seen.startIndex + entry].id)
                : Self.acceptedEntrySize(pending.values[records[entry - seen.count]].record)
        }
        func write(_ entry: Int, to writer: inout FrameWriter) {
            if entry < seen.count {
                Self.writeSeen(seen[seen.startIndex + entry], to: &writer)
            } else {
                let record = pending.values[records[entry - seen.count]]
                Self.writeAccepted(
                    record.record, replays: record.replays, addsToWindow: false, seenAt: 0, released: record.released, to: &writer)
            }
        }
        let (new, written) = try replaceFile { new, temporary throws(StoreError) -> Int in
            let header = Self.frame(.header, Self.magic)
            try Self.write(header, to: new, at: 0, path: temporary)
            var written = header.count
            // Frames of about a megabyte, each made in place and written as it is made; the rename, not a frame,
            // makes the new file count whole.
            var first = 0
            while first < count {
                var end = first
                var size = 0
                while end < count, size < 1 << 20 {
                    size += entrySize(end)
                    end += 1
                }
                let frame = Self.commitFrame(size: size) { writer in
                    for entry in first..<end { write(entry, to: &writer) }
                }
                try Self.write(frame, to: new, at: written, path: temporary)
                written += frame.count
                first = end
            }
            return written
        }
        close(descriptor)
        descriptor = new
        size = written
        fileEnd = written
        window.removeFirst(windowStart)
        windowStart = 0
        liveBytes = written
        directoryUnsynced = true
        try syncDirectory()
        directoryUnsynced = false
    }

    /// Writes a new file beside the log (`contents` writes it and returns its length), makes it durable and renames it
    /// over the log; returns its descriptor, locked as the log's is, and its length. On a failure the new file is
    /// removed and the log is as it was. The caller makes the directory durable.
    private func replaceFile(
        _ contents: (_ descriptor: Int32, _ path: String) throws(StoreError) -> Int
    ) throws(StoreError) -> (descriptor: Int32, length: Int) {
        let temporary = path + ".compacting"
        let new = open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard new >= 0 else { throw .writeFailed(path: temporary, detail: Self.describe(errno)) }
        do throws(StoreError) {
            // Locked before its rename makes it the log, as the file it replaces was.
            guard flock(new, LOCK_EX | LOCK_NB) == 0 else { throw StoreError.writeFailed(path: temporary, detail: Self.describe(errno)) }
            let length = try contents(new, temporary)
            guard fdatasync(new) == 0 else { throw StoreError.writeFailed(path: temporary, detail: Self.describe(errno)) }
            guard rename(temporary, path) == 0 else { throw StoreError.writeFailed(path: path, detail: Self.describe(errno)) }
            return (new, length)
        } catch {
            close(new)
            unlink(temporary)
            throw error
        }
    }

    private func prune(_ limits: DeduplicationWindow, now: Int64) {
        let oldest = limits.oldestKept(now: now)
        while windowStart < window.count,
            window.count - windowStart > limits.maximumCount || window[windowStart].seenAt < oldest
        {
            liveBytes -= Self.seenEntrySize(window[windowStart].id)
            windowStart += 1
        }
        if windowStart > 4096, windowStart > window.count / 2 {
            window.removeFirst(windowStart)
            windowStart = 0
        }
    }

    private func windowBytes() -> Int {
        window[windowStart...].reduce(0) { $0 + Self.seenEntrySize($1.id) }
    }

    // MARK: Writing

    /// Writes `frames` after the last commit and makes them durable, with room ahead written after them when they reach
    /// the end of the file; on a failure the file is cut back to where it was.
    private func append(_ frames: [UInt8]) throws(StoreError) {
        let end = size + frames.count
        guard end <= sizeLimit else { throw .writeFailed(path: path, detail: Self.describe(ENOSPC)) }
        if directoryUnsynced {
            try syncDirectory()
            directoryUnsynced = false
        }
        if uncutFailure {
            try truncate(to: size)
            uncutFailure = false
            fileEnd = size
        }
        let extending = end > fileEnd
        do throws(StoreError) {
            try write(frames, at: size)
            if extending { extend(from: end) }
            guard fdatasync(descriptor) == 0 else { throw StoreError.writeFailed(path: path, detail: Self.describe(errno)) }
        } catch {
            // What was written may be on disk in part, or whole (when only its flush failed): cut off, durably, so that
            // the next commit follows the last whole one and a refused commit is never read back as one.
            if ftruncate(descriptor, off_t(size)) != 0 || fdatasync(descriptor) != 0 { uncutFailure = true }
            // Zeros were written (the file reached past the frames) and the commit still failed.
            if extending, fileEnd > end { roomRefused = true }
            fileEnd = size
            throw error
        }
        size = end
    }

    /// Writes zeros from `end` (the end of the frames just written past the file's end) to the next multiple of
    /// ``roomAhead`` (not past ``sizeLimit``). Room is an optimization: when the zeros cannot be written (a disk too
    /// full for them), the file is cut back to `end` and the commit goes on without room.
    private func extend(from end: Int) {
        fileEnd = end
        guard roomAhead > 0, !roomRefused else { return }
        let target = min(sizeLimit, (end / roomAhead + 1) * roomAhead)
        do throws(StoreError) {
            var offset = end
            while offset < target {
                let count = min(Self.zeros.count, target - offset)
                try write(Array(Self.zeros[..<count]), at: offset)
                offset += count
            }
        } catch {
            _ = ftruncate(descriptor, off_t(end))
            return
        }
        fileEnd = target
    }

    private static let zeros = [UInt8](repeating: 0, count: 64 << 10)

    private func write(_ bytes: [UInt8], at offset: Int) throws(StoreError) {
        try Self.write(bytes, to: descriptor, at: offset, path: path)
    }

    private static func write(_ bytes: [UInt8], to descriptor: Int32, at offset: Int, path: String) throws(StoreError) {
        var done = 0
        while done < bytes.count {
            let result = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress! + done, bytes.count - done, off_t(offset + done)) }
            if result < 0, errno == EINTR { continue }
            guard result > 0 else { throw .writeFailed(path: path, detail: result < 0 ? describe(errno) : "nothing written") }
            done += result
        }
    }

    private func truncate(to offset: Int) throws(StoreError) {
        guard ftruncate(descriptor, off_t(offset)) == 0, fdatasync(descriptor) == 0 else {
            throw .writeFailed(path: path, detail: Self.describe(errno))
        }
    }

    /// Makes the file's name durable (its creation, a compaction's rename).
    private func syncDirectory() throws(StoreError) {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let handle = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard handle >= 0 else { throw .writeFailed(path: directory, detail: Self.describe(errno)) }
        defer { close(handle) }
        guard fsync(handle) == 0 else { throw .writeFailed(path: directory, detail: Self.describe(errno)) }
    }

    // MARK: Frames

    private static func frame(_ kind: FrameKind, _ body: [UInt8]) -> [UInt8] {
        frame(kind, size: body.count) { $0.bytes(body) }
    }

    /// A frame of `kind` whose body, exactly `size` bytes, `body` writes in place after the frame's length and checksum,
    /// which are written once the body is complete. The frame is allocated once at its size and each field stored in
    /// place: appending field by field cost more than the checksum.
    private static func frame(_ kind: FrameKind, size: Int, _ body: (inout FrameWriter) -> Void) -> [UInt8] {
        let count = frameOverhead + 1 + size
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let frame = UnsafeMutableRawBufferPointer(buffer)
            var writer = FrameWriter(UnsafeMutableRawBufferPointer(rebasing: frame[frameOverhead...]))
            writer.byte(kind.rawValue)
            body(&writer)
            precondition(writer.isFull, "an inbox log frame's body is not the size it was given")
            let checksum = crc(UnsafeRawBufferPointer(rebasing: frame[frameOverhead...]))
            frame.storeBytes(of: UInt32(count - frameOverhead).littleEndian, toByteOffset: 0, as: UInt32.self)
            frame.storeBytes(of: checksum.littleEndian, toByteOffset: 4, as: UInt32.self)
            initialized = count
        }
    }

    /// A commit frame whose entries, exactly `size` bytes, `entries` writes.
    private static func commitFrame(size: Int, _ entries: (inout FrameWriter) -> Void) -> [UInt8] {
        frame(.commit, size: size, entries)
    }

    /// Writes an entry of `kind` whose body, exactly `bodySize` bytes, `body` writes.
    private static func writeEntry(_ kind: EntryKind, bodySize: Int, to writer: inout FrameWriter, _ body: (inout FrameWriter) -> Void) {
        writer.byte(kind.rawValue)
        writer.uint32(UInt32(bodySize))
        let end = writer.offset + bodySize
        body(&writer)
        precondition(writer.offset == end, "an inbox log entry's body is not the size it was given")
    }

    /// The size of `record`'s accepted entry.
    private static func acceptedEntrySize(_ record: InboxRecord) -> Int {
        entryOverhead + acceptedBodySize(record)
    }

    private static func acceptedBodySize(_ record: InboxRecord) -> Int {
        1 + 4 * 8 + (record.expiration == nil ? 0 : 8) + 3 * 4 + record.messageID.utf8.count + record.targetKind.utf8.count
            + record.targetValue.utf8.count + (record.collapseKey.map { 4 + $0.utf8.count } ?? 0) + record.userInfo.count
    }

    /// A finished entry's body: the message ID.
    private static func finishedBodySize(_ id: String) -> Int { 4 + id.utf8.count }

    /// A seen entry's body: when the ID was seen, then the ID.
    private static func seenBodySize(_ id: String) -> Int { 8 + 4 + id.utf8.count }

    private static func seenEntrySize(_ id: String) -> Int { entryOverhead + seenBodySize(id) }

    private static func writeSeen(_ entry: (id: String, seenAt: Int64), to writer: inout FrameWriter) {
        writeEntry(.seen, bodySize: seenBodySize(entry.id), to: &writer) {
            $0.int64(entry.seenAt)
            $0.string(entry.id)
        }
    }

    private static let deduplicatesFlag: UInt8 = 1
    private static let addsToWindowFlag: UInt8 = 2
    private static let expirationFlag: UInt8 = 4
    private static let collapseKeyFlag: UInt8 = 8
    private static let releasedFlag: UInt8 = 16

    private static func writeAccepted(
        _ record: InboxRecord, replays: Int, addsToWindow: Bool, seenAt: Int64, released: Bool = false, to writer: inout FrameWriter
    ) {
        writeEntry(.accepted, bodySize: acceptedBodySize(record), to: &writer) { body in
            var flags: UInt8 = 0
            if record.deduplicates { flags |= deduplicatesFlag }
            if addsToWindow { flags |= addsToWindowFlag }
            if record.expiration != nil { flags |= expirationFlag }
            if record.collapseKey != nil { flags |= collapseKeyFlag }
            if released { flags |= releasedFlag }
            body.byte(flags)
            body.int64(Int64(replays))
            body.int64(seenAt)
            body.int64(record.receivedAt)
            body.int64(Int64(record.priority))
            if let expiration = record.expiration { body.int64(expiration) }
            body.string(record.messageID)
            body.string(record.targetKind)
            body.string(record.targetValue)
            if let collapseKey = record.collapseKey { body.string(collapseKey) }
            body.bytes(record.userInfo)
        }
    }

    private static func decodeAccepted(_ reader: inout FrameReader) -> (InboxRecord, Int, Bool, Int64, Bool)? {
        guard let flags = reader.byte(), let replays = reader.int64(), let seenAt = reader.int64(), let receivedAt = reader.int64(),
            let priority = reader.int64()
        else { return nil }
        var expiration: Int64?
        if flags & expirationFlag != 0 {
            guard let value = reader.int64() else { return nil }
            expiration = value
        }
        guard let id = reader.string(), let targetKind = reader.string(), let targetValue = reader.string() else { return nil }
        var collapseKey: String?
        if flags & collapseKeyFlag != 0 {
            guard let value = reader.string() else { return nil }
            collapseKey = value
        }
        var record = InboxRecord(
            messageID: id, userInfo: reader.rest(), targetKind: targetKind, targetValue: targetValue, collapseKey: collapseKey,
            priority: Int(truncatingIfNeeded: priority), expiration: expiration, receivedAt: receivedAt)
        record.deduplicates = flags & deduplicatesFlag != 0
        return (record, Int(clamping: replays), flags & addsToWindowFlag != 0, seenAt, flags & releasedFlag != 0)
    }

    private static func crc(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return 0 }
        return UInt32(truncatingIfNeeded: crc32(0, base.assumingMemoryBound(to: Bytef.self), uInt(bytes.count)))
    }

    private static func describe(_ code: Int32) -> String { "\(String(cString: strerror(code))) (errno \(code))" }
}

/// Stores bytes, little-endian integers and length-prefixed strings in order into room made for them (a frame's
/// body, sized before it is written); a write past the room traps.
private struct FrameWriter {
    private let room: UnsafeMutableRawBufferPointer
    private(set) var offset = 0

    init(_ room: UnsafeMutableRawBufferPointer) { self.room = room }

    var isFull: Bool { offset == room.count }

    /// Where the next `count` bytes go; moves past them.
    @inline(__always)
    private mutating func advance(_ count: Int) -> UnsafeMutableRawPointer {
        precondition(count <= room.count - offset, "an inbox log frame written past the size it was given")
        defer { offset += count }
        return room.baseAddress.unsafelyUnwrapped + offset
    }

    @inline(__always)
    mutating func byte(_ value: UInt8) { advance(1).storeBytes(of: value, as: UInt8.self) }

    @inline(__always)
    mutating func uint32(_ value: UInt32) { advance(4).storeBytes(of: value.littleEndian, as: UInt32.self) }

    @inline(__always)
    mutating func int64(_ value: Int64) { advance(8).storeBytes(of: value.littleEndian, as: Int64.self) }

    mutating func bytes(_ value: UnsafeRawBufferPointer) {
        guard let source = value.baseAddress, !value.isEmpty else { return }
        advance(value.count).copyMemory(from: source, byteCount: value.count)
    }

    mutating func bytes(_ value: [UInt8]) { value.withUnsafeBytes { bytes($0) } }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            uint32(UInt32(utf8.count))
            bytes(UnsafeRawBufferPointer(utf8))
        }
    }
}

/// Reads what ``FrameWriter`` wrote, each read `nil` past the body's end.
private struct FrameReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func int64() -> Int64? {
        guard bytes.count - offset >= 8 else { return nil }
        defer { offset += 8 }
        return Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: Int64.self))
    }

    mutating func string() -> String? {
        guard bytes.count - offset >= 4 else { return nil }
        let length = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        guard bytes.count - offset - 4 >= length else { return nil }
        defer { offset += 4 + length }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + length)]), as: UTF8.self)
    }

    /// The next entry's body (its length first), as a reader of its own.
    mutating func entry() -> FrameReader? {
        guard bytes.count - offset >= 4 else { return nil }
        let length = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        guard bytes.count - offset - 4 >= length else { return nil }
        defer { offset += 4 + length }
        return FrameReader(UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 4 + length)]))
    }

    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }
}
