import Foundation
import Herald
import HeraldSQLite
import HeraldTesting

// The parts of HeraldSQLiteTests' support that the report tests use: a data directory, a durable Herald on it, and
// the `herald` executable built beside the test bundle.

/// A fresh temporary data directory, removed when the test is done with it.
func withDataDirectory(_ body: (String) async throws -> Void) async throws {
    try await withTemporaryDirectory(prefix: "herald-report", body)
}

/// Starts Herald on an SQLite store in `directory` with `plugins`, runs `body`, and shuts it down.
func withDurableHerald(directory: String, plugins: [any HeraldPlugin], _ body: (Herald) async throws -> Void) async throws {
    let configuration = Herald.Configuration(senderID: "1234567890")
    try await withStarted(
        Herald(configuration: patientShutdown(configuration), store: try SQLiteStore(directory: directory)), plugins: plugins, body)
}

/// Runs the `herald` executable built beside the test bundle; returns its exit status, standard output and error.
func runHerald(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
    try await runBuiltExecutable("herald", arguments)
}

extension Result {
    var failureValue: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
