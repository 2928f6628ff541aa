import Foundation
import HeraldTesting
import Testing

/// Runs the `herald` executable built beside the test bundle; returns its exit status, standard output and error.
func runHerald(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
    try runBuiltExecutable("herald", arguments)
}

@Suite("herald token")
struct TokenCommandTests {
    @Test("prints the token, minting it once; the same token on every call and for a Herald on that directory")
    func printsStableToken() async throws {
        try await withDataDirectory { directory in
            let first = try runHerald(["token", "--data-dir", directory])
            #expect(first.status == 0)
            let token = first.output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(token.contains(":"))
            #expect(try runHerald(["token", "--data-dir", directory]).output.trimmingCharacters(in: .whitespacesAndNewlines) == token)
            let fid = try runHerald(["token", "--data-dir", directory, "--installation-id"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(token.hasPrefix(fid + ":"))
            try await withDurableHerald(directory: directory, plugins: []) { herald async throws in
                #expect(try await herald.token() == token)
            }
        }
    }

    @Test("a data directory that cannot be used is a one-line error naming it, and exit status 1")
    func badDirectory() throws {
        let result = try runHerald(["token", "--data-dir", "/etc/passwd"])
        #expect(result.status == 1)
        #expect(result.error.contains("/etc/passwd"))
        #expect(!result.error.contains("Usage"))
    }
}
