public import Foundation
import Glibc

/// A private session bus for one test: `dbus-daemon` with a configuration of its own, listening on a socket in a
/// directory of the test's, with a desktop session bus's limits (/usr/share/dbus-1/session.conf: 50,000 calls of one
/// connection may wait for replies, not dbus-daemon's own 128). Anyone may own any name. With a service directory,
/// the bus starts a service on demand from the `.service` files there (D-Bus activation); without one, it starts
/// nothing.
public final class PrivateSessionBus: @unchecked Sendable {
    // @unchecked Sendable: started and stopped by the test's task, one step at a time.

    /// The directory of the socket and the configuration.
    public let directory: String
    /// The bus address, also before the bus runs (it listens on a fixed path in ``directory``).
    public let address: String
    private var process: Process?

    public init(directory: String) {
        self.directory = directory
        address = "unix:path=\(directory)/bus"
    }

    deinit { stop() }

    /// Starts the bus and returns once it accepts connections; `serviceDirectory` holds `.service` files of
    /// services it may start, whose `Exec` lines run with `environment` added.
    public func start(serviceDirectory: String? = nil, environment: [String: String] = [:]) throws {
        let config = "\(directory)/bus.conf"
        let services = serviceDirectory.map { "<servicedir>\($0)</servicedir>" } ?? ""
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>\(address)</listen>
          <auth>EXTERNAL</auth>
          <limit name="max_incoming_bytes">1000000000</limit>
          <limit name="max_outgoing_bytes">1000000000</limit>
          <limit name="max_message_size">1000000000</limit>
          <limit name="max_replies_per_connection">50000</limit>
          \(services)
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let (process, firstLine) = try Self.launch(
            "/usr/bin/dbus-daemon", ["--config-file=\(config)", "--nofork", "--print-address"], environment: environment)
        guard firstLine?.hasPrefix("unix:") == true else {
            if process.isRunning { process.terminate() }
            throw PrivateSessionBusError.didNotStart("dbus-daemon")
        }
        self.process = process
    }

    /// Stops the bus (everyone on it loses the connection).
    public func stop() {
        if let process, process.isRunning {
            process.terminate()
            waitForExit(process)
        }
        process = nil
        unlink("\(directory)/bus")
    }

    /// Starts `path` with `environment` added to this process's, its standard error discarded; with `waitForLine`,
    /// returns its first line of standard output too (waiting at most 20 seconds).
    public static func launch(
        _ path: String, _ arguments: [String], environment: [String: String], waitForLine: Bool = true
    ) throws -> (process: Process, firstLine: String?) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        process.environment = merged
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try runWithNoSignalsBlocked(process)
        guard waitForLine else { return (process, nil) }
        let line = LineReader(output.fileHandleForReading.fileDescriptor).line(timeout: 20_000)
        return (process, line)
    }
}

/// A private bus's process did not start.
public enum PrivateSessionBusError: Error {
    case didNotStart(String)
}
