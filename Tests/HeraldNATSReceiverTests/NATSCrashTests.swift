import Foundation
import HeraldNATSReceiver
import HeraldTesting
import Testing

@Suite("NATS crash safety: a daemon killed mid-stream loses nothing JetStream stored", .serialized)
struct NATSCrashTests {
    @Test(
        "SIGKILL mid-stream, restart: every message handled, each accepted once (the inbox de-duplicates redeliveries)",
        .timeLimit(.minutes(2)))
    func killAndRestart() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-nats-crash") { directory in
            let count = 600
            let first = try startProbe(server: server, directory: directory)
            let token = try await readToken(directory)
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.token(project: "demo", token: token)
            func publish(_ range: Range<Int>) throws {
                for n in range {
                    try client.publishStored(subject, #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"#)
                }
            }
            let second = try await killMidStream(first, server: server, directory: directory, count: count, publish: publish)
            defer {
                kill(second.processIdentifier, SIGKILL)
                waitUntilExitWithoutSpinning(second)
            }
            // Redeliveries JetStream makes after the restart (acks the kill prevented) are duplicates to the inbox; the
            // work-queue stream is empty once every one of them was acknowledged, so nothing more can arrive.
            #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
            expectEachAcceptedOnce(directory, count: count)
        }
    }

    @Test(
        "stored topics, an ack per committed group: SIGKILL after commits not yet acknowledged, restart: every message handled, each accepted once",
        .timeLimit(.minutes(2)))
    func killAndRestartStoredTopic() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-nats-crash-topic") { directory in
            let count = 600
            let first = try startProbe(server: server, directory: directory, topic: "crash")
            _ = try await readToken(directory)
            let client = try NATSPublisher(url: server.url)
            let subject = NATSSubjects.topic(project: "demo", topic: "crash")
            func publish(_ range: Range<Int>) throws {
                for n in range {
                    let body = Array(#"{"message": {"topic": "crash", "data": {"n": "\#(n)"}}}"#.utf8)
                    _ = try client.publishTopic(subject, body: body, messageID: "crash-\(n)", stored: true)
                }
            }
            // As for token messages. The kill finds messages committed whose covering ack was not sent yet, or not
            // taken: delivered again after the restart, they must be recognised as handled.
            let second = try await killMidStream(
                first, server: server, directory: directory, topic: "crash", count: count, publish: publish)
            defer {
                kill(second.processIdentifier, SIGKILL)
                waitUntilExitWithoutSpinning(second)
            }
            expectEachAcceptedOnce(directory, count: count)
        }
    }

    /// The first half of `count` messages while `first` runs, killed once a quarter of the stream is handled (on a
    /// busy machine it may have handled the whole half by then); the second half while it is down, so that the
    /// restarted daemon always has messages the first never saw. Returns the second daemon once every message was
    /// handled (or the wait ran out).
    private func killMidStream(
        _ first: Process, server: NATSServerProcess, directory: String, topic: String? = nil, count: Int,
        publish: (Range<Int>) throws -> Void
    ) async throws -> Process {
        try publish(0..<count / 2)
        #expect(await eventually(timeout: .seconds(30)) { handled(directory).count >= count / 4 })
        kill(first.processIdentifier, SIGKILL)
        await waitUntilExitWithoutSpinning(first)
        #expect(first.terminationReason == .uncaughtSignal)
        try publish(count / 2..<count)
        #expect(handled(directory).count < count, "the kill came after the stream had been handled; it tests nothing")
        let second = try startProbe(server: server, directory: directory, topic: topic)
        #expect(await eventually(timeout: .seconds(60)) { Set(handled(directory).map(\.n)).count == count })
        return second
    }

    /// Every message of `0..<count` handled, none accepted as new twice (redeliveries are replays).
    private func expectEachAcceptedOnce(_ directory: String, count: Int) {
        let all = handled(directory)
        #expect(Set(all.map(\.n)) == Set(0..<count))
        let fresh = all.filter { !$0.replay }
        #expect(fresh.count == Set(fresh.map(\.n)).count, "a message was accepted as new twice")
    }

    private func startProbe(server: NATSServerProcess, directory: String, topic: String? = nil) throws -> Process {
        let process = Process()
        process.executableURL = buildProductsDirectory.appendingPathComponent("NATSProbe")
        process.arguments = [server.url, directory] + (topic.map { [$0] } ?? [])
        process.standardOutput = FileHandle.nullDevice
        try? FileManager.default.removeItem(atPath: directory + "/token")
        try runWithNoSignalsBlocked(process)
        return process
    }

    private func readToken(_ directory: String) async throws -> String {
        #expect(await eventually { FileManager.default.fileExists(atPath: directory + "/token") })
        return try String(contentsOfFile: directory + "/token", encoding: .utf8)
    }
}

/// The lines of handled.log: the message's `n` and whether it was a replay of the inbox.
private func handled(_ directory: String) -> [(n: Int, replay: Bool)] {
    let text = (try? String(contentsOfFile: directory + "/handled.log", encoding: .utf8)) ?? ""
    return text.split(separator: "\n").compactMap { line in
        let parts = line.split(separator: " ")
        guard parts.count == 2, let n = Int(parts[0]) else { return nil }
        return (n, parts[1] == "1")
    }
}
