// CrashProbe: the child process of the crash-safety test (Tests/HeraldSQLiteTests/CrashSafetyTests.swift).
//
//   CrashProbe accept N DIR   starts Herald on the SQLite store in DIR with a handler that never finishes,
//                             delivers N messages (IDs c0 ... c{N-1}), prints "accepted N" once every one is
//                             acknowledged (so committed), then waits to be killed.
//   CrashProbe recover N DIR  starts Herald on DIR with a recording handler, waits until N messages were
//                             handled, sends the N messages again (they must be duplicates), and prints one
//                             JSON line: {"handled": ..., "distinct": ..., "replayed": ..., "resentHandled": ...}.

import Foundation
import Herald
import HeraldSQLite

final class Probe: MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: state behind a lock.
    let block: Bool
    private let lock = NSLock()
    private var ids: [String] = []
    private var replayed = 0

    private var expected = Int.max
    private var reached: CheckedContinuation<Void, Never>?

    init(block: Bool) { self.block = block }

    /// Returns once `count` messages have been handled.
    func waitFor(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = lock.withLock {
                if ids.count >= count { return true }
                expected = count
                reached = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }

    func didReceive(_ message: RemoteMessage) async throws {
        let ready: CheckedContinuation<Void, Never>? = lock.withLock {
            ids.append(message.messageID ?? "")
            if message.isReplay { replayed += 1 }
            guard ids.count >= expected else { return nil }
            defer { reached = nil }
            return reached
        }
        ready?.resume()
        if block { await waitToBeKilled() }
    }

    var snapshot: (ids: [String], replayed: Int) { lock.withLock { (ids, replayed) } }
}

/// Suspends for good: the test ends this process with SIGKILL.
func waitToBeKilled() async {
    await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
}

func message(_ index: Int, token: String) -> RemoteMessage {
    RemoteMessage(userInfo: ["gcm.message_id": .string("c\(index)"), "n": .string("\(index)")], target: .token(token))
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: CrashProbe accept|recover N DIR\n".utf8))
    exit(2)
}
let directory = arguments[3]
var configuration = Herald.Configuration(senderID: "1")
configuration.maxInFlight = count * 2 + 16
configuration.deduplication = DeduplicationWindow(maximumCount: count * 2 + 16)
let herald = Herald(configuration: configuration, store: try SQLiteStore(directory: directory))

switch arguments[1] {
case "accept":
    try herald.register(Probe(block: true))
    try await herald.start()
    let token = try await herald.token()
    try await withThrowingTaskGroup(of: Void.self) { group in
        var next = 0
        // Keep 256 sends in flight so that group commit has something to group.
        while next < min(256, count) {
            let index = next
            group.addTask { _ = try await herald.deliver(message(index, token: token)).get() }
            next += 1
        }
        while try await group.next() != nil {
            if next < count {
                let index = next
                group.addTask { _ = try await herald.deliver(message(index, token: token)).get() }
                next += 1
            }
        }
    }
    FileHandle.standardOutput.write(Data("accepted \(count)\n".utf8))
    await waitToBeKilled()
case "recover":
    let probe = Probe(block: false)
    try herald.register(probe)
    try await herald.start()
    let token = try await herald.token()
    // The test that runs this process bounds it with its own time limit.
    await probe.waitFor(count)
    try await herald.waitUntilIdle()
    let afterReplay = probe.snapshot
    for index in 0..<count {
        _ = try await herald.deliver(message(index, token: token)).get()
    }
    try await herald.waitUntilIdle()
    let afterResend = probe.snapshot
    await herald.shutdown()
    print(
        #"{"handled": \#(afterReplay.ids.count), "distinct": \#(Set(afterReplay.ids).count), "replayed": \#(afterReplay.replayed), "resentHandled": \#(afterResend.ids.count - afterReplay.ids.count)}"#
    )
default:
    exit(2)
}
