import FuzzSupport
import Herald

/// The FCM v1 send body decoder and validator on arbitrary bytes: it must answer every input with a request or a
/// MessageError, never crash. A request it accepts must survive its own re-encoding: `jsonBody()` decodes again,
/// to the same message.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let body = FuzzInput.bytes(start, count)
    guard let request = try? FCMSendRequest.decode(body, context: FuzzInput.decoding) else { return 0 }
    let encoded = request.jsonBody()
    let again: FCMSendRequest
    do {
        again = try FCMSendRequest.decode(encoded, context: FuzzInput.decoding)
    } catch {
        fatalError("an accepted request's jsonBody() is refused: \(error); body \(String(decoding: encoded, as: UTF8.self))")
    }
    guard again == request else {
        fatalError("an accepted request's jsonBody() decodes to another request: \(String(decoding: encoded, as: UTF8.self))")
    }
    return 0
}

@_cdecl("FuzzFCMv1_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
