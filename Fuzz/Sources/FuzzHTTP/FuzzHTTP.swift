import FuzzSupport
import Herald
import HeraldHTTPReceiver

/// The HTTP receiver's whole request path: bytes as a client's socket delivers them (the input after its first
/// byte, in the chunks the first byte picks) go through http_parser, the limits, routing, the decoders and the
/// bus; the receiver must answer and end the connection after the client half-closes, and keep serving.
/// The receiver listens on a Unix socket with a secret (`Authorization: Bearer fuzz-secret`), small limits (so
/// inputs reach them: 2 KB of head, 4 KB of body) and a few requests per connection.
let harness = SocketHarness { address in
    var options = HTTPReceiver.Options(address: address, secret: "fuzz-secret")
    options.maximumHeaderBytes = 2048
    options.maximumBodyBytes = 4096
    options.maximumRequestsPerConnection = 8
    return HTTPReceiver(options: options)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    harness.exchange(FuzzInput.chunked(FuzzInput.bytes(start, count)))
    return 0
}

@_cdecl("FuzzHTTP_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
