public import Foundation
import HeraldEventLoop
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
    try #require(
        pythonHas(package, python: python),
        "The Python venv at \(python.path) lacks \(package) (made before it was added): run scripts/python-env and test again.",
        sourceLocation: sourceLocation)
    return python
}

/// The packages found in the venv so far, so that each is looked for once per test process.
private let foundPackages = Locked<Set<String>>([])

/// Whether the venv's `python` has the distribution `package` installed.
private func pythonHas(_ package: String, python: URL) -> Bool {
    if foundPackages.withLock({ $0.contains(package) }) { return true }
    // "httpx and PyJWT": each of them.
    let names = package.components(separatedBy: " and ")
    let check = try? runExecutable(
        python, ["-c", "import importlib.metadata, sys; [importlib.metadata.version(name) for name in sys.argv[1:]]"] + names)
    guard check?.status == 0 else { return false }
    foundPackages.withLock { _ = $0.insert(package) }
    return true
}
