import Foundation
import Glibc
import Herald
import HeraldDesktopPresenter
import HeraldTesting
import Logging
import Testing

/// A private desktop for one test: its own session bus (HeraldTesting's `PrivateSessionBus`, no service activation), its own X display (`Xvfb` on a display number it chose itself) and, when started, dunst on both —
/// or python-dbusmock's notification daemon in dunst's place. Everything is stopped by ``stop()``.
final class DesktopSession: @unchecked Sendable {
    // @unchecked Sendable: the processes are started and stopped by the test's task, one step at a time.
    let directory: String
    /// The bus address, also before the bus runs (it listens on a fixed path in ``directory``).
    let address: String
    private(set) var display: String?
    private let sessionBus: PrivateSessionBus
    private var xvfb: Process?
    private var server: Process?
    private var monitors: [Process] = []

    init() throws {
        directory = try makeTemporaryDirectory(prefix: "herald-desktop")
        sessionBus = PrivateSessionBus(directory: directory)
        address = sessionBus.address
    }

    deinit { stop() }

    /// Starts the bus and returns once it accepts connections.
    func startBus() throws {
        try sessionBus.start()
    }

    /// Stops the bus (everyone on it loses the connection).
    func stopBus() {
        stopServer()
        sessionBus.stop()
    }

    /// Starts an X server on a free display.
    func startDisplay() throws {
        let (process, firstLine) = try launch("/usr/bin/Xvfb", ["-displayfd", "1", "-screen", "0", "1024x768x24", "-nolisten", "tcp"])
        guard let number = firstLine.flatMap({ Int($0) }) else { throw SessionError.didNotStart("Xvfb") }
        xvfb = process
        display = ":\(number)"
    }

    /// Starts dunst on the bus and the display (started first when not yet) and waits until it owns the
    /// notification service.
    func startDunst() async throws {
        if display == nil { try startDisplay() }
        let config = "\(directory)/dunstrc"
        try """
        [global]
            font = DejaVu Sans 11
            width = 440
            origin = top-left
            offset = 10x10
            frame_width = 2
            frame_color = "#5e81ac"
            padding = 10
            horizontal_padding = 12
            format = "<i>%a</i>\\n<b>%s</b>\\n%b"
            show_indicators = yes
        [urgency_low]
            timeout = 0
        [urgency_normal]
            timeout = 0
        [urgency_critical]
            timeout = 0
        """.write(toFile: config, atomically: true, encoding: .utf8)
        server = try launch("/usr/bin/dunst", ["-config", config], waitForLine: false).process
        try await waitForService()
    }

    /// Starts python-dbusmock's notification daemon with `capabilities` in dunst's place.
    func startMockServer(capabilities: [String]) async throws {
        let parameters = #"{"capabilities": "\#(capabilities.joined(separator: " "))"}"#
        server = try launch(
            "/usr/bin/python3", ["-m", "dbusmock", "--template", "notification_daemon", "-p", parameters], waitForLine: false
        ).process
        try await waitForService()
    }

    /// Starts GNOME's notification-daemon (Debian's `notification-daemon`, which draws a notification's actions as
    /// buttons) on the bus and the display, for the documentation's screenshot.
    func startNotificationDaemon() async throws {
        if display == nil { try startDisplay() }
        server = try launch("/usr/lib/notification-daemon/notification-daemon", [], waitForLine: false).process
        try await waitForService()
    }

    /// Stops dunst (or the mock).
    func stopServer() {
        end(&server)
    }

