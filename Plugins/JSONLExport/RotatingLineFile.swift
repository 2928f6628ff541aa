import Glibc

/// Appends whole lines to one file with POSIX `open(O_APPEND)` / `write`, and rotates it by size: `file` →
/// `file.1` → ... → `file.N`, the oldest removed.
///
/// Guarantees, for a regular file:
/// - a line is never split across files: each line goes whole into the current file, and the file is rotated
///   before a line that would take it past ``maximumBytes`` (a line longer than the limit on its own goes alone
///   into a fresh file);
/// - a write that fails half-way is taken back (`ftruncate` to the size before it), so no partial line stays;
///   if even that fails, the file is closed and its torn last line cut off when it is opened again;
/// - a file whose last line is torn (a crash in the middle of a write) is repaired when opened: the bytes after
///   its last newline are cut off.
///
/// A path that is not a regular file (a FIFO, `/dev/stdout`, `/dev/full`) is written to but never rotated or
/// truncated. Not thread-safe: its owner serializes every call.
final class RotatingLineFile {
    let path: String
    let maximumBytes: Int
    let keptFiles: Int

    private var descriptor: Int32 = -1
    /// The current file's size in bytes (regular files only).
    private var size = 0
    private var isRegular = true
    private var identity: (device: UInt64, inode: UInt64) = (0, 0)

    /// Makes writes fail, for tests: the next writes may still put `remainingBytes` bytes in the file (0: none);
    /// past that they fail with `code`, once (then the fault is gone) or until it is removed. `nil`: no fault.
    var fault: (remainingBytes: Int, code: Int32, once: Bool)?

    init(path: String, maximumBytes: Int, keptFiles: Int) {
        self.path = path
        self.maximumBytes = maximumBytes
        self.keptFiles = keptFiles
    }

