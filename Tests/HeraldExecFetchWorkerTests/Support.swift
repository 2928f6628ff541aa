import Foundation
import Herald
import HeraldExecFetchWorker
import HeraldTesting
import Logging
import Testing

/// Writes a `/bin/sh` script to `directory/name` with mode `mode` and returns its path.
@discardableResult
func writeScript(_ body: String, named name: String, in directory: String, mode: Int = 0o755) throws -> String {
    let path = "\(directory)/\(name)"
    try ("#!/bin/sh\n" + body + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    return path
}

func readFile(_ path: String) -> String? {
    try? String(contentsOfFile: path, encoding: .utf8)
}

/// The number a script wrote to `path`.
func readNumber(_ path: String) -> Int32? {
    readFile(path).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
}

/// Whether no process `pid` exists any more, not even as a zombie: `kill(pid, 0)` fails with `ESRCH`.
func processIsGone(_ pid: Int32) -> Bool {
    kill(pid, 0) == -1 && errno == ESRCH
}

/// Whether process `pid` has ended: gone, or a zombie that its (new) parent has not reaped yet.
func processHasEnded(_ pid: Int32) -> Bool {
    if processIsGone(pid) { return true }
    guard let stat = readFile("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return true }
    return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
}

/// A Herald instance with `worker`, an in-memory receiver's token and a recording sink, started; `body` runs, then
/// the instance shuts down and the test checks that no libuv handle is left.
func withWorker(
    _ worker: ExecFetchWorker,
    deadline: Duration = .seconds(600),
    shutdownGracePeriod: Duration = .seconds(10),
    logs: LogCollector = LogCollector(),
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: (Herald, RecordingSink) async throws -> Void
) async throws {
    var configuration = Herald.Configuration(senderID: "1234567890")
    configuration.backgroundFetchDeadline = deadline
    configuration.shutdownGracePeriod = shutdownGracePeriod
    let herald = Herald(configuration: patientShutdown(configuration), logger: logs.logger())
    let sink = RecordingSink()
    try herald.register(worker)
    try herald.register(sink)
    try await herald.start()
    do {
        try await body(herald, sink)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
    #expect(herald.loop.statistics.liveHandles == 0, "libuv handles left open", sourceLocation: sourceLocation)
}

/// Delivers a silent message (`content-available: 1`) with `data` to `herald`; returns it as the handlers saw it.
func deliverSilent(_ data: [String: String] = [:], to herald: Herald) async throws -> RemoteMessage {
    let token = try await herald.token()
    let fields = data.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \"\($0.value)\"" }.joined(separator: ", ")
    let body = """
        {"message": {"token": "\(token)", "data": {\(fields)},
         "apns": {"headers": {"apns-priority": "5", "apns-push-type": "background"}, "payload": {"aps": {"content-available": 1}}}}}
        """
    let message = try FCMSendRequest.decode(Array(body.utf8), context: herald.decodingContext).message
    _ = try await herald.deliver(message).get()
    return message
}

/// The `background_fetch` result recorded for `message`, once analytics has it.
func fetchResult(of message: RemoteMessage, in sink: RecordingSink) async -> String? {
    _ = await eventually { sink.events(named: .backgroundFetch).contains { $0.messageID == message.messageID } }
    return sink.events(named: .backgroundFetch).first { $0.messageID == message.messageID }?.parameters["result"]
}
