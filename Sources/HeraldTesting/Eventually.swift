/// Polls `condition` until it holds or `timeout` passes, so that a test of asynchronous behaviour fails
/// instead of hanging. Returns whether the condition held.
public func eventually(
    timeout: Duration = .seconds(10),
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
