public import HeraldEventLoop
public import Testing

/// Starts an event loop on its own thread, runs `body` with it, shuts the loop down (also when `body` throws) and
/// checks that no handle was left open.
public func withRunningLoop(
    name: String = "test-loop", sourceLocation: SourceLocation = #_sourceLocation, _ body: (EventLoop) async throws -> Void
) async throws {
    let loop = try await withEventLoop(named: name) { loop in
        try await body(loop)
        return loop
    }
    #expect(loop.statistics.liveHandles == 0, sourceLocation: sourceLocation)
    #expect(loop.lifecycle == .closed, sourceLocation: sourceLocation)
}
