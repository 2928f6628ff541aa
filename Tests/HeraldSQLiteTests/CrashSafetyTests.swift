import Foundation
import HeraldTesting
import Testing

/// Runs the CrashProbe executable (built beside the test bundle) with `arguments`.
func crashProbe(_ arguments: [String]) throws -> Process {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent(
        "CrashProbe")
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    return process
}

@Suite("Crash safety: a process killed with SIGKILL loses nothing it acknowledged", .serialized)
struct CrashSafetyTests {
    @Test("10,000 messages accepted, the process killed, a new process handles each exactly once", .timeLimit(.minutes(5)))
    func killAndRecover() async throws {
        let count = 10_000
        try await withDataDirectory { directory in
            let accept = try crashProbe(["accept", "\(count)", directory])
            let output = Pipe()
            accept.standardOutput = output
            try runWithNoSignalsBlocked(accept)
            // The child's output is read on a thread of its own, not on one of the cooperative pool's.
            let seen = try await onOwnThread {
                var seen = Data()
                while !String(decoding: seen, as: UTF8.self).contains("accepted \(count)") {
                    let chunk = output.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    seen.append(chunk)
                }
                return seen
            }
            #expect(String(decoding: seen, as: UTF8.self).contains("accepted \(count)"))
            kill(accept.processIdentifier, SIGKILL)
            await waitUntilExitWithoutSpinning(accept)
            #expect(accept.terminationReason == .uncaughtSignal)

            let recover = try crashProbe(["recover", "\(count)", directory])
            let result = Pipe()
            recover.standardOutput = result
            try runWithNoSignalsBlocked(recover)
            let data = try await onOwnThread { result.fileHandleForReading.readDataToEndOfFile() }
            await waitUntilExitWithoutSpinning(recover)
            #expect(recover.terminationStatus == 0)
            let summary = try JSONSerialization.jsonObject(with: data) as? [String: Int]
            #expect(summary?["handled"] == count)
            #expect(summary?["distinct"] == count)
            #expect(summary?["replayed"] == count)
            #expect(summary?["resentHandled"] == 0)
        }
    }
}
