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

/// Calls `body` until it returns a value (or 10 s pass); the value, or `nil`.
func eventuallyValue<T>(_ body: () throws -> T?) async throws -> T? {
    let end = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < end {
        if let value = try body() { return value }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try body()
}
