import Foundation
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// Runs the `herald` executable built beside the test bundle; returns its exit status, standard output and error.
func runHerald(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
    try await runBuiltExecutable("herald", arguments)
}

@Suite("herald token")
struct TokenCommandTests {
    @Test("prints the token, minting it once; the same token on every call and for a Herald on that directory")
    func printsStableToken() async throws {
        try await withDataDirectory { directory in
            let first = try await runHerald(["token", "--data-dir", directory])
            #expect(first.status == 0)
            let token = first.output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(token.contains(":"))
            #expect(
                try await runHerald(["token", "--data-dir", directory]).output.trimmingCharacters(in: .whitespacesAndNewlines) == token)
            let fid = try await runHerald(["token", "--data-dir", directory, "--installation-id"]).output.trimmingCharacters(
                in: .whitespacesAndNewlines)
            #expect(token.hasPrefix(fid + ":"))
            try await withDurableHerald(directory: directory, plugins: []) { herald async throws in
                #expect(try await herald.token() == token)
            }
        }
    }

    @Test("reading the token of a running instance writes nothing to its store: not its database, not its inbox's log")
    func readsWithoutWriting() async throws {
        try await withDataDirectory { directory in
            try await withDurableHerald(directory: directory, plugins: []) { herald async throws in
                let token = try await herald.token()
                // Files the running instance keeps: the database, its write-ahead log, the inbox's log.
                let files = [
                    SQLiteStore.path(inDirectory: directory), SQLiteStore.path(inDirectory: directory) + "-wal", directory + "/inbox.log",
                ]
                let before = files.map { FileManager.default.contents(atPath: $0) }

                let printed = try await runHerald(["token", "--data-dir", directory])
                #expect(printed.status == 0, "\(printed.error)")
                #expect(printed.output.trimmingCharacters(in: .whitespacesAndNewlines) == token)
                let fid = try await runHerald(["token", "--data-dir", directory, "--installation-id"])
                #expect(token.hasPrefix(fid.output.trimmingCharacters(in: .whitespacesAndNewlines) + ":"))
                #expect(files.map { FileManager.default.contents(atPath: $0) } == before, "herald token wrote to the store")
            }
        }
    }

    @Test("a data directory that cannot be used is a one-line error naming it, and exit status 1")
    func badDirectory() async throws {
        let result = try await runHerald(["token", "--data-dir", "/etc/passwd"])
        #expect(result.status == 1)
        #expect(result.error.contains("/etc/passwd"))
        #expect(!result.error.contains("Usage"))
    }
}
