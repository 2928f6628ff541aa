import Herald
import HeraldTesting
import Testing

struct Refused: Error, Equatable {
    let attempt: Int
}

/// Counts the calls of a condition: the number of this one; throws ``Refused`` for each before `until`.
private func attempt(_ attempts: Locked<Int>, refusedBefore until: Int = .max) throws -> Int {
    let attempt = attempts.withLock {
        $0 += 1
        return $0
    }
    if attempt < until { throw Refused(attempt: attempt) }
    return attempt
}

@Suite("eventually: a poll that fails for a while, then holds or not")
struct EventuallyTests {
    @Test("a condition that throws is asked again; it holds once it stops throwing")
    func throwsThenHolds() async throws {
        let attempts = Locked(0)
        let held = try await eventually { try attempt(attempts, refusedBefore: 3) == 3 }
        #expect(held)
        #expect(attempts.withLock { $0 } == 3)
        let value = try await eventuallyValue { try attempt(attempts, refusedBefore: 6) }
        #expect(value == 6)
    }

    @Test("a condition that throws until the bound: the error of its last call is thrown")
    func throwsToTheEnd() async throws {
        let attempts = Locked(0)
        await #expect {
            _ = try await eventually(timeout: .milliseconds(50)) { try attempt(attempts) > 0 }
        } throws: { error in
            (error as? Refused)?.attempt == attempts.withLock { $0 } && attempts.withLock { $0 } > 1
        }
    }

    @Test("a condition that never holds (without throwing) gives false at the bound")
    func neverHolds() async {
        #expect(await eventually(timeout: .milliseconds(20)) { false } == false)
    }
}
