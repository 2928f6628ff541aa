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
