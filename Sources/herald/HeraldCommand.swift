import ArgumentParser
import Herald
import HeraldSQLite

@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Receive and handle push messages on Linux.",
        version: HeraldBuild.version,
        subcommands: [Serve.self, Send.self, Token.self, Topics.self, Report.self]
    )
}

/// `herald token`: prints the instance's registration token, minting one if there is none.
struct Token: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the registration token of the instance whose data directory is given (minting one if there is none)."
    )

    @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
    var dataDirectory: String = "herald-data"

    @Flag(help: "Print the installation ID (fid) instead of the token.")
    var installationID = false

    func run() async throws {
        do {
            let store = try SQLiteStore(directory: dataDirectory)
            let state = try store.load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            let resolved = RegistrationIdentity.resolve(state.identity, autoInit: true)
            if resolved.changed { try store.save(identity: resolved.identity) }
            print(installationID ? resolved.identity.installationID : resolved.identity.token ?? "")
        } catch {
            throw CommandFailure(message: "\(error)")
        }
    }
}

/// A failure the command reports as one line on standard error (no usage text) with exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
