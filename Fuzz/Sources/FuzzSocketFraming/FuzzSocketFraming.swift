import FuzzSupport
import Herald
import HeraldSocketReceiver

/// The socket receiver's line framing: the input after its first byte, in the chunks the first byte picks, is
/// what a client writes; lines go through the decoder and the bus. The receiver must answer and end the
/// connection after the client half-closes, and keep serving. The longest line is 512 bytes, so inputs reach it.
let harness = SocketHarness { address in
    var options = SocketReceiver.Options(addresses: [address])
    options.maximumLineBytes = 512
    return SocketReceiver(options: options)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    harness.exchange(FuzzInput.chunked(FuzzInput.bytes(start, count)))
    return 0
}

@_cdecl("FuzzSocketFraming_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
