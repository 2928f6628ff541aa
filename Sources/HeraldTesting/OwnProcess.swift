import Foundation
public import Testing

/// A trait for a test that needs the process to itself, such as one that counts the process's open file
/// descriptors: tests running beside it in parallel would change what it measures.
///
/// In a run of the suite the test does not run in the test process: the trait starts the test bundle again as a
/// child process that runs this test alone (`--filter` with its ID), waits for it (at most `timeout`), and records
/// an issue with the child's output when the child fails. In that child the test body runs as written. So the
/// test stays in the parallel run and still measures a process nothing else is using.
///
///     @Test("shutdown closes every descriptor it opened", .ownProcess)
public struct OwnProcessTrait: TestTrait, TestScoping {
    /// How long the child may take before it is killed and the test fails.
    public var timeout: Duration

    /// The environment variable that tells the child which test is its own (its ID).
    static let variable = "TEST_HERALD_OWN_PROCESS"

    /// What the child prints once the test's body has returned, before the test's ID.
    static let ranMarker = "own process ran: "

    /// In the child that runs this test, runs the test; anywhere else, starts that child and waits for it.
    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let id = test.id.description
        if ProcessInfo.processInfo.environment[Self.variable] == id {
            try await function()
            print(Self.ranMarker + id)
            return
        }
        let bundle = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
        let seconds = String(timeout.components.seconds)
        let filter = "^" + NSRegularExpression.escapedPattern(for: id) + "$"
        // Awaited (the child waited for on a thread of its own): the test runs for as long as the child does, which
        // would otherwise hold one of the cooperative pool's few threads from every other test meanwhile.
        let result = try await runExecutable(
            URL(fileURLWithPath: "/usr/bin/timeout"),
            ["--signal=KILL", seconds, bundle, "--testing-library", "swift-testing", "--filter", filter],
            environment: [Self.variable: id])
        // The marker says the filter selected this test and its body ran to its end in the child.
        if result.status != 0 || !result.output.contains(Self.ranMarker + id) {
            Issue.record(
                """
                the test's own process (\(bundle) --filter \(filter)) exited with status \(result.status)\
                \(result.status == 137 ? " (killed after \(seconds) s)" : ""):
                \(result.output)\(result.error)
                """)
        }
    }
}

extension Trait where Self == OwnProcessTrait {
    /// Runs the test in a child process of its own (see ``OwnProcessTrait``), killed after 120 s.
    public static var ownProcess: Self { OwnProcessTrait(timeout: .seconds(120)) }

    /// Runs the test in a child process of its own (see ``OwnProcessTrait``), killed after `timeout`.
    public static func ownProcess(timeout: Duration) -> Self { OwnProcessTrait(timeout: timeout) }
}
