public import Foundation
public import Testing

/// The repository's root (three levels up from this file, `Sources/HeraldTesting/`), for the scripts, test
/// resources and the Python virtual environment that tests use.
public let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// The Python of the virtual environment `scripts/python-env` makes (`.build-python/bin/python`), with the
/// independent clients some tests drive (firebase-admin, prometheus-client, nats-py). When it is missing, the test
/// fails with what to run; `package` names what the test needs from it.
public func pythonEnvironment(with package: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> URL {
    let python = repositoryRoot.appendingPathComponent(".build-python/bin/python")
    try #require(
        FileManager.default.isExecutableFile(atPath: python.path),
        "No Python venv with \(package) at \(python.path): run scripts/python-env (scripts/test does) and test again.",
        sourceLocation: sourceLocation
    )
    return python
}
