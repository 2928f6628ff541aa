import Foundation
import Herald
import HeraldTesting

/// The example plugin's shared object, built beside the test bundle (`swift build` builds every product).
let examplePlugin = buildProductsDirectory.appendingPathComponent("libHeraldExamplePlugin.so").path

/// Runs `herald` with `arguments` to completion: exit status, standard output, standard error.
func runHerald(_ arguments: [String], environment: [String: String] = [:], input: String? = nil) throws -> (
    status: Int32, output: String, error: String
) {
    try runBuiltExecutable("herald", arguments, environment: environment, input: input)
}

/// As the synchronous `runHerald`, waiting for the child on a thread of its own. A test's async body that waited in
/// place would hold one of the cooperative pool's threads (two on a two-core machine) for as long as the child runs,
/// and every other test's tasks would wait for it: under Thread Sanitizer both threads were found blocked in
/// children's output at every sample, the machine 45 % idle, and in-process tests of half a second took minutes.
func runHerald(_ arguments: [String], environment: [String: String] = [:], input: String? = nil) async throws -> (
    status: Int32, output: String, error: String
) {
    try await runBuiltExecutable("herald", arguments, environment: environment, input: input)
}
