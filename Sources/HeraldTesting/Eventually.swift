/// Polls `condition` until it holds or `timeout` passes, so that a test of asynchronous behaviour fails
/// instead of hanging. Returns whether the condition held.
///
/// The default bound is generous on purpose: `swift test` runs the whole suite in parallel, hundreds of tests on
/// a few threads, and a condition that holds within milliseconds alone can take many seconds to be seen there.
public func eventually(
    timeout: Duration = .seconds(60),
    _ condition: @Sendable () async throws -> Bool
) async rethrows -> Bool {
    let clock = ContinuousClock()
    let end = clock.now + timeout
    while clock.now < end {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return try await condition()
}
