/// Output gathered on the loop thread during a turn of the loop and written before the loop next polls for I/O: many
/// small writes of one turn (a connection's answers to pipelined requests, the daemon's log lines per notification)
/// leave in one system call. An output asks for its write with ``EventLoop/writeBeforePolling(_:)`` when it gathers
/// its first bytes; ``EventLoop/writeGatheredOutput()`` writes everything gathered at once, for a step that must come
/// after it.
package protocol GatheredOutput: AnyObject {
    /// Writes what was gathered. Loop thread only.
    func writeGathered()
}

extension StreamConnection: GatheredOutput {
    package func writeGathered() { flushGatheredWrites() }
}
