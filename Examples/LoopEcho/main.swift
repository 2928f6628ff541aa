// LoopEcho: the smallest useful program on Herald's event loop.
//
// Listens on TCP 127.0.0.1:7070 and on the Unix socket ./herald-data/loop-echo.sock, writes every byte
// it reads back to the sender, and stops cleanly on SIGINT or SIGTERM (every connection closed, the socket
// file removed). Try it with `nc 127.0.0.1 7070` or `nc -U herald-data/loop-echo.sock`.
//
//     swift run LoopEcho [port] [socket-path]
//
// Port 0 takes any free port; the `listening on` lines name the addresses it got.

import Foundation
import Herald

let arguments = CommandLine.arguments
let port = arguments.count > 1 ? Int(arguments[1]) ?? 7070 : 7070
let socketPath = arguments.count > 2 ? arguments[2] : "herald-data/loop-echo.sock"
try? FileManager.default.createDirectory(atPath: (socketPath as NSString).deletingLastPathComponent, withIntermediateDirectories: true)

let loop = EventLoop(name: "loop-echo")

/// Prints `line` and flushes it at once, also into a pipe: whoever started the program reads the addresses as
/// they are printed.
func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// Echoes one connection: what it reads it writes back; when the peer is done, it closes.
func echo(_ connection: StreamConnection) {
    say("connection from \(connection.label)")
    connection.onRead = { bytes in connection.write(bytes) }
    connection.onEnd = { connection.shutdownWriting { _ in connection.close() } }
    connection.onClose = { error in say("closed \(connection.label)\(error.map { " (\($0))" } ?? "")") }
    connection.startReading()
}

loop.execute {
    do {
        for address in [SocketAddress.tcp(host: "127.0.0.1", port: port), .unix(path: socketPath)] {
            let server = try StreamServer.listen(on: loop, at: address, onAccept: echo)
            say("listening on \(server.localAddress)")
        }
        for signal in [SIGINT, SIGTERM] {
            _ = try SignalWatcher.watch(signal, on: loop) { signal in
                say("signal \(signal): shutting down")
                loop.shutdown()
            }
        }
    } catch {
        say("loop-echo: \(error)")
        loop.shutdown()
    }
}

try loop.run()
print("stopped: \(loop.statistics.liveHandles) handles left open")
