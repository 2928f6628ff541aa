// What every benchmark server and load client needs: unbuffered output lines, `--name value` options, a file's
// bytes. No dependencies, so that SocketLoad stays free of Herald and SwiftNIO.

import Glibc

/// Writes one line to standard output or error, unbuffered (the scripts read the output while the process runs).
public func say(_ text: String, to fd: Int32 = 1) {
    var line = Array((text + "\n").utf8)
    var offset = 0
    while offset < line.count {
        let written = line.withUnsafeMutableBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if written <= 0 { return }
        offset += written
    }
}

/// The value after `name` on the command line (`--name value`), if any.
public func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), arguments.indices.contains(index + 1) else { return nil }
    return arguments[index + 1]
}

/// The bytes of the file at `path`, or nil when it cannot be opened.
public func readFile(_ path: String) -> [UInt8]? {
    guard let file = fopen(path, "rb") else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = fread(&chunk, 1, chunk.count, file)
        if count <= 0 { break }
        bytes.append(contentsOf: chunk[0..<count])
    }
    return bytes
}

/// Blocks SIGINT, SIGTERM and SIGUSR1 in this thread and every thread started after it, so that
/// ``reportSignals(_:_:)`` on the main thread takes them. Call before any thread starts.
public func blockServerSignals() -> sigset_t {
    var signals = sigset_t()
    sigemptyset(&signals)
    for signal in [SIGINT, SIGTERM, SIGUSR1] { sigaddset(&signals, signal) }
    pthread_sigmask(SIG_BLOCK, &signals, nil)
    return signals
}

/// Waits for the signals of ``blockServerSignals()`` on the calling (main) thread: on each, prints what `report`
/// gives (`handled=<n>`, ...); returns after SIGINT or SIGTERM, keeps waiting after SIGUSR1.
public func reportSignals(_ signals: sigset_t, _ report: () -> Void) {
    var signals = signals
    while true {
        var received: Int32 = 0
        sigwait(&signals, &received)
        report()
        if received != SIGUSR1 { return }
    }
}
