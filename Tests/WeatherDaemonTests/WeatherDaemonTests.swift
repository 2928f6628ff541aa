import Foundation
import Herald
import HeraldTesting
import Testing

/// The executables built beside the test bundle.
let buildDirectory = buildProductsDirectory

@Suite("The WeatherDaemon example, as a child process", .serialized)
struct WeatherDaemonTests {
    @Test("a silent push refreshes the cache file atomically (newData), the same forecast again is noData; SIGTERM exits 0")
    func refreshesTheCache() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try WeatherProcess(directory: directory)
            let token = try #require(await daemon.token(), "not ready; log: \(daemon.log())")
            #expect(token.contains(":"))
            #expect(await daemon.logLine { $0.contains("subscribed") && $0.contains("topic=weather") } != nil)

            let client = try TestSocketClient(.unix(path: "\(directory)/herald.sock"))
            let silent =
                #"{"message": {"topic": "weather", "data": {"city": "Oslo", "summary": "sleet", "high": "3"}, "apns": {"headers": {"apns-push-type": "background", "apns-priority": "5"}, "payload": {"aps": {"content-available": 1}}}}}"#
            client.send(silent + "\n")
            #expect(client.readLines(1).first?.contains(#""name":"projects/herald/messages/"#) == true)
            let refreshed = try #require(await daemon.logLine { $0.contains("forecast refreshed") }, "\(daemon.log())")
            #expect(refreshed.contains("result=newData"))
            let cache = "\(directory)/forecast.json"
            #expect(try String(contentsOfFile: cache, encoding: .utf8) == #"{"city":"Oslo","high":"3","summary":"sleet"}"# + "\n")
            let firstInode = try #require(try FileManager.default.attributesOfItem(atPath: cache)[.systemFileNumber] as? Int)

            // The same forecast again (a new message ID): nothing new, the file is left alone.
            client.send(silent + "\n")
            #expect(client.readLines(1).count == 1)
            let unchanged = try #require(await daemon.logLine { $0.contains("forecast unchanged") }, "\(daemon.log())")
            #expect(unchanged.contains("result=noData"))
            #expect(try FileManager.default.attributesOfItem(atPath: cache)[.systemFileNumber] as? Int == firstInode)

            // A new forecast replaces the file (a rename: a new inode), leaving no temporary file behind.
            client.send(silent.replacingOccurrences(of: "sleet", with: "snow") + "\n")
            #expect(client.readLines(1).count == 1)
            #expect(await daemon.logLine { $0.contains("forecast refreshed") } != nil)
            #expect(try String(contentsOfFile: cache, encoding: .utf8) == #"{"city":"Oslo","high":"3","summary":"snow"}"# + "\n")
            #expect(try FileManager.default.attributesOfItem(atPath: cache)[.systemFileNumber] as? Int != firstInode)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.contains(".tmp") }.isEmpty)

