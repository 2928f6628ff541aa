import Foundation
import HeraldTesting

/// A real HTTP proxy for tests: Debian's `tinyproxy` in the foreground, on a loopback port of its own, its
/// configuration and log in `directory`. It relays `http://` requests and `CONNECT` tunnels, and logs each as
/// `Request (file descriptor N): CONNECT host:port HTTP/1.1` (or `GET http://...`).
final class TinyProxy: @unchecked Sendable {
    // @unchecked Sendable: `process` is set once in init and only read after.
    let port: Int
    let logFile: String
    private let process: Process

    /// `http://127.0.0.1:PORT`, as the proxy variables name it.
    var url: String { "http://127.0.0.1:\(port)" }

    /// Starts the proxy and waits until it accepts connections; tries another port when the one picked was taken
    /// meanwhile.
    init(directory: String) async throws {
        logFile = directory + "/tinyproxy.log"
        var attempt = 0
        while true {
            attempt += 1
            let port = try freeLoopbackPort()
            let configuration = directory + "/tinyproxy.conf"
            try """
            Port \(port)
            Listen 127.0.0.1
            Timeout 30
            LogFile "\(logFile)"
            LogLevel Info
            MaxClients 16
            Allow 127.0.0.1
            """.write(toFile: configuration, atomically: true, encoding: .utf8)
            try? FileManager.default.removeItem(atPath: logFile)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/tinyproxy")
            process.arguments = ["-d", "-c", configuration]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try runWithNoSignalsBlocked(process)
            let logFile = self.logFile
            let ready = await eventually(timeout: .seconds(20)) {
                !process.isRunning || ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "").contains("Accepting connections")
            }
            if ready, process.isRunning {
                self.port = port
                self.process = process
                return
            }
            process.terminate()
            waitForExit(process)
            guard attempt < 5 else {
                let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
                throw TinyProxyError(description: "tinyproxy did not start on port \(port); its log:\n\(log)")
            }
        }
    }

    deinit {
        process.terminate()
        waitForExit(process)
    }

    /// The requests it relayed so far (`CONNECT localhost:8443 HTTP/1.1`, `GET http://127.0.0.1:80/ HTTP/1.1`).
    var requests: [String] {
        let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").compactMap { line in
            guard let range = line.range(of: "Request (file descriptor "), let colon = line[range.upperBound...].range(of: "): ") else {
                return nil
            }
            return String(line[colon.upperBound...])
        }
    }
}

/// tinyproxy did not come up.
struct TinyProxyError: Error, CustomStringConvertible {
    let description: String
}
