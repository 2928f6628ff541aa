import Foundation

/// A new, empty directory under /tmp whose name begins with `prefix` and is unique (`mkdtemp`), so tests running in
/// parallel never share one. The caller removes it (``removeTemporaryDirectory(_:)``), or uses
/// `withTemporaryDirectory`, which does.
public func makeTemporaryDirectory(prefix: String = "herald-test") throws -> String {
    var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return String(cString: made)
}

/// Removes a directory made by ``makeTemporaryDirectory(prefix:)`` and everything in it.
public func removeTemporaryDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// Runs `body` with a new, empty directory under /tmp (``makeTemporaryDirectory(prefix:)``), removed after it.
public func withTemporaryDirectory<T>(prefix: String = "herald-test", _ body: (String) async throws -> T) async throws -> T {
    let path = try makeTemporaryDirectory(prefix: prefix)
    defer { removeTemporaryDirectory(path) }
    return try await body(path)
}

/// Runs `body` with a new, empty directory under /tmp (``makeTemporaryDirectory(prefix:)``), removed after it: the
/// form for a synchronous caller (disfavoured, so that an asynchronous caller gets the form above even when its
/// body does not await).
@_disfavoredOverload
public func withTemporaryDirectory<T>(prefix: String = "herald-test", _ body: (String) throws -> T) throws -> T {
    let path = try makeTemporaryDirectory(prefix: prefix)
    defer { removeTemporaryDirectory(path) }
    return try body(path)
}
