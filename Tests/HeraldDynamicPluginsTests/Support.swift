import Foundation
import Glibc
import Herald
import HeraldDynamicPlugins
import HeraldTesting
import Testing

/// The build products directory: the test bundle's own. The plugins' shared objects are products of the package,
/// built there by `swift build --build-tests`.
let productsDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()

/// The path of the shared object of product `name` (`lib<name>.so`), which must have been built.
func sharedObject(_ name: String) throws -> String {
    let path = productsDirectory.appendingPathComponent("lib\(name).so").path
    try #require(
        FileManager.default.fileExists(atPath: path),
        "\(path) is missing: build with `swift build --build-tests`, which builds every product")
    return path
}

/// The path of the C library's shared object (mapped in every process; it exports no plugin entry point), from
/// this process's memory map.
func cLibraryPath() throws -> String {
    // Read to the end: /proc files report a size of 0.
    let handle = try #require(FileHandle(forReadingAtPath: "/proc/self/maps"))
    defer { try? handle.close() }
    let maps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
    let line = try #require(maps.split(separator: "\n").first { $0.hasSuffix("/libc.so.6") })
    return String(line[try #require(line.firstIndex(of: "/"))...])
}

/// One call the C test plugin recorded: its name and its argument (the JSON, the token, a number).
struct RecordedCall: Sendable, Equatable {
    var call: String
    var argument: String

    /// The argument parsed as JSON.
    var json: JSONValue? { try? JSONParser.parse(argument) }
}

/// The calls the C test plugin recorded in `file`, in order.
func recordedCalls(_ file: URL) -> [RecordedCall] {
    guard let text = try? String(contentsOf: file, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").map { line in
        let parts = line.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
        return RecordedCall(call: String(parts[0]), argument: parts.count > 1 ? String(parts[1]) : "")
    }
}

/// The `apns` member of a silent (background) message.
let silentAPNs = #"{"headers": {"apns-priority": "5", "apns-push-type": "background"}, "payload": {"aps": {"content-available": 1}}}"#

/// Runs `body` and returns the DynamicPluginError it threw (`nil` when it threw none, or another error).
func dynamicPluginError(_ body: () throws -> Void) -> DynamicPluginError? {
    do {
        try body()
        return nil
    } catch {
        return error as? DynamicPluginError
    }
}
