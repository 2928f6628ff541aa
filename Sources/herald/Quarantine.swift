import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldSQLite

/// `herald quarantine list|release`: the messages a daemon quarantined because they were still pending after
/// `max-replays` starts (their handling most likely crashed it each time).
struct Quarantine: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the quarantined messages of the instance whose data directory is given, or release them to be replayed.",
        discussion: """
            A message still pending after max-replays starts (its handling most likely crashes the daemon) is moved from \
            the inbox to the store's quarantine instead of being replayed again. `list` prints them (the daemon may be \
            running); `release` moves them back into the inbox, to be replayed at the next start, once the handler is fixed.
            """,
        subcommands: [List.self, Release.self]
    )

    /// One JSON object per line, oldest first.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Print the quarantined messages, one JSON object per line: messageID, starts, quarantinedAt (ms since 1970), target, collapseKey, priority, userInfo."
        )

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        func run() async throws {
            let messages: [QuarantinedMessage]
            do {
                messages = try SQLiteStore.quarantineSnapshot(directory: dataDirectory)
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
            for message in messages {
                let record = message.record
                var object: JSONObject = [
                    "messageID": .string(record.messageID), "starts": .int(Int64(message.replays)),
                    "quarantinedAt": .int(message.quarantinedAt), "target": .object([record.targetKind: .string(record.targetValue)]),
                    "priority": .int(Int64(record.priority)),
                ]
                if let key = record.collapseKey { object["collapseKey"] = .string(key) }
                object["userInfo"] = (try? JSONParser.parse(record.userInfo)) ?? .string(String(decoding: record.userInfo, as: UTF8.self))
                writeLine(String(decoding: JSONValue.object(object).jsonBytes(), as: UTF8.self))
            }
        }
    }

    /// Moves messages back into the inbox; refused while a daemon runs on the directory.
    struct Release: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move quarantined messages back into the inbox (the daemon must be stopped); its next start replays them.")

        @Option(name: .customLong("data-dir"), help: "The instance's data directory.")
        var dataDirectory: String = "herald-data"

        @Argument(help: "The message IDs (as `quarantine list` prints them).")
        var messageIDs: [String]

        func validate() throws {
            if messageIDs.isEmpty { throw ValidationError("name at least one message ID") }
        }

        func run() async throws {
            let running =
                "herald: a daemon is running in \(dataDirectory): stop it first (a released message is replayed at the next start)"
            do {
                if case .held = DataDirectoryLock.inspect(directory: dataDirectory) { throw CommandFailure(message: running) }
                if SQLiteStore.isOpenInAnotherProcess(directory: dataDirectory) { throw CommandFailure(message: running) }
                // Held shared while the store is written, so that a daemon cannot start in the middle.
                guard let hold = try DataDirectoryLock.shared(directory: dataDirectory) else { throw CommandFailure(message: running) }
                defer { hold.release() }
                _ = try SQLiteStore.quarantineSnapshot(directory: dataDirectory)  // a Herald store that exists, or its error
                let missing = try SQLiteStore(directory: dataDirectory).release(messageIDs)
                guard missing.isEmpty else {
                    throw CommandFailure(
                        message: "herald: not quarantined in \(dataDirectory): \(missing.joined(separator: ", ")); nothing was released")
                }
                writeLine("released \(messageIDs.joined(separator: ", ")): replayed at the next start of the daemon in \(dataDirectory)")
            } catch let failure as CommandFailure {
                throw failure
            } catch {
                throw CommandFailure(message: "herald: \(error)")
            }
        }
    }
}
