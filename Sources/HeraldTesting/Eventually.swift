/// Polls `condition` until it holds or `timeout` passes, so that a test of asynchronous behaviour fails
/// instead of hanging. Returns whether the condition held.
///
/// A condition that throws has not held yet: it is asked again, and only the error of its last call, at the bound,
/// is thrown. A poll that reads a server (a JetStream request that times out while the machine runs the suite's other
/// servers, a connection refused before a child listens) thus fails the test only when it keeps failing.
///
/// The default bound is generous on purpose: `swift test` runs the whole suite in parallel, hundreds of tests on
/// a few threads, and a condition that holds within milliseconds alone can take many seconds to be seen there.
public func eventually(
    timeout: Duration = .seconds(60),
    _ condition: @Sendable () async throws -> Bool
) async rethrows -> Bool {
    try await eventuallyValue(timeout: timeout) { try await condition() ? true : nil } ?? false
}

/// Calls `body` until it returns a value or `timeout` passes, with the bound, pace and handling of errors of
/// ``eventually(timeout:_:)``; returns the value, or `nil` when there was none in time. For a condition that yields
/// what the test goes on with (a line of a child's log, a token it printed), or that reads state which is not
/// `Sendable`.
public func eventuallyValue<T>(
    timeout: Duration = .seconds(60),
    _ body: () async throws -> T?
) async rethrows -> T? {
    let clock = ContinuousClock()
    let end = clock.now + timeout
    while clock.now < end {
        if let value = try? await body() { return value }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return try await body()
}