    deinit {
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    var isOpen: Bool { descriptor >= 0 }

    /// Creates the directories leading to the file (`mkdir -p`), mode 0755.
    func createDirectory() throws(JSONLExportError) {
        var prefix = ""
        let components = path.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        for (index, component) in components.enumerated() {
            prefix += (index == 0 ? "" : "/") + component
            guard !component.isEmpty, component != ".", component != ".." else { continue }
            if mkdir(prefix, 0o755) != 0, errno != EEXIST {
                throw JSONLExportError(.createDirectory, path: path, code: errno)
            }
        }
    }

    /// Opens the file when it is not open, or opens it again when it was moved or deleted since (log rotation by
    /// another tool, a removed directory: the directory is not created again). Returns how many bytes of a torn
    /// last line were cut off.
    @discardableResult
    func openIfNeeded() throws(JSONLExportError) -> Int {
        if descriptor >= 0 {
            var current = stat()
            if stat(path, &current) == 0, current.st_dev == identity.device, current.st_ino == identity.inode {
                var opened = stat()
                if isRegular, fstat(descriptor, &opened) == 0 { size = Int(opened.st_size) }
                return 0
            }
            close()
        }
        // Read-write: a torn last line is found with pread. O_APPEND: every write goes to the end.
        let opened = Glibc.open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard opened >= 0 else { throw JSONLExportError(.open, path: path, code: errno) }
        var info = stat()
        guard fstat(opened, &info) == 0 else {
            let code = errno
            Glibc.close(opened)
            throw JSONLExportError(.open, path: path, code: code)
        }
        descriptor = opened
        identity = (UInt64(info.st_dev), UInt64(info.st_ino))
        isRegular = (info.st_mode & S_IFMT) == S_IFREG
        size = isRegular ? Int(info.st_size) : 0
        return isRegular ? try repairTornTail() : 0
    }

    /// Appends the lines of `lines` from `progress` on (each ending with a newline), advancing `progress` past
    /// every line that is in a file. On a failure, `progress` says how many lines made it; the bytes of the lines
    /// after it were taken back.
    func append(_ lines: LineBatch, progress: inout Int) throws(JSONLExportError) {
        while progress < lines.lineCount {
            try openIfNeeded()
            if isRegular, size > 0, size + lines.length(ofLine: progress) > maximumBytes {
                try rotate()
                try openIfNeeded()
            }
            // As many lines as fit in this file, at least one.
            var end = progress
            var bytes = 0
            while end < lines.lineCount, end == progress || !isRegular || size + bytes + lines.length(ofLine: end) <= maximumBytes {
                bytes += lines.length(ofLine: end)
                end += 1
            }
            let (written, code) = writeAll(lines.bytes(ofLines: progress..<end))
            guard code == 0 else {
                if written > 0, isRegular {
                    if ftruncate(descriptor, off_t(size)) != 0 {
                        // The torn line stays until the file is opened again, which cuts it off.
                        close()
                    }
                }
                throw JSONLExportError(.write, path: path, code: code)
            }
            if isRegular { size += written }
            progress = end
        }
    }

    /// `fsync(2)` of the open file; nothing when it is not open.
    func sync() throws(JSONLExportError) {
        guard descriptor >= 0 else { return }
        // EINVAL / EROFS: the file (a FIFO, a terminal) does not support it; nothing to make durable.
        if fsync(descriptor) != 0, errno != EINVAL, errno != EROFS {
            throw JSONLExportError(.sync, path: path, code: errno)
        }
    }

    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    /// `file.N` removed, `file.K` → `file.K+1`, `file` → `file.1`, after an fsync of the current file. With no
    /// kept files, the current file is removed.
    private func rotate() throws(JSONLExportError) {
        try sync()
        close()
        guard keptFiles > 0 else {
            if unlink(path) != 0, errno != ENOENT { throw JSONLExportError(.rotate, path: path, code: errno) }
            return
        }
        let oldest = "\(path).\(keptFiles)"
        if unlink(oldest) != 0, errno != ENOENT { throw JSONLExportError(.rotate, path: oldest, code: errno) }
        for index in stride(from: keptFiles - 1, through: 1, by: -1) {
            let from = "\(path).\(index)"
            if rename(from, "\(path).\(index + 1)") != 0, errno != ENOENT {
                throw JSONLExportError(.rotate, path: from, code: errno)
            }
        }
        if rename(path, "\(path).1") != 0, errno != ENOENT { throw JSONLExportError(.rotate, path: path, code: errno) }
    }

    /// Writes all of `bytes`, retrying short writes and EINTR. Returns the bytes written and 0, or the bytes
    /// written before the failure and its errno.
    private func writeAll(_ bytes: UnsafeRawBufferPointer) -> (written: Int, code: Int32) {
        var offset = 0
        while offset < bytes.count {
            var requested = bytes.count - offset
            if let fault {
                guard fault.remainingBytes > 0 else {
                    if fault.once { self.fault = nil }
                    return (offset, fault.code)
                }
                requested = min(requested, fault.remainingBytes)
                self.fault = (fault.remainingBytes - requested, fault.code, fault.once)
            }
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, requested)
            if written < 0 {
                if errno == EINTR { continue }
                return (offset, errno)
            }
            if written == 0 { return (offset, EIO) }
            offset += written
        }
        return (offset, 0)
    }

    /// Cuts off the bytes after the last newline (a line torn by a crash or a failed write).
    private func repairTornTail() throws(JSONLExportError) -> Int {
        guard size > 0 else { return 0 }
        var last: UInt8 = 0
        guard pread(descriptor, &last, 1, off_t(size - 1)) == 1 else { throw JSONLExportError(.open, path: path, code: errno) }
        guard last != UInt8(ascii: "\n") else { return 0 }
        var end = size - 1
        var keep = 0
        var block = [UInt8](repeating: 0, count: 65_536)
        search: while end > 0 {
            let start = max(0, end - block.count)
            let count = end - start
            let read = block.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, count, off_t(start)) }
            guard read == count else { throw JSONLExportError(.open, path: path, code: read < 0 ? errno : EIO) }
            for index in stride(from: count - 1, through: 0, by: -1) where block[index] == UInt8(ascii: "\n") {
                keep = start + index + 1
                break search
            }
            end = start
        }
        guard ftruncate(descriptor, off_t(keep)) == 0 else { throw JSONLExportError(.truncate, path: path, code: errno) }
        let cut = size - keep
        size = keep
        return cut
    }
}
