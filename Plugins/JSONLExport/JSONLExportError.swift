import Glibc

/// A file operation of the delivery-metrics export failed. It names the file, the operation and the system's
/// error, so that the log line of the analytics pipeline (which counts the failure and retries the batch) says
/// what to fix.
public struct JSONLExportError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What the export was doing.
    public enum Operation: String, Sendable, Hashable {
        /// Creating the file's directory (at start).
        case createDirectory = "create the directory of"
        /// Opening (or creating) the file.
        case open = "open"
        /// Appending lines.
        case write = "write to"
        /// Taking back the bytes of a write that failed half-way.
        case truncate = "truncate"
        /// Moving the full file aside (`file` → `file.1`, ...).
        case rotate = "rotate"
        /// `fsync(2)`.
        case sync = "sync"
    }

    public let operation: Operation
    /// The file (or, for ``Operation/rotate``, the file being moved).
    public let path: String
    /// The `errno` the system answered.
    public let code: Int32

    public init(_ operation: Operation, path: String, code: Int32) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    public var description: String {
        "delivery-metrics export: cannot \(operation.rawValue) \(path): \(String(cString: strerror(code))) (errno \(code))"
    }
}