            #expect(await daemon.terminate() == 0, "\(daemon.log())")
            #expect(await daemon.logLine { $0.contains("stopped") } != nil)
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/herald.sock"))
        }
    }

    @Test("display notifications: severe weather as banner and sound with its actions, the rest into the list")
    func presentsByCategory() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try WeatherProcess(directory: directory)
            #expect(await daemon.token() != nil, "not ready; log: \(daemon.log())")
            let client = try TestSocketClient(.unix(path: "\(directory)/herald.sock"))

            client.send(
                #"{"message": {"topic": "weather", "notification": {"title": "Storm warning", "body": "Gusts to 120 km/h"}, "apns": {"payload": {"aps": {"category": "SEVERE_WEATHER"}}}}}"#
                    + "\n")
            #expect(client.readLines(1).count == 1)
            let severe = try #require(await daemon.logLine { $0.contains("presenting") }, "\(daemon.log())")
            #expect(severe.contains("options=[.banner, .sound]"), "\(severe)")
            #expect(severe.contains("actions=SEE_FORECAST,SHARE_WARNING"), "\(severe)")
            #expect(severe.contains("title=Storm warning"), "\(severe)")

            client.send(
                #"{"message": {"topic": "weather", "notification": {"title": "Tomorrow", "body": "Sunny"}, "apns": {"payload": {"aps": {"category": "FORECAST"}}}}}"#
                    + "\n")
            #expect(client.readLines(1).count == 1)
            let everyday = try #require(await daemon.logLine { $0.contains("presenting") }, "\(daemon.log())")
            #expect(everyday.contains("options=[.list]"), "\(everyday)")
            #expect(everyday.contains("actions=SEE_FORECAST"), "\(everyday)")
            #expect(await daemon.terminate() == 0, "\(daemon.log())")
        }
    }

    @Test("herald topics finds the running daemon through its data-directory lock: over HTTP when it has it, refused clearly when not")
    func topicsOfTheRunningDaemon() async throws {
        try await withTemporaryDirectory { directory in
            // Without HTTP: listed, but not changed behind its back.
            let quiet = try WeatherProcess(directory: "\(directory)/quiet")
            #expect(await quiet.token() != nil, "not ready; log: \(quiet.log())")
            #expect(try await runBuiltExecutable("herald", ["topics", "list", "--data-dir", "\(directory)/quiet"]).output == "weather\n")
            let refused = try await runBuiltExecutable("herald", ["topics", "subscribe", "--data-dir", "\(directory)/quiet", "storms"])
            #expect(refused.status == 1)
            #expect(refused.error.contains("pid \(quiet.process.processIdentifier)) has no HTTP receiver"), "\(refused.error)")
            #expect(await quiet.terminate() == 0, "\(quiet.log())")

            // With HTTP: the lock file gives the address and project, so no flag is needed.
            let port = try freeLoopbackPort()
            let daemon = try WeatherProcess(
                directory: "\(directory)/http", arguments: ["--http", "127.0.0.1:\(port)", "--project-id", "weather-demo"])
            #expect(await daemon.token() != nil, "not ready; log: \(daemon.log())")
            let subscribed = try await runBuiltExecutable("herald", ["topics", "subscribe", "--data-dir", "\(directory)/http", "storms"])
            #expect(subscribed.status == 0, "\(subscribed.error)")
            #expect(subscribed.output.contains("through the running daemon at 127.0.0.1:\(port)"))
            let client = try TestSocketClient(.unix(path: "\(directory)/http/herald.sock"))
            client.send(#"{"message": {"topic": "storms", "notification": {"title": "Hail"}}}"# + "\n")
            #expect(client.readLines(1).count == 1)
            #expect(await daemon.logLine { $0.contains("presenting") && $0.contains("title=Hail") } != nil, "\(daemon.log())")
            #expect(
                try await runBuiltExecutable("herald", ["topics", "list", "--data-dir", "\(directory)/http"]).output == "storms\nweather\n")

            // A second daemon on the same directory is refused, naming the first.
            let second = try await runBuiltExecutable("WeatherDaemon", ["--data-dir", "\(directory)/http", "--socket", "none"])
            #expect(second.status == 1)
            #expect(second.error.contains("locked by pid \(daemon.process.processIdentifier)"), "\(second.error)")
            #expect(await daemon.terminate() == 0, "\(daemon.log())")
        }
    }
}

/// `WeatherDaemon` as a child process: standard output (the ready line) and standard error (the log) read line by
/// line, each with a 10 s limit.
final class WeatherProcess {
    let process = Process()
    private let output: LineReader
    private let errors: LineReader
    private var logLines: [String] = []

    init(directory: String, arguments: [String] = []) throws {
        process.executableURL = buildDirectory.appendingPathComponent("WeatherDaemon")
        process.arguments = ["--data-dir", directory] + arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        output = LineReader(out.fileHandleForReading.fileDescriptor)
        errors = LineReader(err.fileHandleForReading.fileDescriptor)
        try runWithNoSignalsBlocked(process)
    }

    /// The token from the line the daemon prints once it is ready.
    func token() async -> String? {
        guard let line = await output.line(), line.hasPrefix("registration token: ") else { return nil }
        return String(line.dropFirst("registration token: ".count))
    }

    /// The next log line that `matches`, reading on (and keeping what it reads) until one does.
    func logLine(_ matches: (String) -> Bool) async -> String? {
        while let line = await errors.line() {
            logLines.append(line)
            if matches(line) { return line }
        }
        return nil
    }

    /// What the daemon logged so far (read up to a short pause).
    func log() -> String {
        while let line = errors.line(timeout: 200) { logLines.append(line) }
        return logLines.joined(separator: "\n")
    }

    /// Sends SIGTERM and waits for the exit status.
    func terminate() async -> Int32 {
        kill(process.processIdentifier, SIGTERM)
        await waitUntilExitWithoutSpinning(process)
        return process.terminationStatus
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            waitUntilExitWithoutSpinning(process)
        }
    }
}
