import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldSQLite

@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Receive and handle push messages on Linux.",
        version: BuildInfo.version,
        subcommands: [
            Serve.self, Send.self, Respond.self, AppState.self, Token.self, Topics.self, Quarantine.self, UnifiedPush.self, Report.self,
            Credentials.self, Senders.self,
        ]
    )
}

extension BuildInfo {
    /// What `herald --version` prints, the version the Debian package gets too: the release version at its tag
    /// (`0.1.0`), and between releases the commit's date and hash after it (`0.1.0~git20261128.4deb82f`, which
    /// Debian sorts before `0.1.0`). A build outside git knows no commit and prints the release version.
    static var version: String {
        if commit.isEmpty || releaseTags.contains("v\(HeraldBuild.version)") { return HeraldBuild.version }
        return "\(HeraldBuild.version)~git\(commitDate).\(commit)"
    }
}

/// `herald token`: prints the instance's registration token, minting one if there is none.
///
/// A store that has a token (always the case once a daemon has started on it) is only read, through
/// ``SQLiteStore/snapshot(directory:)``: a daemon may be running on it, and `SQLiteStore.load` would prune its
/// de-duplication window under it. Only a store without a token, or without a store at all, is written.
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
            if let identity = try Self.storedIdentity(directory: dataDirectory), identity.token != nil {
                print(installationID ? identity.installationID : identity.token ?? "")
                return
            }
            // No token yet: create the store if need be, mint, save. Nothing else in the store is touched.
            let store = try SQLiteStore(directory: dataDirectory)
            let resolved = RegistrationIdentity.resolve(try SQLiteStore.snapshot(directory: dataDirectory).identity, autoInit: true)
            if resolved.changed { try store.save(identity: resolved.identity) }
            print(installationID ? resolved.identity.installationID : resolved.identity.token ?? "")
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
    }

    /// The identity saved in the store in `directory`, read without changing anything; `nil` when there is no store
    /// file yet or it holds no identity.
    static func storedIdentity(directory: String) throws -> StoredIdentity? {
        var info = stat()
        guard stat(SQLiteStore.path(inDirectory: directory), &info) == 0 else { return nil }
        return try SQLiteStore.snapshot(directory: directory).identity
    }
}
