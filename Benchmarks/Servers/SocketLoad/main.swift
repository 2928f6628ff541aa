// SocketLoad: a pipelined load client with a fixed message count (scripts/socket-vs-nio, scripts/profile-servers).
//
//     SocketLoad --socket PATH --body FILE [--connections C] [--messages M] [--window W]
//     SocketLoad --tcp PORT --http-request FILE [--connections C] [--messages M] [--window W]
//
// Opens C connections, then on each writes the unit M times while reading the answers, all at once from one thread
// with poll(2) over non-blocking sockets (no allocation per message). With `--window W`, at most W messages per
// connection are unanswered at a time (default: no limit, the socket buffers and the server's back-pressure bound
// it). The clock runs from the first write to the last answer of the last connection.
//
// With `--socket` (a Unix socket) the unit is the one-line body of FILE plus a newline, and the answers must be one
// line per message; a line that does not start with `{"name"` counts as an error, and the first one is printed.
// With `--tcp` (127.0.0.1:PORT) the unit is FILE as it is (a whole HTTP/1.1 request), and each `HTTP/1.1 ` in the
// answers counts as one answer; a status that does not start with 2 counts as an error. Use `--window 1` for
// keep-alive without pipelining, as wrk does.
//
// Prints one line: `RESULT messages=<C*M> seconds=<s> rate=<messages/s> errors=<n>`; exits 1 on an error, on a
// short answer count or when the server closes early.

import Glibc
import ServerSupport

func fail(_ text: String) -> Never {
    say("SocketLoad: \(text)", to: 2)
    exit(1)
}

func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

func connectUnix(_ path: String) -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { fail("socket: \(errno)") }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let pathBytes = Array(path.utf8)
    guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else { fail("path too long") }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (index, byte) in pathBytes.enumerated() { raw[index] = byte }
        raw[pathBytes.count] = 0
    }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard result == 0 else { fail("connect \(path): errno \(errno)") }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