    private func waitForService() async throws {
        let owned = await eventually {
            let reply = try? await self.run(
                "/usr/bin/dbus-send", "--print-reply=literal", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.Notifications")
            return reply?.contains("true") == true
        }
        if !owned { throw SessionError.didNotStart("the notification server") }
    }

    /// Runs `dunstctl` against this session's dunst and returns its standard output.
    @discardableResult
    func dunstctl(_ arguments: String...) async throws -> String {
        try await run("/usr/bin/dunstctl", arguments)
    }

    /// `dunstctl history`: each closed notification's fields (their `data`), by name, newest first.
    func history() async throws -> [[String: JSONValue]] {
        let text = try await dunstctl("history")
        guard case .object(let root) = try JSONParser.parse(text), case .array(let groups)? = root["data"] else { return [] }
        return groups.flatMap { group -> [[String: JSONValue]] in
            guard case .array(let items) = group else { return [] }
            return items.compactMap { item in
                guard case .object(let fields) = item else { return nil }
                var values: [String: JSONValue] = [:]
                for (name, field) in fields { values[name] = field["data"] }
                return values
            }
        }
    }

    /// The number dunst shows now.
    func displayedCount() async throws -> Int? {
        Int(try await dunstctl("count", "displayed").trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Emits a notification signal from the mock server (python-dbusmock's `EmitSignal`), with GVariant-text arguments.
    func emitFromMock(_ member: String, signature: String, _ arguments: String) async throws {
        try await run(
            "/usr/bin/gdbus", "call", "--address", address, "--dest", "org.freedesktop.Notifications", "--object-path",
            "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.EmitSignal", "org.freedesktop.Notifications", member,
            signature, arguments)
    }

    /// Starts `dbus-monitor` for `rule` and returns once it watches the bus; it stops with the session.
    func monitor(_ rule: String) async throws -> Monitor {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-monitor")
        process.arguments = ["--address", address, rule]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        let monitor = Monitor()
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            monitor.buffer.withLock { $0 += data }
        }
        try runWithNoSignalsBlocked(process)
        monitors.append(process)
        // dbus-monitor becomes a monitor by giving up its name: from then on it sees every matching message.
        guard await eventually({ monitor.output.contains("NameLost") }) else { throw SessionError.didNotStart("dbus-monitor") }
        return monitor
    }

    final class Monitor: Sendable {
        let buffer = Locked(Data())

        /// Everything it printed so far.
        var output: String { String(decoding: buffer.withLock { $0 }, as: UTF8.self) }
    }

    /// Runs a tool with this session's bus and display; throws with its error output when it fails.
    @discardableResult
    func run(_ path: String, _ arguments: String...) async throws -> String {
        try await run(path, arguments)
    }

    private func run(_ path: String, _ arguments: [String]) async throws -> String {
        let result = try await runExecutable(URL(fileURLWithPath: path), arguments, environment: environment)
        guard result.status == 0 else { throw SessionError.failed(path, result.error) }
        return result.output
    }

    var environment: [String: String] {
        var environment = [
            "DBUS_SESSION_BUS_ADDRESS": address, "XDG_CONFIG_HOME": directory, "XDG_RUNTIME_DIR": directory, "HOME": directory,
        ]
        environment["DISPLAY"] = display
        return environment
    }

    /// Starts `path` with this session's bus and display; with `waitForLine`, returns its first line of standard
    /// output (bounded) too.
    private func launch(_ path: String, _ arguments: [String], waitForLine: Bool = true) throws -> (process: Process, firstLine: String?) {
        try PrivateSessionBus.launch(path, arguments, environment: environment, waitForLine: waitForLine)
    }

    private func end(_ process: inout Process?) {
        guard let running = process else { return }
        process = nil
        if running.isRunning {
            running.terminate()
            waitUntilExitWithoutSpinning(running)
        }
    }

    func stop() {
        for index in monitors.indices {
            var monitor: Process? = monitors[index]
            end(&monitor)
        }
        monitors = []
        end(&server)
        sessionBus.stop()
        end(&xvfb)
        removeTemporaryDirectory(directory)
    }

    enum SessionError: Error {
        case didNotStart(String)
        case failed(String, String)
    }
}

/// A notification handler that answers `options` and keeps every response.
final class RecordingHandler: NotificationHandler, Sendable {
    let options: PresentationOptions
    let responses = Locked<[NotificationResponse]>([])

    init(options: PresentationOptions = [.list, .banner, .sound]) {
        self.options = options
    }

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions { options }

    func didReceive(_ response: NotificationResponse) async {
        responses.withLock { $0.append(response) }
    }

    var received: [NotificationResponse] { responses.withLock { $0 } }
}

extension DesktopPresenter.Options {
    /// Options for a test's private bus, with a short reconnection backoff.
    static func testing(_ session: DesktopSession) -> Self {
        var options = Self()
        options.busAddress = session.address
        options.reconnectDelay = .milliseconds(50)
        options.maxReconnectDelay = .milliseconds(400)
        options.desktopEntry = "herald-test"
        return options
    }
}

/// Starts Herald with `presenter`, `handler` and `categories`, its logs collected; runs `body`.
func withPresenter(
    _ presenter: DesktopPresenter, handler: RecordingHandler = RecordingHandler(), categories: [NotificationCategory] = [],
    logs: LogCollector = LogCollector(),
    _ body: (Herald, InMemoryReceiver, RecordingSink, String) async throws -> Void
) async throws {
    let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), logger: logs.logger())
    let receiver = InMemoryReceiver()
    let sink = RecordingSink()
    for category in categories { try herald.register(category: category) }
    try await withStarted(herald, plugins: [receiver, sink, handler, presenter]) { herald in
        let token = try await herald.token()
        try await body(herald, receiver, sink, token)
    }
    #expect(herald.loop.statistics.liveHandles == 0, "libuv handles left open")
}
