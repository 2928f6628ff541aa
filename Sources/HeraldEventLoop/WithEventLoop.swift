/// Starts an event loop on a thread of its own, runs `body` with it, then shuts the loop down and waits until it
/// has closed and its thread has ended, also when `body` throws.
///
/// Use it where a loop lives only as long as one piece of work, as in a command that makes one request and exits.
/// Waiting matters there: ``EventLoop/shutdown()`` returns at once, and a process that exits while the loop thread
/// still closes its handles (a TLS connection kept by an HTTP client, say), or while that thread ends and the C
/// libraries free its thread-local state, runs their exit handlers, OpenSSL's among them, beside that work.
///
/// - Parameters:
///   - name: The loop's name, given to its thread.
///   - body: The work, with the running loop.
/// - Returns: What `body` returns.
public func withEventLoop<Result>(named name: String, _ body: (EventLoop) async throws -> Result) async throws -> Result {
    let loop = EventLoop(name: name)
    let thread = try loop.startJoinable()
    let result: Result
    do {
        result = try await body(loop)
    } catch {
        await loop.shutdownGracefully()
        thread.join()
        throw error
    }
    await loop.shutdownGracefully()
    // The loop thread resumes the waiters as its last work; joining takes microseconds.
    thread.join()
    return result
}