func connectTCP(_ port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { fail("socket: \(errno)") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else { fail("connect 127.0.0.1:\(port): errno \(errno)") }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// One connection's progress.
struct Connection {
    let fd: Int32
    var bytesWritten = 0
    var answers = 0
    var positionInLine = 0
    /// HTTP: how much of `HTTP/1.1 ` has been matched; `matched == pattern.count` means the status comes next.
    var matched = 0
    var closed = false
}

let socketPath = option("--socket")
let tcpPort = option("--tcp").flatMap(UInt16.init)
let http = tcpPort != nil
guard let unitPath = http ? option("--http-request") : option("--body"), socketPath != nil || tcpPort != nil else {
    fail("usage: SocketLoad (--socket PATH --body FILE | --tcp PORT --http-request FILE) [--connections C] [--messages M] [--window W]")
}
let connectionCount = option("--connections").flatMap(Int.init) ?? 1
let messagesPerConnection = option("--messages").flatMap(Int.init) ?? 100_000
let window = option("--window").flatMap(Int.init) ?? Int.max
signal(SIGPIPE, SIG_IGN)

guard var line = readFile(unitPath) else { fail("cannot open \(unitPath)") }
if !http {
    while let last = line.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { line.removeLast() }
    guard !line.isEmpty, !line.contains(UInt8(ascii: "\n")) else { fail("the body must be one line") }
    line.append(UInt8(ascii: "\n"))
}
let lineLength = line.count
let pattern = Array("HTTP/1.1 ".utf8)
// A write buffer of whole lines, so that a write starting at (bytes written % chunk size) is always in step.
let linesPerChunk = max(1, 65_536 / lineLength)
let chunk: [UInt8] = Array([[UInt8]](repeating: line, count: linesPerChunk).joined())
let bytesPerConnection = lineLength * messagesPerConnection

var connections = (0..<connectionCount).map { _ in
    Connection(fd: http ? connectTCP(tcpPort!) : connectUnix(socketPath!))
}
var pollSet = connections.map { pollfd(fd: $0.fd, events: Int16(POLLIN | POLLOUT), revents: 0) }
var readBuffer = [UInt8](repeating: 0, count: 65_536)
var errors = 0
var firstError: [UInt8] = []
var capturingError = false
var finished = 0

let start = now()
while finished < connectionCount {
    for index in connections.indices {
        let connection = connections[index]
        var events: Int16 = 0
        if !connection.closed, connection.answers < messagesPerConnection { events |= Int16(POLLIN) }
        let sent = connection.bytesWritten / lineLength
        if !connection.closed, connection.bytesWritten < bytesPerConnection, sent - connection.answers < window {
            events |= Int16(POLLOUT)
        }
        pollSet[index].events = events
        pollSet[index].revents = 0
    }
    let ready = poll(&pollSet, nfds_t(pollSet.count), 10_000)
    if ready < 0 {
        if errno == EINTR { continue }
        fail("poll: errno \(errno)")
    }
    if ready == 0 { fail("no progress for 10 s (answers: \(connections.map(\.answers)))") }
    for index in connections.indices where pollSet[index].revents != 0 {
        let revents = pollSet[index].revents
        if revents & Int16(POLLOUT) != 0 {
            var connection = connections[index]
            let offset = connection.bytesWritten % chunk.count
            var count = min(chunk.count - offset, bytesPerConnection - connection.bytesWritten)
            if window != Int.max {
                count = min(count, max(0, (connection.answers + window) * lineLength - connection.bytesWritten))
            }
            if count > 0 {
                let written = chunk.withUnsafeBytes { write(connection.fd, $0.baseAddress! + offset, count) }
                if written > 0 {
                    connection.bytesWritten += written
                } else if written < 0, errno != EAGAIN, errno != EINTR {
                    fail("write: errno \(errno) after \(connection.answers) answers")
                }
            }
            connections[index] = connection
        }
        if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
            var connection = connections[index]
            let count = readBuffer.withUnsafeMutableBytes { read(connection.fd, $0.baseAddress!, $0.count) }
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
                connection.closed = true
                fail("connection \(index) closed after \(connection.answers) of \(messagesPerConnection) answers")
            }
            if count > 0, http {
                for position in 0..<count {
                    let byte = readBuffer[position]
                    if connection.matched == pattern.count {
                        connection.answers += 1
                        connection.matched = 0
                        if byte != UInt8(ascii: "2") {
                            errors += 1
                            if firstError.isEmpty { firstError = Array("HTTP/1.1 ".utf8) + [byte] }
                        }
                    } else if byte == pattern[connection.matched] {
                        connection.matched += 1
                    } else {
                        connection.matched = byte == pattern[0] ? 1 : 0
                    }
                }
                if connection.answers == messagesPerConnection { finished += 1 }
            } else if count > 0 {
                for position in 0..<count {
                    let byte = readBuffer[position]
                    if connection.positionInLine == 2, byte != UInt8(ascii: "n") {
                        errors += 1
                        if firstError.isEmpty {
                            capturingError = true
                            firstError = Array(#"{""#.utf8)
                        }
                    }
                    if capturingError {
                        if byte == UInt8(ascii: "\n") || firstError.count > 400 { capturingError = false } else { firstError.append(byte) }
                    }
                    if byte == UInt8(ascii: "\n") {
                        connection.answers += 1
                        connection.positionInLine = 0
                    } else {
                        connection.positionInLine += 1
                    }
                }
                if connection.answers == messagesPerConnection { finished += 1 }
            }
            connections[index] = connection
        }
    }
}
let elapsed = now() - start
for connection in connections { close(connection.fd) }

let total = connectionCount * messagesPerConnection
say("RESULT messages=\(total) seconds=\(elapsed) rate=\(Int((Double(total) / elapsed).rounded())) errors=\(errors)")
if errors > 0 {
    say("first error: \(String(decoding: firstError, as: UTF8.self))", to: 2)
    exit(1)
}
