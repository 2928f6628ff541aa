import FuzzSupport
import Herald

// ServeConfiguration.swift here is a symbolic link to ../../../Sources/HeraldDaemon/ServeConfiguration.swift: the
// loader `herald serve` runs, compiled into this target (the library's internals cannot be imported).

/// herald serve's config file loader on arbitrary bytes: it must read them into settings or refuse them with a
/// ConfigurationError (the one-line message serve prints, exit 64), never crash or throw anything else. Settings
/// it accepts must render (`--print-config`) and give NATS options.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    var settings = ServeSettings()
    do {
        try ServeConfiguration.readFile(contents: bytes, path: "fuzz.yaml", into: &settings)
    } catch is ConfigurationError {
        return 0
    } catch {
        fatalError("the config loader threw something other than a ConfigurationError: \(error)")
    }
    _ = settings.rendered(environment: [:])
    _ = try? settings.natsOptions(authToken: nil)
    return 0
}

@_cdecl("FuzzConfig_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}

/// The daemon's error type, which the linked APNsKeySetting.swift throws when it loads a key file; the loader
/// fuzzed here only parses settings and never loads a key, so the type is all it needs of the command.
struct CommandFailure: Error {
    let message: String
}
