import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldSQLite

/// `herald up list|unregister`: the apps registered with the UnifiedPush distributor of a data directory.
struct UnifiedPush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "up",
        abstract: "List the apps registered with the UnifiedPush distributor of the instance whose data directory is given, or drop one.",
        discussion: """
            `list` prints the registrations (the daemon may be running). `unregister` drops one while the daemon is \
            stopped: its endpoint answers 404 from then on, its waiting pushes are deleted, and the app is told \
            (Unregistered) at the daemon's next start.
            """,
        subcommands: [List.self, Unregister.self]
    )

    /// One JSON object per line, oldest first.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Print the registrations, one JSON object per line: endpointToken, service, token, description, version, vapid, registeredAt (ms since 1970), dropped."
        )

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        func run() async throws {
            let registrations: [UnifiedPushRegistration]
            do {
                registrations = try SQLiteStore.unifiedPushSnapshot(directory: dataDirectory)
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
            for registration in registrations {
                var object: JSONObject = [
                    "endpointToken": .string(registration.endpointToken), "service": .string(registration.service),
                    "token": .string(registration.token), "description": .string(registration.description),
                    "version": .int(Int64(registration.version)), "registeredAt": .int(registration.registeredAt),
                    "dropped": .bool(registration.dropped),
                ]
                if let vapid = registration.vapid { object["vapid"] = .string(vapid) }
                writeLine(String(decoding: JSONValue.object(object).jsonBytes(), as: UTF8.self))
            }
        }
    }

    /// Drops registrations; refused while a daemon runs on the directory.
    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop registrations by endpoint token (the daemon must be stopped); their apps are told at its next start.")

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        @Argument(help: "The endpoint tokens (as `up list` prints them).")
        var endpointTokens: [String]

        func validate() throws {
            if endpointTokens.isEmpty { throw ValidationError("name at least one endpoint token") }
        }

        func run() async throws {
            let running = "herald: a daemon is running in \(dataDirectory): stop it first (its app is told at the next start)"
            do {
                if case .held = DataDirectoryLock.inspect(directory: dataDirectory) { throw CommandFailure(message: running) }
                if SQLiteStore.isOpenInAnotherProcess(directory: dataDirectory) { throw CommandFailure(message: running) }
                guard let hold = try DataDirectoryLock.shared(directory: dataDirectory) else { throw CommandFailure(message: running) }
                defer { hold.release() }
                let known = Set(try SQLiteStore.unifiedPushSnapshot(directory: dataDirectory).map(\.endpointToken))
                let missing = endpointTokens.filter { !known.contains($0) }
                guard missing.isEmpty else {
                    throw CommandFailure(
                        message: "herald: no such registration in \(dataDirectory): \(missing.joined(separator: ", ")); nothing was dropped"
                    )
                }
                let store = try SQLiteStore(directory: dataDirectory)
                for token in endpointTokens { _ = try store.dropUnifiedPushRegistration(endpointToken: token) }
                writeLine(
                    "unregistered \(endpointTokens.joined(separator: ", ")): the apps are told at the next start of the daemon in \(dataDirectory)"
                )
            } catch let failure as CommandFailure {
                throw failure
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }
}
