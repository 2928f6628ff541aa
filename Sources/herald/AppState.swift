import ArgumentParser
import Herald

/// `herald app-state`: tells a running daemon whether the app it serves is in use, through its socket receiver's
/// `app_state` request — for a host that is not Swift (a UI in another process, a session script).
struct AppState: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app-state",
        abstract: "Tell a running daemon whether its app is active or in the background.",
        discussion: """
            active (the daemon's state at start): the notification handlers' willPresent decides how each notification \
            is presented. background: notifications are presented as their payload asks (alert, sound, badge) without \
            asking the handlers, which see them when a person opens them. Exits 0 when the daemon took the state.
            """
    )

    @Option(name: .customLong("data-dir"), help: "The daemon's data directory (its socket is herald.sock there).")
    var dataDirectory: String = "herald-data"

    @Option(help: ArgumentHelp("The daemon's socket receiver instead (a Unix socket path or HOST:PORT).", valueName: "path"))
    var socket: String?

    @Argument(help: "active or background.")
    var state: String

    func run() async throws {
        guard let state = ApplicationState(rawValue: state) else {
            throw ValidationError("the state must be active or background, not '\(state)'")
        }
        let answer = try await socketRequest(["app_state": .string(state.rawValue)], socket: socket ?? "\(dataDirectory)/herald.sock")
        if (try? JSONParser.parse(answer))?["app_state"] == nil { throw ExitCode(1) }
    }
}
